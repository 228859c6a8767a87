"""One queue's flow control, beyond `max_in_flight`: what its `FlowControl` turns on.

- `rate`: a `RateGate` the receiver asks before each receive;
- `tenants`: per-tenant caps (`Tenants`) the supervisor applies to each message received
  from a standard queue (a FIFO queue already runs each group one message at a time);
- bytes: the receiver counts what the messages held cost in `slots` when `max_bytes` is set,
  and sizes each receive to what is left (`worker.core.byte_budget`);
- adaptive: a `ConcurrencyLimit` fed with each handler's time and outcome, applied to
  `slots` (never above `max_in_flight`).

With every part off the supervisor makes no `QueueFlow` at all: the hot path is unchanged.
"""

from __future__ import annotations

from typing import Any

import structlog

from worker.clock import Clock
from worker.config import FlowControl
from worker.core.concurrency import ConcurrencyLimit
from worker.core.lease import Lease
from worker.core.settlement import Outcome
from worker.runtime.metrics import Metrics
from worker.runtime.rate_gate import RateGate
from worker.runtime.slots import Slots
from worker.runtime.tenants import Tenants
from worker.types import ReceivedMessage

__all__ = ["QueueFlow"]

#: Outcomes that say the downstream struggles (the adaptive limit backs off); a `Retry` too
#: when `AdaptiveConcurrency.retry_backs_off` says so, else it is not sampled.
_FAILED = frozenset({Outcome.RETRY, Outcome.FAILED, Outcome.TIMED_OUT, Outcome.LEASE_LOST})
#: Outcomes that say nothing of the downstream (not sampled).
_UNSAMPLED = frozenset({Outcome.SHUTDOWN, Outcome.SKIPPED})


class QueueFlow:
    def __init__(
        self,
        queue: str,
        flow: FlowControl,
        *,
        slots: Slots,
        rate: RateGate | None,
        fifo: bool,
        clock: Clock,
        metrics: Metrics,
        dead_letters: bool = False,
        logger: Any = None,
    ) -> None:
        self.queue = queue
        self.flow = flow
        self.slots = slots
        self.rate = rate
        self._clock = clock
        log = logger or structlog.get_logger("lease_worker.flow")
        self.tenants: Tenants | None = None
        if flow.tenants is not None:
            if fifo:
                log.info(
                    "flow.tenant_cap_ignored",
                    queue=queue,
                    reason="a FIFO queue runs each message group one message at a time",
                )
            else:
                self.tenants = Tenants(
                    flow.tenants,
                    queue=queue,
                    slots=slots,
                    dead_letters=dead_letters,
                    now=clock.now,
                    on_key_error=metrics.flow_tenant_key_errors.labels(queue).inc,
                    on_waiting=metrics.flow_tenant_waiting.labels(queue).inc,
                    logger=log,
                )
        self.limit: ConcurrencyLimit | None = None
        #: What the adaptive limit does not sample: a `Retry` too, unless told otherwise.
        retry_backs_off = flow.adaptive is not None and flow.adaptive.retry_backs_off
        self._unsampled = _UNSAMPLED if retry_backs_off else _UNSAMPLED | {Outcome.RETRY}
        #: Handlers running (by message id: when each started), and held messages whose
        #: handler ended: for the adaptive limit only.
        self._started: dict[str, float] = {}
        self._ended: set[str] = set()
        self._gone: set[str] = set()  # leases that ended while their handler ran
        self._limit_gauge = metrics.flow_concurrency_limit.labels(queue)
        if flow.adaptive is not None:
            adaptive = flow.adaptive
            self.limit = ConcurrencyLimit(
                largest=slots.capacity,
                smallest=min(adaptive.smallest, slots.capacity),
                initial=adaptive.initial,
                alpha=adaptive.alpha,
                beta=adaptive.beta,
                backoff=adaptive.backoff,
            )
            slots.set_limit(self.limit.current)
        self._limit_gauge.set(slots.limit)
        self.tenant_released = metrics.flow_tenant_released.labels(queue)

    def started(self, received: ReceivedMessage) -> None:
        """The message's handler starts now (timed for the adaptive limit)."""
        if self.limit is not None:
            self._started[received.message_id] = self._clock.now()

    def observed(self, received: ReceivedMessage, outcome: Outcome) -> None:
        """A handler ended with `outcome`."""
        if self.limit is None:
            return
        started = self._started.pop(received.message_id, None)
        if started is None:
            return
        if received.message_id in self._gone:
            self._gone.discard(received.message_id)  # nothing held: no slot to count
        else:
            self._ended.add(received.message_id)
            self.slots.handler_ended()
        if outcome in self._unsampled:
            return
        changed = self.limit.record(
            self._clock.now() - started,
            failed=outcome in _FAILED,
            running=len(self._started) + 1,
        )
        if changed:
            self.slots.set_limit(self.limit.current)
            self._limit_gauge.set(self.limit.current)

    def not_started(self, received: ReceivedMessage) -> None:
        """`started` was told, but the handler never ran (its dispatch failed)."""
        self._started.pop(received.message_id, None)

    def finished(self, lease: Lease) -> None:
        """`lease` ended: its message is no longer held."""
        if self.limit is not None and lease.message_id in self._started:
            self._gone.add(lease.message_id)
            return
        if self._ended:
            try:
                self._ended.remove(lease.message_id)
            except KeyError:
                return
            self.slots.settled()
