"""A worker for tests/cli/test_gc_cli.py: its one background task records the garbage
collector's thresholds as the running worker sees them, then ends the worker (a crash of a
background task stops it with status 1)."""

from __future__ import annotations

import gc

from worker import Message, Worker, WorkerContext

app = Worker()
#: The thresholds seen from inside the running worker.
seen: list[tuple[int, int, int]] = []


class Seen(Exception):
    """Ends the worker once the thresholds are recorded."""


@app.handler("gc-idle")
async def handle(message: Message) -> None:
    return None


@app.background
async def record(context: WorkerContext) -> None:
    seen.append(gc.get_threshold())
    raise Seen
