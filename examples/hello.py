"""The demo: a producer and a handler on the embedded in-memory engine.

Run it with `./scripts/demo` (or `lease-worker run examples.hello:app --log-level debug`).
Handlers take up to 14 s while the visibility timeout is 6 s, so every long handler's lease
is renewed several times, in batches (`lease.renewed ... leases=N`); no message is handled
twice. One body is not JSON: it fails to decode, is retried by the default error policy (at
once, then after a few seconds), and lands in the dead-letter queue after 3 receives. The
demo shuts itself down when all is done.
"""

from __future__ import annotations

import json
import random

import anyio
import structlog

from worker import (
    LeaseConfig,
    Message,
    OutgoingMessage,
    QueueAdmin,
    RedrivePolicy,
    ShutdownConfig,
    Worker,
    WorkerConfig,
    WorkerContext,
)
from worker.types import QueueSpec

MESSAGES = 40
QUEUE, DLQ = "hello", "hello-dlq"

app = Worker(
    WorkerConfig(
        lease=LeaseConfig(visibility_s=6, extension_s=6, renew_margin_s=2, coalesce_window_s=2),
        max_in_flight=25,
        wait_s=1,
        shutdown=ShutdownConfig(grace_s=5),
    )
)
log = structlog.get_logger("examples.hello")
done = anyio.Event()
handled: set[str] = set()


@app.on_startup
async def create_queues(context: WorkerContext) -> None:
    if isinstance(context.backend, QueueAdmin):
        await context.backend.create_queue(QueueSpec(DLQ))
        await context.backend.create_queue(
            QueueSpec(
                QUEUE, visibility_timeout_s=6, redrive=RedrivePolicy(DLQ, max_receive_count=3)
            )
        )


@app.handler(QUEUE)
async def greet(message: Message) -> None:
    work_s = float(message.body["work_s"])
    await anyio.sleep(work_s)
    if message.message_id in handled:
        log.error("demo.handled_twice", message_id=message.message_id)
    handled.add(message.message_id)
    log.info("demo.handled", work_s=work_s, renewals=message.lease.renewals)
    if len(handled) == MESSAGES:
        done.set()


@app.background
async def produce(context: WorkerContext) -> None:
    rng = random.Random(7)
    bodies = [
        json.dumps({"n": n, "work_s": round(rng.uniform(0.2, 14), 1)}) for n in range(MESSAGES)
    ]
    bodies.append("this body is not JSON")
    for start in range(0, len(bodies), 10):
        batch = [
            OutgoingMessage(entry_id=str(i), body=body)
            for i, body in enumerate(bodies[start : start + 10])
        ]
        await context.backend.send(QUEUE, batch)
    log.info("demo.produced", messages=len(bodies))
    await done.wait()
    with anyio.move_on_after(15):
        # A demo may poll: the undecodable body reaches the DLQ on its 4th receive.
        while (await context.backend.queue_info(DLQ)).approximate_visible < 1:  # noqa: ASYNC110
            await anyio.sleep(0.5)
    dead = (await context.backend.queue_info(DLQ)).approximate_visible
    log.info("demo.finished", handled=len(handled), dead_lettered=dead)
    context.request_shutdown()
