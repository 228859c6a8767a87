"""`Idempotency`: the idempotency of one worker process on one store.

It owns what the process's guards share: the owner id its claims carry, the heartbeat that
keeps them live (and the task that sends what could not be sent where it arose), the
metrics, and the clock. One per `Worker`; each handler gets its guard from `guard(...)`
(`worker.idempotency.guard` says what a guard does with a message).
"""

from __future__ import annotations

import math
import os
import socket
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import structlog
from prometheus_client import CollectorRegistry

from worker.clock import Clock, LoopClock
from worker.config import LeaseConfig
from worker.core.lease import LeaseView
from worker.core.settlement import Outcome
from worker.errors import RegistrationError, Retry
from worker.idempotency.guard import DEFAULT_COMPLETED_TTL_S, IdempotencyGuard, KeyFunc, OnDuplicate
from worker.idempotency.heartbeat import Heartbeat
from worker.idempotency.metrics import IdempotencyMetrics
from worker.idempotency.store import IdempotencyStore

if TYPE_CHECKING:
    from worker.app import Worker, WorkerContext

__all__ = ["MAX_RETRY_AFTER_S", "Idempotency"]

#: The longest a message waits for the store to come back, per delivery.
MAX_RETRY_AFTER_S = 300.0
#: Added to the heartbeat's longest gap in the default takeover grace: a beat's own round
#: trip and the scheduling of two processes.
_GRACE_SLACK_S = 1.0


class Idempotency:
    """The idempotency of one worker process on one store: its owner id, heartbeat and
    metrics. Make one, and a guard per handler with `guard(...)`.

    `store_timeout_s`: a store call not answered in this long is a store error.
    `retry_after_s`: after a store error before the handler, the message comes back then.
    `clock_skew_s`: how far the workers' wall clocks may differ (NTP: well under a second);
    a claim is judged live that much past its heartbeat, so a takeover waits that long more.
    `stop_on_lapse`: when this process cannot renew its heartbeat (the store is out of its
    reach) and the beat is about to run out, cancel the handlers it guards (outcome
    `lease_lost`: their messages lapse and come back), since other workers will call their
    claims stale. Off by default: a store outage then does not stop work in progress.
    `takeover_grace_s`: how long a worker waits, once it finds a claim whose owner's
    heartbeat ran out (the owner did not let it go), before it takes the claim over: the
    owner may be alive, cut off by a store outage, with a completion it could not write;
    a live owner beats again (and then writes what it holds) within this long of the store
    coming back, and its claim is live again. Default: the longest gap between two beats of a
    process whose store is down (`renew_margin_s` + `store_timeout_s`) and a second more.
    Every worker that shares a store needs the same lease and store settings for it to hold.
    `clock`: the worker's time (default: the event loop's).
    """

    def __init__(
        self,
        store: IdempotencyStore,
        *,
        store_timeout_s: float = 5.0,
        retry_after_s: float = 5.0,
        clock_skew_s: float = 1.0,
        stop_on_lapse: bool = False,
        takeover_grace_s: float | None = None,
        clock: Clock | None = None,
    ) -> None:
        if not isinstance(store, IdempotencyStore):
            raise RegistrationError(f"store must be an IdempotencyStore, got {store!r}")
        for name, value in (("store_timeout_s", store_timeout_s), ("retry_after_s", retry_after_s)):
            if not (isinstance(value, int | float) and 0 < value < math.inf):
                raise RegistrationError(f"{name}={value!r}: must be a positive number")
        if not (isinstance(clock_skew_s, int | float) and 0 <= clock_skew_s < math.inf):
            raise RegistrationError(f"clock_skew_s={clock_skew_s!r}: must be a number >= 0")
        if takeover_grace_s is not None and not (
            isinstance(takeover_grace_s, int | float) and 0 <= takeover_grace_s < math.inf
        ):
            raise RegistrationError(f"takeover_grace_s={takeover_grace_s!r}: a number >= 0")
        self._takeover_grace_s = None if takeover_grace_s is None else float(takeover_grace_s)
        self.clock_skew_s = float(clock_skew_s)
        self.stop_on_lapse = bool(stop_on_lapse)
        #: The leases of the handlers running under a claim, by claim token.
        self.running: dict[str, LeaseView] = {}
        self.store = store
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
        self.store_timeout_s = float(store_timeout_s)
        self.retry_after_s = float(retry_after_s)
        self._clock = clock or LoopClock()
        self.metrics = IdempotencyMetrics(CollectorRegistry())  # until a worker starts it
        self.heartbeat = self._heartbeat(LeaseConfig())
        self._worker: Worker | None = None
        self._queues: set[str] = set()
        self.log = structlog.get_logger("lease_worker.idempotency")

    def guard(
        self,
        *,
        key: KeyFunc | None = None,
        namespace: str | None = None,
        completed_ttl_s: float = DEFAULT_COMPLETED_TTL_S,
        validate_payload: bool = False,
        cache_result: bool = False,
        on_duplicate: OnDuplicate | None = None,
    ) -> IdempotencyGuard:
        """A guard for `@app.handler(queue, idempotent=...)`.

        `key`: the message's key (default: its MessageId); give a business key to catch a
        message redriven from a DLQ (it gets a new MessageId) or sent twice.
        `namespace`: keys are `namespace:key` (default: the queue's name).
        `completed_ttl_s`: how long a completion is remembered.
        `validate_payload`: a key met again with another body is `PayloadMismatch`.
        `cache_result`: store the handler's return value (JSON) with the completion, and
        hand it to `on_duplicate(message, result)` when a duplicate comes.
        """
        return IdempotencyGuard(
            self,
            key=key,
            namespace=namespace,
            completed_ttl_s=completed_ttl_s,
            validate_payload=validate_payload,
            cache_result=cache_result,
            on_duplicate=on_duplicate,
        )

    def attach(self, worker: Worker, queue: str) -> None:
        """Hook onto `worker` once: start-up (metrics, first beat) and the heartbeat task."""
        if self._worker is not None and self._worker is not worker:
            # Two workers would run two heartbeats for one owner, and the first to stop
            # would end the other's claims.
            raise RegistrationError(
                f"this Idempotency already guards worker {self._worker.name!r}: "
                "make one Idempotency per Worker"
            )
        self._queues.add(queue)
        if self._worker is not None:
            return
        self._worker = worker
        worker.on_startup(self.start)
        worker.background(self.run)

    async def start(self, context: WorkerContext) -> None:
        self.metrics = IdempotencyMetrics.on(context.registry)
        if self._worker is not None:  # its settings as run (the CLI may have replaced them)
            self.heartbeat = self._heartbeat(self._worker.config.lease)
        for queue in self._queues:
            self.metrics.declare_queue(queue)
        if not await self.heartbeat.beat():  # the heartbeat task retries; claims wait
            self.log.error("idempotency.store_unavailable_at_start", owner=self.owner)

    async def run(self, context: WorkerContext) -> None:
        await self.heartbeat.run()

    @property
    def attached(self) -> bool:
        """True once registered with a worker (`@app.handler(..., idempotent=...)`)."""
        return self._worker is not None

    def now(self) -> float:
        """The worker's monotonic time."""
        return self._clock.now()

    def wall(self) -> float:
        return self._clock.now() + self._clock.wall_offset_s()

    async def sleep(self, seconds: float) -> None:
        await self._clock.sleep_until(self._clock.now() + seconds)

    @property
    def takeover_grace_s(self) -> float:
        """See the class docstring (the default follows the lease settings as run)."""
        if self._takeover_grace_s is not None:
            return self._takeover_grace_s
        return self.heartbeat.longest_gap_s + _GRACE_SLACK_S

    def completion_dropped(self, queue: str, message_id: str, reason: str) -> None:
        """A handler succeeded but its completion will never be recorded: the key may run
        again (see `Heartbeat`); logged and counted, by `reason` (`DROP_REASONS`)."""
        self.metrics.completions_dropped.labels(queue, reason).inc()
        self.log.error(
            "idempotency.completion_dropped", queue=queue, message_id=message_id, reason=reason
        )

    async def call(self, operation: str, make: Callable[[], Awaitable[Any]]) -> Any:
        return await self.heartbeat.call(operation, make)

    def unavailable(self, reason: str) -> Retry:
        """The message comes back after `retry_after_s`, or as long as the store has been
        down so far (at most `MAX_RETRY_AFTER_S`): a long outage does not spend the
        message's receives (toward its DLQ) every few seconds."""
        after = min(MAX_RETRY_AFTER_S, max(self.retry_after_s, self.heartbeat.down_for_s()))
        return Retry(math.ceil(after), f"idempotency store unavailable ({reason})")

    def _lapsing(self) -> None:
        if not self.running:
            return
        self.log.error("idempotency.heartbeat_lapsing", stopping=len(self.running))
        for lease in self.running.values():
            lease.cancel(Outcome.LEASE_LOST)  # settled as lost: left to lapse, not released

    def _heartbeat(self, lease: LeaseConfig) -> Heartbeat:
        heartbeat = Heartbeat(
            self.store,
            owner=self.owner,
            clock=self._clock,
            metrics=lambda: self.metrics,
            ttl_s=float(lease.extension_s),
            margin_s=lease.renew_margin_s,
            retry_s=lease.retry_interval_s,
            timeout_s=self.store_timeout_s,
        )
        if self.stop_on_lapse:
            heartbeat.on_lapse = self._lapsing
        return heartbeat
