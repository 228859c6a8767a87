"""Idempotent orders on the embedded engine: each order is charged once, however often sent.

Run it with `lease-worker run examples.idempotent_orders:app --log-level info`. A producer
sends 10 orders, then sends 5 of them again (as a redrive from a DLQ would: new MessageIds,
same order ids). The guard, keyed by `order_id`, runs the handler once per order and deletes
the copies with the outcome `duplicate` (`handler.duplicate` in the log), handing each copy
the cached receipt. The demo shuts itself down when all 15 messages are settled.

For several processes, swap `MemoryStore()` for `RedisStore(Redis.from_url(url))` or
`DynamoDBStore(client, table)` (see docs/how-to/idempotency.md).
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import structlog

from worker import (
    LeaseConfig,
    Message,
    OutgoingMessage,
    QueueAdmin,
    Worker,
    WorkerConfig,
    WorkerContext,
)
from worker.idempotency import Idempotency, MemoryStore
from worker.types import QueueSpec

QUEUE = "orders"
ORDERS = 10
RESENT = 5

app = Worker(WorkerConfig(lease=LeaseConfig(visibility_s=10), wait_s=1))
idempotency = Idempotency(MemoryStore())
log = structlog.get_logger("examples.idempotent_orders")
charged: list[str] = []
settled = anyio.Event()
copies: list[str] = []


async def resend_receipt(message: Message, receipt: Any) -> None:
    copies.append(message.body["order_id"])
    log.info("demo.duplicate", order_id=message.body["order_id"], receipt=receipt)
    if len(charged) + len(copies) == ORDERS + RESENT:
        settled.set()


@app.on_startup
async def create_queue(context: WorkerContext) -> None:
    if isinstance(context.backend, QueueAdmin):
        await context.backend.create_queue(QueueSpec(QUEUE, visibility_timeout_s=10))


@app.handler(
    QUEUE,
    idempotent=idempotency.guard(
        key=lambda m: str(m.body["order_id"]),
        validate_payload=True,
        cache_result=True,
        on_duplicate=resend_receipt,
    ),
)
async def charge(message: Message) -> dict[str, str]:
    order_id = message.body["order_id"]
    await anyio.sleep(0.5)  # the payment call
    charged.append(order_id)
    log.info("demo.charged", order_id=order_id)
    if len(charged) + len(copies) == ORDERS + RESENT:
        settled.set()
    return {"receipt": f"R-{order_id}"}


@app.background
async def produce(context: WorkerContext) -> None:
    orders = [json.dumps({"order_id": f"A-{n}", "amount": 10 * n}) for n in range(ORDERS)]
    await context.backend.send(
        QUEUE, [OutgoingMessage(entry_id=str(i), body=body) for i, body in enumerate(orders)]
    )
    await anyio.sleep(2)  # the first deliveries are done: the copies come later
    again = orders[:RESENT]
    await context.backend.send(
        QUEUE, [OutgoingMessage(entry_id=str(i), body=body) for i, body in enumerate(again)]
    )
    await settled.wait()
    log.info("demo.finished", charged=len(charged), duplicates=len(copies))
    context.request_shutdown()
