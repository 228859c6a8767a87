"""A queue's rate limit, in front of its receives.

Each receive asks the gate how many messages may start before it is sent (`acquire`), and
hands back what the answer did not bring (`refund`): a message the limit holds back is never
received, so no lease time is spent waiting. A local limit is a `RateSchedule` in this
process; a shared one asks its `RateStore` for `grant` tokens at a time and keeps what a
receive did not use for the next (at most one grant), so a fleet makes one store call per
`grant` messages.

While the store cannot be asked, `on_outage` decides: 'closed' waits (doubling pauses, a
stop ends them) and receives nothing; 'open' goes on with this process's own schedule at
the full rate until the store answers again. Either way nothing is received that the gate
did not grant, and nothing held is touched.

Failing open, the gate asks the store again before each grant of the local schedule, and a
local grant is at most `grant` tokens: the first grant asked for once the store answers
again comes from it, and what the local schedule granted before is one grant at most per
receive under way. A call that fails holds receives while it is under way, so the next one
waits nine times as long as the failed one took (counted up to the short look, `_LOOK_S`):
a refused connection (a restarting Redis) fails in well under a millisecond and is asked
again at the next grant, while a store that answers nothing (a partition, a SIGSTOPped
Redis) gets a 1 s look every 10 s at most. Asking costs receives a tenth of the time at
most, never a hot loop.
"""

from __future__ import annotations

from typing import Any

import anyio
import structlog

from worker.clock import Clock
from worker.config import RateLimit
from worker.core.rate import RateSchedule
from worker.runtime.metrics import Metrics
from worker.runtime.rate_store import RateStore, RateStoreError

__all__ = ["RateGate"]

#: The longest a call to a store that is down may hold receives while failing open.
_LOOK_S = 1.0
#: Failing open, the share of the time that calls to a store that is down may hold receives.
_LOOK_SHARE = 0.1


class RateGate:
    def __init__(
        self,
        queue: str,
        limit: RateLimit,
        *,
        batch: int,
        store: RateStore | None,
        clock: Clock,
        metrics: Metrics,
        call_timeout_s: float,
        backoff_s: float,
        backoff_max_s: float,
        logger: Any = None,
    ) -> None:
        self.queue = queue
        self.limit = limit
        self._burst = limit.burst_for(batch)
        self._schedule = RateSchedule(limit.per_s, self._burst)
        #: Tokens asked of a shared store at once: never more than a burst.
        self._grant = min(limit.grant, self._burst)
        self._store = store
        self._key = limit.key or f"lease-worker:rate:{queue}"
        self._clock = clock
        self._call_timeout_s = call_timeout_s
        self._backoff_s = backoff_s
        self._backoff_max_s = backoff_max_s
        self._log = logger or structlog.get_logger("lease_worker.flow")
        #: Tokens granted by the store and not used yet.
        self._pool = 0
        self._outage = False
        #: Failing closed, the pause after the next failed grant (doubling while the store
        #: stays down); failing open, when to ask the store again (until then: the local
        #: schedule, without asking).
        self._pause = backoff_s
        self._retry_at = float("-inf")
        self._waited = metrics.flow_rate_wait.labels(queue)
        self._grants = metrics.flow_rate_grants.labels(queue)
        self._store_errors = metrics.flow_rate_store_errors.labels(queue)

    async def acquire(self, count: int, stopped: anyio.Event) -> int:
        """Wait until up to `count` messages may start; returns how many (0 once stopped)."""
        if self._pool:
            taken = min(count, self._pool)
            self._pool -= taken
            return taken
        # A receive waits for at most a burst: a low rate receives fewer messages sooner
        # rather than a full batch after seconds (the burst is a second's worth, or 10).
        count = min(count, self._burst)
        if self._store is None:
            return await self._local(count, stopped)
        if self._outage and self.limit.on_outage == "open":
            return await self._open(self._store, count, stopped)
        while not stopped.is_set():
            asked_at = self._clock.now()
            try:
                wait_s = await self._ask(self._store, self._call_timeout_s)
            except (RateStoreError, TimeoutError) as error:
                pause = self._pause
                self._pause = min(pause * 2, self._backoff_max_s)
                self._store_down(error, pause)
                if self.limit.on_outage == "open":
                    self._ask_later(asked_at)
                    return await self._local(min(count, self._grant), stopped)
                if not await self._sleep(pause, stopped):
                    return 0
                continue
            return await self._granted(wait_s, count, stopped)
        return 0

    def refund(self, count: int) -> None:
        """`count` tokens granted were not used (the receive brought fewer messages)."""
        if count <= 0:
            return
        if self._store is None or self._outage:
            self._schedule.refund(count, self._clock.now())
        else:
            self._pool = min(self._pool + count, self._grant)

    async def _open(self, store: RateStore, count: int, stopped: anyio.Event) -> int:
        """Failing open: the store if it answers (asked when asking is due), else the local
        schedule, one grant at most, so that little is granted outside the shared limit
        once the store is back."""
        asked_at = self._clock.now()
        if asked_at >= self._retry_at:
            # A store that stopped answering (a partition, a SIGSTOPped Redis) must not hold
            # receives for a whole call timeout: the local schedule is standing in.
            try:
                wait_s = await self._ask(store, min(self._call_timeout_s, _LOOK_S))
            except (RateStoreError, TimeoutError):
                self._ask_later(asked_at)
            else:
                return await self._granted(wait_s, count, stopped)
        return await self._local(min(count, self._grant), stopped)

    async def _ask(self, store: RateStore, timeout_s: float) -> float:
        """One grant from the store: the seconds to wait before using it."""
        try:
            with anyio.fail_after(timeout_s):
                return await store.grant(self._key, self._grant, self.limit.per_s, self._burst)
        except (RateStoreError, TimeoutError):
            self._store_errors.inc()
            raise

    def _ask_later(self, asked_at: float) -> None:
        """Failing open, a failed call held receives for as long as it took (a look at
        most): the store is asked again after nine times that, so that asking holds
        receives `_LOOK_SHARE` of the time at most. A refusal takes next to nothing, and the
        store is asked again at the next grant."""
        now = self._clock.now()
        spent = min(now - asked_at, _LOOK_S)
        self._retry_at = now + spent * (1 / _LOOK_SHARE - 1)

    async def _granted(self, wait_s: float, count: int, stopped: anyio.Event) -> int:
        """The store answered: wait for its grant, and take `count` of it."""
        self._store_up()
        self._grants.inc()
        if not await self._sleep(wait_s, stopped):
            return 0  # granted and not used: the fleet runs under its limit, not over
        self._pool = self._grant
        taken = min(count, self._pool)
        self._pool -= taken
        return taken

    async def _local(self, count: int, stopped: anyio.Event) -> int:
        now = self._clock.now()
        at = self._schedule.grant(count, now)
        if not await self._sleep(at - now, stopped):
            self._schedule.refund(count, self._clock.now())
            return 0
        return count

    async def _sleep(self, seconds: float, stopped: anyio.Event) -> bool:
        """Wait `seconds` unless stopped first; False if stopped."""
        if seconds > 0:
            self._waited.inc(seconds)
            with anyio.move_on_after(seconds):
                await stopped.wait()
        return not stopped.is_set()

    def _store_down(self, error: BaseException, pause: float) -> None:
        if not self._outage:
            self._outage = True
            self._log.warning(
                "flow.rate_store_unreachable",
                queue=self.queue,
                error=str(error)[:200] or type(error).__name__,
                on_outage=self.limit.on_outage,
                retry_in_s=None if self.limit.on_outage == "open" else pause,
            )

    def _store_up(self) -> None:
        self._pause = self._backoff_s
        if self._outage:
            self._outage = False
            self._log.info("flow.rate_store_back", queue=self.queue)
