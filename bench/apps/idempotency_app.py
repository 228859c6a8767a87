"""The worker of bench/idempotency_outage.py, configured from `IDEM_*` variables.

    IDEM_QUEUE=jobs IDEM_OUT=DIR IDEM_REDIS_URL=redis://127.0.0.1:PORT/0 \
        lease-worker run bench.apps.idempotency_app:app --backend sqs --endpoint-url URL

Its handler (queue `IDEM_QUEUE`, JSON bodies `{"key": K, "cycle": C}`) runs under an
idempotency guard keyed by `K`, on the Redis at `IDEM_REDIS_URL` (key prefix
`IDEM_PREFIX`), and works `IDEM_WORK_S` seconds. Each run appends to `DIR/runs-<pid>.txt`:

    START <pid> <key> <cycle> <receive count> <wall time>
    END   <pid> <key> <cycle> <receive count> <wall time>

one `os.write` each to a file opened with `O_APPEND` (in the file as soon as written).
Leases: `LeaseConfig(visibility_s=IDEM_VISIBILITY_S)` (extension and margin by the
config's rules); `IDEM_MAX_IN_FLIGHT` messages at once; long polls of `IDEM_WAIT_S`; store
calls bounded by `IDEM_STORE_TIMEOUT_S`.
"""

from __future__ import annotations

import os
import time

import anyio
from redis.asyncio import Redis

from worker import LeaseConfig, Message, Worker, WorkerConfig
from worker.idempotency import Idempotency, RedisStore

__all__ = ["app", "idempotency"]


def _env(name: str, default: str) -> str:
    return os.environ.get("IDEM_" + name, default)


OUT = _env("OUT", ".")
WORK_S = float(_env("WORK_S", "3"))

app = Worker(
    WorkerConfig(
        max_in_flight=int(_env("MAX_IN_FLIGHT", "10")),
        wait_s=int(_env("WAIT_S", "20")),
        lease=LeaseConfig(visibility_s=int(_env("VISIBILITY_S", "10"))),
    ),
    name="idempotency-outage-app",
)
_redis = Redis.from_url(
    _env("REDIS_URL", "redis://127.0.0.1:6379/0"), socket_connect_timeout=1, socket_timeout=2
)
idempotency = Idempotency(
    RedisStore(_redis, prefix=_env("PREFIX", "idempotency-outage:")),
    store_timeout_s=float(_env("STORE_TIMEOUT_S", "5")),
)
_fd: int | None = None


def _append(kind: str, message: Message) -> None:
    global _fd
    if _fd is None:
        path = os.path.join(OUT, f"runs-{os.getpid()}.txt")
        _fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    body = message.body
    fields = (kind, os.getpid(), body["key"], body["cycle"], message.receive_count)
    os.write(_fd, (" ".join(map(str, (*fields, f"{time.time():.3f}"))) + "\n").encode())


_guard = idempotency.guard(key=lambda m: str(m.body["key"]))


@app.handler(_env("QUEUE", "idempotency-outage"), idempotent=_guard)
async def handle(message: Message) -> None:
    _append("START", message)
    await anyio.sleep(WORK_S)
    _append("END", message)
