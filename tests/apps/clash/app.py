"""A user's app, in a directory that also holds their own `worker.py` and `backends/`.

A background task sends one message to the app's own queue on the embedded memory engine;
the handler logs `clash_app.handled` (with `LEASE_WORKER_PROCESS_INDEX`, if set) and asks for
a shutdown, so a run that works ends by itself with status 0. Importing `backends.memory`
here shows that `backends` is lease-worker's package, not the folder next to this file.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import anyio
import structlog

from backends.memory import MemoryBackend
from worker import Message, OutgoingMessage, Worker, WorkerContext

QUEUE = "clash-test"

app = Worker(name="clash-app")
log = structlog.get_logger("clash_app")
_stop: list[Callable[[], None]] = []


@app.handler(QUEUE)
async def handle(message: Message) -> None:
    index = os.environ.get("LEASE_WORKER_PROCESS_INDEX")
    log.info("clash_app.handled", message_id=message.message_id, process_index=index)
    _stop[0]()


@app.background
async def send_one(context: WorkerContext) -> None:
    assert isinstance(context.backend, MemoryBackend)
    _stop.append(context.request_shutdown)
    result = await context.backend.send(QUEUE, [OutgoingMessage(entry_id="0", body="{}")])
    assert not result.failed, result.failed
    await anyio.sleep_forever()
