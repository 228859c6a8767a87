"""A worker with nothing to do: for tests of the process supervisor."""

from __future__ import annotations

from worker import Message, Worker

app = Worker()


@app.handler("idle")
async def handle(message: Message) -> None:
    return None
