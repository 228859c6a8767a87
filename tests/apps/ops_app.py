"""A busy worker for the operations tests: a producer that never stops, handlers that
outlive the visibility timeout (renewals), fail (retries), and one poison body an interval
(dead-lettered on its second receive), and one message held for a minute, so that every
panel of the dashboard has something to show within seconds. It counts fulfilled orders
in a metric of its own.

A library logs through the standard library inside each handler (`ops_app.library`), so
the JSON log shows its records with the message's context.
"""

from __future__ import annotations

import json
import logging
import random

import anyio
from prometheus_client import Counter

from worker import (
    AdaptiveConcurrency,
    FlowControl,
    LeaseConfig,
    Message,
    OutgoingMessage,
    QueueAdmin,
    RateLimit,
    RedrivePolicy,
    TenantCap,
    Worker,
    WorkerConfig,
    WorkerContext,
)
from worker.types import QueueSpec

QUEUE, DLQ = "orders", "orders-dlq"
#: A queue with every part of flow control on, for the dashboard's flow panel.
METERED = "metered"

app = Worker(
    WorkerConfig(
        lease=LeaseConfig(visibility_s=4, extension_s=4, renew_margin_s=1.5, coalesce_window_s=0.5),
        max_in_flight=50,
        wait_s=1,
    )
)
library = logging.getLogger("ops_app.library")
#: The application's own metric, on prometheus-client's default registry.
fulfilled = Counter("ops_app_orders_fulfilled", "Orders fulfilled.")


@app.on_startup
async def create_queues(context: WorkerContext) -> None:
    if isinstance(context.backend, QueueAdmin):
        await context.backend.create_queue(QueueSpec(DLQ))
        redrive = RedrivePolicy(DLQ, max_receive_count=1)
        await context.backend.create_queue(
            QueueSpec(QUEUE, visibility_timeout_s=2, redrive=redrive)
        )
        await context.backend.create_queue(QueueSpec(METERED))


@app.handler(QUEUE)
async def fulfil(message: Message) -> None:
    body = message.body
    library.info("fulfilling order %s", body["n"])
    await anyio.sleep(body["work_s"])
    if body.get("fail"):
        raise RuntimeError("the payment service said no")
    fulfilled.inc()


@app.handler(
    METERED,
    flow=FlowControl(
        rate=RateLimit(per_s=20),
        tenants=TenantCap(per_tenant=1),
        max_bytes=1_000_000,
        adaptive=AdaptiveConcurrency(),
    ),
)
async def meter(message: Message) -> None:
    await anyio.sleep(0.05)


@app.background
async def produce(context: WorkerContext) -> None:
    rng = random.Random(13)
    hold = {"n": -1, "work_s": 60}
    await context.backend.send(QUEUE, [OutgoingMessage(body=json.dumps(hold))])
    for n in range(1_000_000):
        bodies = [
            json.dumps({"n": n * 10 + i, "work_s": rng.choice((0.05, 0.3, 6.0)), "fail": i == 0})
            for i in range(5)
        ]
        bodies.append("not json")
        batch = [OutgoingMessage(entry_id=str(i), body=body) for i, body in enumerate(bodies)]
        await context.backend.send(QUEUE, batch)
        tenants = [OutgoingMessage(entry_id=str(i), body="{}", group_id="t") for i in range(3)]
        await context.backend.send(METERED, tenants)
        await anyio.sleep(1)
