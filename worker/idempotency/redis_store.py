"""`RedisStore`: idempotency records in Redis, through redis-py's asyncio client.

Optional extra: `pip install 'lease-worker[redis]'`. Each record is one string key holding
the record as JSON; each conditional operation is one Lua script, so it runs atomically on
the server. Every key gets a native expiry (PEXPIREAT) a little after the record's own, as
garbage collection only: the scripts decide from the times in the records, which the
caller passes. With Redis Cluster, each operation touches one key, so any slot layout works.

::

    from redis.asyncio import Redis
    store = RedisStore(Redis.from_url("redis://localhost:6379/0"))
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from worker.idempotency.record import GC_SLACK_S, Record
from worker.idempotency.store import StoreError

if TYPE_CHECKING:
    from redis.asyncio import Redis

__all__ = ["RedisStore"]

#: Native expiry this long after a record's own: a reader never finds a record gone that
#: its times still call live, even with some clock skew between Redis and the workers.

# KEYS[1] record key; ARGV: record json, now, native expiry (ms since the epoch)
_CREATE = """
local current = redis.call('GET', KEYS[1])
if current then
  local record = cjson.decode(current)
  if record['state'] ~= 'completed' or tonumber(record['expires_at']) > tonumber(ARGV[2]) then
    return current
  end
end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('PEXPIREAT', KEYS[1], ARGV[3])
return false
"""

# KEYS[1] record key; ARGV: record json, expected token, native expiry (ms)
_REPLACE = """
local current = redis.call('GET', KEYS[1])
if not current or cjson.decode(current)['token'] ~= ARGV[2] then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('PEXPIREAT', KEYS[1], ARGV[3])
return 1
"""

# KEYS[1] record key; ARGV: expected token
_REMOVE = """
local current = redis.call('GET', KEYS[1])
if not current or cjson.decode(current)['token'] ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
return 1
"""


class RedisStore:
    """An `IdempotencyStore` on Redis. `prefix` namespaces the keys (one per application)."""

    def __init__(self, client: Redis, *, prefix: str = "lease-worker:idempotency:") -> None:
        from redis.exceptions import RedisError  # the optional extra, needed only here

        self._client = client
        self._prefix = prefix
        self._errors: tuple[type[BaseException], ...] = (RedisError, OSError)
        self._create = client.register_script(_CREATE)
        self._replace = client.register_script(_REPLACE)
        self._remove = client.register_script(_REMOVE)

    async def create(self, record: Record, *, now: float) -> Record | None:
        args = [record.to_json(), repr(now), _gc_ms(record)]
        found = await self._run("create", self._create, self._key(record.key), args)
        return None if not found else Record.from_json(found)

    async def replace(self, record: Record, *, token: str) -> bool:
        args = [record.to_json(), token, _gc_ms(record)]
        return bool(await self._run("replace", self._replace, self._key(record.key), args))

    async def remove(self, key: str, *, token: str) -> bool:
        return bool(await self._run("remove", self._remove, self._key(key), [token]))

    async def beat(self, owner: str, *, until: float) -> None:
        try:
            await self._client.set(
                self._owner(owner), repr(until), pxat=math.ceil((until + GC_SLACK_S) * 1000)
            )
        except self._errors as error:
            raise StoreError("beat", type(error).__name__) from error

    async def beat_of(self, owner: str) -> float | None:
        try:
            found = await self._client.get(self._owner(owner))
        except self._errors as error:
            raise StoreError("beat_of", type(error).__name__) from error
        return None if found is None else float(found)

    async def aclose(self) -> None:
        await self._client.aclose()

    async def _run(self, operation: str, script: Any, key: str, args: list[str]) -> Any:
        try:
            return await script(keys=[key], args=args)
        except self._errors as error:
            raise StoreError(operation, type(error).__name__) from error

    def _key(self, key: str) -> str:
        return f"{self._prefix}key:{key}"

    def _owner(self, owner: str) -> str:
        return f"{self._prefix}owner:{owner}"


def _gc_ms(record: Record) -> str:
    return str(math.ceil((max(record.expires_at, record.stale_at) + GC_SLACK_S) * 1000))
