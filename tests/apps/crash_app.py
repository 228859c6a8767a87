"""A worker application for the crash test, configured from `CRASH_APP_*` variables.

Run it as `python -m worker run tests.apps.crash_app:app --backend sqs --endpoint-url URL`.
It handles the queue `CRASH_APP_QUEUE`, whose bodies are `{"n": <number>}`. Each handler
works a short while (between `CRASH_APP_MIN_WORK_S` and `CRASH_APP_MAX_WORK_S`, drawn from the
message number and receive count, so a rerun of the same delivery takes as long), then
appends one line `<n> <worker> <receive count> <started> <ended> <message id>` to the file
`CRASH_APP_OUT` (worker: `CRASH_APP_WORKER`, else the pid; times in Unix seconds), and only
then returns. So a SIGKILL between the append and the delete leaves a line for a message that
will be delivered, and handled, again: a duplicate, which at-least-once allows.

The append is one `write` of a short line to a file opened with `O_APPEND`: on a local file
system such writes from several processes do not interleave.
"""

from __future__ import annotations

import os
import random
import time

import anyio

from worker import Message, Worker, WorkerConfig


def _env(name: str, default: str) -> str:
    return os.environ.get("CRASH_APP_" + name, default)


QUEUE = _env("QUEUE", "crash-test")
OUT = _env("OUT", "")
WORKER = _env("WORKER", str(os.getpid()))
MIN_WORK_S = float(_env("MIN_WORK_S", "0.05"))
MAX_WORK_S = float(_env("MAX_WORK_S", "0.4"))

app = Worker(WorkerConfig(max_in_flight=10), name="crash-app")

_out_fd: int | None = None


def _append(line: str) -> None:
    global _out_fd
    if _out_fd is None:
        _out_fd = os.open(OUT, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(_out_fd, line.encode())


def work_s(n: int, receive_count: int) -> float:
    """How long the handler of delivery `receive_count` of message `n` works."""
    return random.Random(n * 1_000 + receive_count).uniform(MIN_WORK_S, MAX_WORK_S)


@app.handler(QUEUE)
async def handle(message: Message) -> None:
    n = int(message.body["n"])
    started = time.time()
    await anyio.sleep(work_s(n, message.receive_count))
    fields = (n, WORKER, message.receive_count, f"{started:.3f}", f"{time.time():.3f}")
    _append(" ".join(map(str, (*fields, message.message_id))) + "\n")
