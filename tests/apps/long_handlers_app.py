"""A worker whose every slot holds a long, healthy handler: 10 messages sent at start-up,
max-in-flight 10, each handler working for an hour. Nothing else is received and nothing
completes; the worker renews the 10 leases every few seconds (a 4 s visibility). For the
alert test that a busy worker is not a stuck one (tests/ops/test_alerts_on_live_workers.py).
"""

from __future__ import annotations

import anyio

from worker import (
    LeaseConfig,
    Message,
    OutgoingMessage,
    QueueAdmin,
    Worker,
    WorkerConfig,
    WorkerContext,
)
from worker.types import QueueSpec

QUEUE = "jobs"
SLOTS = 10

app = Worker(
    WorkerConfig(
        lease=LeaseConfig(visibility_s=4, extension_s=4, renew_margin_s=1.5, coalesce_window_s=0.5),
        max_in_flight=SLOTS,
        wait_s=1,
    )
)


@app.handler(QUEUE)
async def work(message: Message) -> None:
    await anyio.sleep(3600)


@app.on_startup
async def send_the_work(context: WorkerContext) -> None:
    if isinstance(context.backend, QueueAdmin):
        await context.backend.create_queue(QueueSpec(QUEUE))
    batch = [OutgoingMessage(entry_id=str(n), body=f'{{"n": {n}}}') for n in range(SLOTS)]
    await context.backend.send(QUEUE, batch)
