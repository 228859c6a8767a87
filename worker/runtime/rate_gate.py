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

#: The longest a retry of a store that is down may hold receives while failing open.
_RETRY_WHILE_OPEN_S = 1.0


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
        #: The pause after the next failed grant (doubling while the store stays down), and,
        #: failing open, when to ask the store again (until then: the local schedule).
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
        if self._store is None or self._clock.now() < self._retry_at:
            return await self._local(count, stopped)
        while not stopped.is_set():
            # Failing open, a store that stopped answering (a partition, a SIGSTOPped Redis)
            # must not hold receives for a whole call timeout at every retry: the local
            # schedule is already standing in, so a retry gets a short look.
            timeout_s = self._call_timeout_s
            if self._outage and self.limit.on_outage == "open":
                timeout_s = min(timeout_s, _RETRY_WHILE_OPEN_S)
            try:
                with anyio.fail_after(timeout_s):
                    wait_s = await self._store.grant(
                        self._key, self._grant, self.limit.per_s, self._burst
                    )
            except (RateStoreError, TimeoutError) as error:
                self._store_errors.inc()
                pause = self._pause
                self._pause = min(pause * 2, self._backoff_max_s)
                self._store_down(error, pause)
                if self.limit.on_outage == "open":
                    self._retry_at = self._clock.now() + pause
                    return await self._local(count, stopped)
                if not await self._sleep(pause, stopped):
                    return 0
                continue
            self._store_up()
            self._grants.inc()
            if not await self._sleep(wait_s, stopped):
                return 0  # granted and not used: the fleet runs under its limit, not over
            self._pool = self._grant
            taken = min(count, self._pool)
            self._pool -= taken
            return taken
        return 0

    def refund(self, count: int) -> None:
        """`count` tokens granted were not used (the receive brought fewer messages)."""
        if count <= 0:
            return
        if self._store is None or self._outage:
            self._schedule.refund(count, self._clock.now())
        else:
            self._pool = min(self._pool + count, self._grant)

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
