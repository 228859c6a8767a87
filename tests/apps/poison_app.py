"""One undecodable body on a queue without a dead-letter queue, under the default error policy.

For the real-process check of issue 28 (item 1): `lease-worker run tests.apps.poison_app:app
--backend memory --log-format json` sends the body, runs `POISON_RUN_S` seconds (default 60)
and shuts down; each receive of the body is one `handler.undecodable_body` line.
"""

from __future__ import annotations

import os

import anyio

from worker import Message, OutgoingMessage, Worker, WorkerConfig, WorkerContext

QUEUE = "poison"
# A short long poll: the shutdown waits for the poll in flight.
app = Worker(WorkerConfig(wait_s=1))


@app.handler(QUEUE)
async def handle(message: Message) -> None:
    raise AssertionError("an undecodable body never reaches the handler")


@app.background
async def send_then_stop(context: WorkerContext) -> None:
    await context.backend.send(QUEUE, [OutgoingMessage(body="this body is not JSON")])
    await anyio.sleep(float(os.environ.get("POISON_RUN_S", "60")))
    context.request_shutdown()
