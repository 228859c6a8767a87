"""A worker application for the SIGKILL takeover test, configured from `IDEM_APP_*`.

Run it as `python -m worker run tests.idempotency.sigkill_app:app --backend sqs ...`. It
handles `IDEM_APP_QUEUE` under an idempotency guard on the Redis at `IDEM_APP_REDIS_URL`
(key prefix `IDEM_APP_PREFIX`). Each run appends `start <worker> <time> <receive count>`
to `IDEM_APP_OUT` when it starts, works `IDEM_APP_WORK_S` seconds, then appends
`end <worker> <time> <receive count>` (times in Unix seconds; one unbuffered O_APPEND
write each, so a line written survives a SIGKILL the next instant).
"""

from __future__ import annotations

import os
import time

import anyio
from redis.asyncio import Redis

from worker import Message, Worker, WorkerConfig
from worker.idempotency import Idempotency, RedisStore


def _env(name: str, default: str = "") -> str:
    return os.environ.get("IDEM_APP_" + name, default)


WORKER = _env("WORKER", str(os.getpid()))
WORK_S = float(_env("WORK_S", "0.1"))

app = Worker(WorkerConfig(max_in_flight=1), name="idempotency-sigkill-app")
idempotency = Idempotency(
    RedisStore(Redis.from_url(_env("REDIS_URL", "redis://127.0.0.1:6379/0")), prefix=_env("PREFIX"))
)


def _append(*fields: object) -> None:
    fd = os.open(_env("OUT"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (" ".join(map(str, fields)) + "\n").encode())
    finally:
        os.close(fd)


@app.handler(_env("QUEUE", "idempotency-sigkill"), idempotent=idempotency.guard())
async def handle(message: Message) -> None:
    _append("start", WORKER, f"{time.time():.3f}", message.receive_count)
    await anyio.sleep(WORK_S)
    _append("end", WORKER, f"{time.time():.3f}", message.receive_count)
