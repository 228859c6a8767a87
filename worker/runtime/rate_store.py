"""Where a shared rate limit's schedule lives: Redis for a fleet, memory for one process.

A store answers one question, atomically: "grant `count` tokens of the limit named `key`
(`per_s` a second, `burst` at once): in how many seconds may they be used?" It never
refuses (`worker.core.rate.RateSchedule`): the caller waits, then uses them. A grant
whose answer is lost (the call landed, the answer did not come back) is simply not used:
the fleet then runs a little under its limit, never over it.

`RedisRateStore` runs the schedule as one Lua script on Redis's own clock (`TIME`), so
the pods' clocks need not agree; its key expires once the schedule has run idle, so an
unused limit leaves nothing behind. With Redis Cluster, each grant touches one key.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

import anyio

from worker.core.rate import RateSchedule

if TYPE_CHECKING:
    from redis.asyncio import Redis

__all__ = ["MemoryRateStore", "RateStore", "RateStoreError", "RedisRateStore", "rate_store"]


class RateStoreError(Exception):
    """The store could not be asked (down, unreachable, refused)."""


class RateStore(Protocol):
    async def grant(self, key: str, count: int, per_s: float, burst: int) -> float:
        """Seconds to wait before `count` tokens of `key` may be used (>= 0)."""
        ...

    async def close(self) -> None: ...


class MemoryRateStore:
    """Schedules in this process: shared by every worker that is given the same store (for
    tests, and for several workers in one process). `now`: the clock to grant on (the
    running event loop's by default)."""

    def __init__(self, now: Callable[[], float] = anyio.current_time) -> None:
        self._schedules: dict[str, RateSchedule] = {}
        self._now = now
        #: Grants asked, for tests.
        self.calls = 0

    async def grant(self, key: str, count: int, per_s: float, burst: int) -> float:
        self.calls += 1
        now = self._now()
        schedule = self._schedules.get(key)
        if schedule is None or schedule.per_s != per_s or schedule.burst != burst:
            tat = schedule.tat if schedule is not None else float("-inf")
            schedule = self._schedules[key] = RateSchedule(per_s, burst, tat)
        return schedule.grant(count, now) - now

    async def close(self) -> None:
        pass


# KEYS[1] the schedule (its TAT, seconds on Redis's clock); ARGV: count, seconds per token,
# burst. Returns the wait in seconds, as a string (Lua numbers come back as integers).
_GRANT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then tat = now end
local interval = tonumber(ARGV[2])
local next_tat = tat + tonumber(ARGV[1]) * interval
redis.call('SET', KEYS[1], string.format('%.6f', next_tat), 'PX',
  math.ceil((next_tat - now) * 1000) + 60000)
local wait = next_tat - tonumber(ARGV[3]) * interval - now
if wait < 0 then wait = 0 end
return string.format('%.6f', wait)
"""


class RedisRateStore:
    """Schedules in Redis, through redis-py's asyncio client (the `redis` extra)."""

    def __init__(self, redis: Redis) -> None:
        self._redis = redis
        self._script = redis.register_script(_GRANT)
        self.calls = 0

    @classmethod
    def from_url(cls, url: str, *, timeout_s: float) -> RedisRateStore:
        try:
            from redis.asyncio import Redis
            from redis.asyncio.retry import Retry
            from redis.backoff import NoBackoff
            from redis.exceptions import ConnectionError as RedisConnectionError
        except ImportError as missing:  # pragma: no cover - the extra is in the dev install
            raise RateStoreError(
                "a shared rate limit needs redis-py: pip install 'lease-worker[redis]'"
            ) from missing
        # One retry on a broken connection: after a Redis restart the pooled connection is
        # dead, and without it the first grant of every worker failed (a store error, a
        # warning and, failing closed, a pause). A grant sent twice only wastes tokens.
        client = Redis.from_url(
            url,
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
            retry=Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,)),
        )
        return cls(client)

    async def grant(self, key: str, count: int, per_s: float, burst: int) -> float:
        from redis.exceptions import RedisError

        self.calls += 1
        try:
            answer = await self._script(keys=[key], args=[count, repr(1.0 / per_s), burst])
        except (RedisError, OSError) as error:
            raise RateStoreError(f"{type(error).__name__}: {str(error)[:200]}") from None
        return float(answer.decode() if isinstance(answer, bytes) else answer)

    async def close(self) -> None:
        await self._redis.aclose()


#: `memory://NAME` stores: one per name in this process.
_IN_PROCESS: dict[str, MemoryRateStore] = {}


def rate_store(url: str, *, timeout_s: float) -> RateStore:
    """The store a `RateLimit.shared` URL names: Redis, or `memory://NAME`, one schedule
    shared by the workers of this process that name it (several apps in one process, tests)."""
    if url.startswith("memory://"):
        store = _IN_PROCESS.get(url)
        if store is None:
            store = _IN_PROCESS[url] = MemoryRateStore()
        return store
    return RedisRateStore.from_url(url, timeout_s=timeout_s)
