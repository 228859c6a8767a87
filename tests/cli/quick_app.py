"""A worker with nothing to do that stops quickly (short long polls) on any backend: for
tests that run `lease-worker run` on an SQS endpoint and signal it once it has started."""

from __future__ import annotations

from worker import Message, Worker, WorkerConfig

app = Worker(WorkerConfig(wait_s=1))


@app.handler("idle")
async def handle(message: Message) -> None:
    return None
