"""lease-worker with a no-op handler, for bench/side_by_side.py.

    BENCH_QUEUE=side-by-side BENCH_MESSAGES=N lease-worker run bench.apps.noop:app \
        --backend sqs --endpoint-url http://127.0.0.1:PORT --region us-east-1

Leases are on with the defaults (visibility 30 s, renewed 10 s before the deadline), which a
short handler never reaches. The body is taken raw, as the peers take it. Prints "ready" at
start-up and "done" once N handlers have returned (their deletes may still be lingering).
"""

from __future__ import annotations

import os
import sys

from worker import Message, Worker, WorkerContext

QUEUE = os.environ.get("BENCH_QUEUE", "side-by-side")
EXPECTED = int(os.environ.get("BENCH_MESSAGES", "0"))

app = Worker(name="bench-noop")
handled = 0


@app.on_startup
async def ready(context: WorkerContext) -> None:
    print("ready", flush=True)


@app.handler(QUEUE, decode="raw")
async def noop(message: Message) -> None:
    global handled
    handled += 1
    if handled == EXPECTED:
        sys.stdout.write("done\n")
        sys.stdout.flush()
