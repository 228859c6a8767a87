"""Idempotent handlers: completion records whose in-progress state follows the lease.

::

    from worker.idempotency import Idempotency, RedisStore

    idempotency = Idempotency(RedisStore(Redis.from_url(url)))

    @app.handler("orders", idempotent=idempotency.guard(key=lambda m: m.body["order_id"]))
    async def handle(message: Message) -> None: ...

What the guard promises: one key's handler never runs twice at once (across processes that
share the store), and never again after a recorded completion within `completed_ttl_s`; a
completion the store could not take during an outage is written before another worker may
take the key over (or, if its claim was taken over anyway, logged and counted as dropped).
What it cannot: undo side effects a handler made before a crash (the next run repeats
them), or stop a synchronous handler's thread that runs on after its lease was lost.
Stores: `MemoryStore` (tests, one process), `RedisStore` (extra `[redis]`),
`DynamoDBStore` (extra `[dynamodb]`); each passes one contract suite. See
docs/how-to/idempotency.md.
"""

from worker.idempotency.dynamodb_store import DynamoDBStore, create_table
from worker.idempotency.guard import IdempotencyGuard, NotAttached, PayloadMismatch
from worker.idempotency.memory_store import MemoryStore
from worker.idempotency.metrics import IdempotencyMetrics
from worker.idempotency.process import Idempotency
from worker.idempotency.record import Record, RecordState
from worker.idempotency.redis_store import RedisStore
from worker.idempotency.store import IdempotencyStore, StoreError

__all__ = (
    "DynamoDBStore",
    "Idempotency",
    "IdempotencyGuard",
    "IdempotencyMetrics",
    "IdempotencyStore",
    "MemoryStore",
    "NotAttached",
    "PayloadMismatch",
    "Record",
    "RecordState",
    "RedisStore",
    "StoreError",
    "create_table",
)
