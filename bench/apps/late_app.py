"""The worker of bench/late_receives.py, configured from `LATE_*` variables.

    LATE_QUEUE=jobs LATE_OUT=DIR LATE_NAME=held LATE_WORK_S=3 \
        PYTHONPATH=<tree>:<this folder> python -m worker run late_app:app --backend sqs ...

It imports nothing but lease-worker's public API, so that the bench can run it on another
checkout of the runtime (an older commit): the bench puts this folder on `PYTHONPATH` after
that checkout and names the app `late_app:app`. Leases and long polls are the
`WorkerConfig` defaults; the bench sets the visibility with `--visibility-s` when it wants
another one.

Its handler (queue `LATE_QUEUE`, bodies taken raw and never written anywhere) works
`LATE_WORK_S` seconds, asks `message.lease.ensure_held()`, then makes its side effect: a
line appended to `DIR/effects.txt`, which every process shares. A run writes:

    START  <name> <pid> <message id> <receive count> <monotonic time>
    EFFECT <name> <pid> <message id> <receive count> <monotonic time> held|refused
    END    <name> <pid> <message id> <receive count> <monotonic time> ok|<exception type>

`held`: `ensure_held()` passed just before the line; `refused`: it raised, the line is
written anyway (so the bench sees what an unfenced handler would have done) and the error
goes on. Times are `time.monotonic()`: CLOCK_MONOTONIC, one clock for every process on the
machine, the bench's proxy included. Each line is one `os.write` to a file opened with
`O_APPEND`, so lines of several processes never mix.
"""

from __future__ import annotations

import os
import time

import anyio

from worker import LeaseLostError, Message, Worker, WorkerConfig

__all__ = ["app"]

QUEUE = os.environ.get("LATE_QUEUE", "late")
OUT = os.environ.get("LATE_OUT", ".")
NAME = os.environ.get("LATE_NAME", "worker")
WORK_S = float(os.environ.get("LATE_WORK_S", "3"))

app = Worker(WorkerConfig(), name="late-app")

_fd: int | None = None


def _write(kind: str, message: Message, *extra: str) -> None:
    global _fd
    if _fd is None:
        path = os.path.join(OUT, "effects.txt")
        _fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    fields = (kind, NAME, os.getpid(), message.message_id, message.receive_count)
    line = " ".join(map(str, (*fields, f"{time.monotonic():.6f}", *extra)))
    os.write(_fd, (line + "\n").encode())


@app.handler(QUEUE, decode="raw")
async def handle(message: Message) -> None:
    _write("START", message)
    try:
        await anyio.sleep(WORK_S)
        try:
            message.lease.ensure_held()
        except LeaseLostError:
            _write("EFFECT", message, "refused")
            raise
        _write("EFFECT", message, "held")
    except BaseException as error:
        _write("END", message, type(error).__name__)
        raise
    _write("END", message, "ok")
