"""A worker for tests/cli/test_gc_cli.py: its one background task prints the garbage
collector's thresholds as the running worker sees them (`gc-threshold A B C`), then ends
the worker (a crash of a background task stops it with status 1)."""

from __future__ import annotations

import gc

from worker import Message, Worker, WorkerContext

app = Worker()


class Seen(Exception):
    """Ends the worker once the thresholds are printed."""


@app.handler("gc-idle")
async def handle(message: Message) -> None:
    return None


@app.background
async def record(context: WorkerContext) -> None:
    print("gc-threshold", *gc.get_threshold(), flush=True)
    raise Seen
