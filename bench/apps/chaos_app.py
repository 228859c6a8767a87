"""The worker of bench/lease_chaos.py, configured from `CHAOS_*` variables.

    CHAOS_QUEUE=chaos CHAOS_OUT=DIR lease-worker run bench.apps.chaos_app:app \
        --backend sqs --endpoint-url http://127.0.0.1:PORT --region us-east-1

Its handler (queue `CHAOS_QUEUE`, bodies taken raw) works for a time drawn from the message
id alone (uniform in `CHAOS_MIN_WORK_S`..`CHAOS_MAX_WORK_S`: a rerun of a message takes as
long), then "commits its side effect": a COMMIT line. Each run appends to `DIR/runs-<pid>.txt`:

    START  <pid> <message id> <receive count> <loop time> <wall time>
    COMMIT <pid> <message id> <receive count> <loop time> <wall time>
    ABORT  <pid> <message id> <receive count> <loop time> <wall time> <exception type>

(loop time: the event loop's monotonic clock; wall time: `time.time()`). ABORT is written
when the work is interrupted (a lost lease's cancellation, a shutdown), before the exception
goes on. Each line is one `os.write` to a file opened with `O_APPEND`: in the file as soon as
written, whatever happens to the process next (a SIGSTOP, a SIGKILL).

Leases: `LeaseConfig(visibility_s=CHAOS_VISIBILITY_S)`, with `renew_margin_s` from
`CHAOS_RENEW_MARGIN_S` when set (else the config's own rule); `CHAOS_MAX_IN_FLIGHT` messages
at once (default 10); long polls of `CHAOS_WAIT_S` (default 20).
"""

from __future__ import annotations

import asyncio
import os
import random
import time
import zlib

import anyio

from worker import LeaseConfig, Message, Worker, WorkerConfig

__all__ = ["app", "work_s"]


def _env(name: str, default: str) -> str:
    return os.environ.get("CHAOS_" + name, default)


QUEUE = _env("QUEUE", "chaos")
OUT = _env("OUT", ".")
MIN_WORK_S = float(_env("MIN_WORK_S", "1"))
MAX_WORK_S = float(_env("MAX_WORK_S", "4"))
_margin = _env("RENEW_MARGIN_S", "")

app = Worker(
    WorkerConfig(
        max_in_flight=int(_env("MAX_IN_FLIGHT", "10")),
        wait_s=int(_env("WAIT_S", "20")),
        lease=LeaseConfig(
            visibility_s=int(_env("VISIBILITY_S", "6")),
            renew_margin_s=float(_margin) if _margin else None,
        ),
    ),
    name="chaos-app",
)

_fd: int | None = None


def _append(kind: str, message: Message, *extra: object) -> None:
    global _fd
    if _fd is None:
        path = os.path.join(OUT, f"runs-{os.getpid()}.txt")
        _fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    loop_time = asyncio.get_running_loop().time()
    fields = (kind, os.getpid(), message.message_id, message.receive_count)
    line = " ".join(map(str, (*fields, f"{loop_time:.3f}", f"{time.time():.3f}", *extra)))
    os.write(_fd, (line + "\n").encode())


def work_s(message_id: str, low: float = MIN_WORK_S, high: float = MAX_WORK_S) -> float:
    """How long the handler works on `message_id`, every time it runs."""
    return random.Random(zlib.crc32(message_id.encode())).uniform(low, high)


@app.handler(QUEUE, decode="raw")
async def handle(message: Message) -> None:
    _append("START", message)
    try:
        await anyio.sleep(work_s(message.message_id))
    except BaseException as error:
        _append("ABORT", message, type(error).__name__)
        raise
    _append("COMMIT", message)
