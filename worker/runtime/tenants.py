"""Per-tenant caps: one tenant never fills a worker's slots, and being capped costs nothing.

`admit` decides for each message received from a standard queue with a cap:
- RUN: its tenant runs fewer than `per_tenant` here;
- WAIT: it waits here for its tenant's turn, its lease held and renewed and no handler slot
  taken (`Slots.set_aside`). A release would count as a receive toward the queue's
  `maxReceiveCount`, and a healthy message must never reach the dead-letter queue for its
  tenant's cap: so while `hold` or more wait, the queue's receives pause instead
  (`Slots.aside_most`; a receive under way may add its batch), logged once a minute;
- RELEASE, only on a queue without a redrive policy (where a receive count costs
  nothing): past the hold, handed back for another worker, or this one later, to take,
  with a delay that grows with its tenant's backlog here (`release_after_s`).
`finished` is told when a lease ends and returns the tenant's next waiting message to run,
if any.

A message without a tenant (no `MessageGroupId`, or the key function answered None) is not
capped. A key function that raises, or answers anything but a string or None, never turns
the cap off unseen: the message goes to the fallback tenant `KEY_FAILED` (capped like any
other), each failure is counted (`flow_tenant_key_errors_total`), and one warning a minute
names the error's type (never its text, which may quote the body).
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from enum import Enum
from typing import Any

import structlog

from worker.config import TenantCap
from worker.core.lease import Lease
from worker.runtime.slots import Slots
from worker.types import ReceivedMessage

__all__ = ["KEY_FAILED", "MAX_RELEASE_S", "Admission", "Tenants"]

#: The tenant of every message whose key function failed: they share one cap.
KEY_FAILED = "<key failed>"
#: The key function's failures, and messages waiting past the hold, are logged at most this
#: often (seconds).
_WARN_EVERY_S = 60.0
#: The longest delay a release for a tenant's cap asks for (seconds).
MAX_RELEASE_S = 900
#: How much each handler's time moves the running mean of handler time.
_RUN_WEIGHT = 0.2


class Admission(Enum):
    RUN = "run"
    WAIT = "wait"
    RELEASE = "release"


class Tenants:
    def __init__(
        self,
        cap: TenantCap,
        *,
        queue: str = "",
        slots: Slots | None = None,
        dead_letters: bool = False,
        now: Callable[[], float] = time.monotonic,
        on_key_error: Callable[[], None] | None = None,
        on_waiting: Callable[[float], None] | None = None,
        logger: Any = None,
    ) -> None:
        self.cap = cap
        self._queue = queue
        self._slots = slots or Slots(1)
        self._dead_letters = dead_letters
        self._now = now
        self._on_key_error = on_key_error
        self._on_waiting = on_waiting
        self._log = logger or structlog.get_logger("lease_worker.flow")
        # A queue that dead-letters pauses its receives while the hold is full; one that
        # does not releases past it instead.
        self._slots.aside_most = cap.hold if dead_letters else None
        self._key_warned_at = self._hold_warned_at = -math.inf
        #: Key failures since their last warning.
        self._key_unreported = 0
        self._running: dict[str, int] = {}
        self._waiting: dict[str, deque[tuple[ReceivedMessage, Lease, float]]] = {}
        #: The tenant of every message admitted (running or waiting), by message id.
        self._tenant_of: dict[str, str] = {}
        self._waiting_ids: set[str] = set()
        #: When each running message's handler started, and the mean handler time: only
        #: where a release can happen (`release_after_s`), no queue with a redrive policy.
        self._timed = not dead_letters
        self._started: dict[str, float] = {}
        self._run_s: float | None = None

    @property
    def waiting(self) -> int:
        return len(self._waiting_ids)

    def tenant_of(self, received: ReceivedMessage) -> str | None:
        """The message's tenant by the cap's key function (`KEY_FAILED` if it failed)."""
        try:
            tenant = self.cap.key(received)
        except Exception as error:
            return self._key_failed(type(error).__name__)
        if tenant is None or isinstance(tenant, str):
            return tenant
        return self._key_failed(f"returned {type(tenant).__name__}, not a str or None")

    def _key_failed(self, what: str) -> str:
        if self._on_key_error is not None:
            self._on_key_error()
        self._key_unreported += 1
        now = self._now()
        if now - self._key_warned_at >= _WARN_EVERY_S:
            self._log.warning(
                "flow.tenant_key_failed",
                queue=self._queue,
                error=what,
                failures=self._key_unreported,
                tenant=KEY_FAILED,
                fix="the key gets the message as received (a ReceivedMessage: `body` is the "
                "raw string); make it return a str, or None for an uncapped message",
            )
            self._key_warned_at, self._key_unreported = now, 0
        return KEY_FAILED

    def admit(self, received: ReceivedMessage, lease: Lease) -> tuple[Admission, int]:
        """Run, wait or release the message (with a release, its delay in seconds)."""
        tenant = self.tenant_of(received)
        if tenant is None:
            return Admission.RUN, 0
        running = self._running.get(tenant, 0)
        if running < self.cap.per_tenant:
            self._running[tenant] = running + 1
            self._tenant_of[received.message_id] = tenant
            if self._timed:
                self._started[received.message_id] = self._now()
            return Admission.RUN, 0
        if not self._dead_letters and len(self._waiting_ids) >= self.cap.hold:
            return Admission.RELEASE, self.release_after_s(tenant)
        waiting = self._waiting.get(tenant)
        if waiting is None:
            waiting = self._waiting[tenant] = deque()
        # Its wait is not its handler's time: `max_lease_s` counts from its turn.
        waiting.append((received, lease, lease.defer_cap()))
        self._tenant_of[received.message_id] = tenant
        self._waiting_ids.add(received.message_id)
        self._aside(1)
        if self._dead_letters and len(self._waiting_ids) >= self.cap.hold:
            self._hold_full()
        return Admission.WAIT, 0

    def release_after_s(self, tenant: str) -> int:
        """How long a message of `tenant` released now stays invisible: about how long this
        worker needs for the tenant's messages waiting here, at least `release_s`."""
        waiting = self._waiting.get(tenant)
        turns = (0 if waiting is None else len(waiting)) / self.cap.per_tenant + 1
        run_s = self.cap.release_s if self._run_s is None else self._run_s
        return max(self.cap.release_s, min(MAX_RELEASE_S, math.ceil(turns * run_s)))

    def _hold_full(self) -> None:
        """`hold` or more wait: the queue's receives pause (logged once a minute)."""
        now = self._now()
        if now - self._hold_warned_at >= _WARN_EVERY_S:
            self._log.info(
                "flow.tenant_hold_full",
                queue=self._queue,
                waiting=len(self._waiting_ids),
                hold=self.cap.hold,
                effect="receives of the queue pause until a busy tenant's turn comes: other "
                "tenants' messages wait in the queue meanwhile (raise hold or per_tenant, or "
                "give the tenants MessageGroupIds: an SQS fair queue hands theirs out first)",
            )
            self._hold_warned_at = now

    def finished(self, lease: Lease) -> tuple[ReceivedMessage, Lease] | None:
        """`lease` ended: the next waiting message of its tenant to run now, if any."""
        tenant = self._tenant_of.get(lease.message_id)
        if tenant is None:
            return None
        waiting = self._waiting.get(tenant)
        if lease.message_id in self._waiting_ids:  # ended while waiting: never ran
            if waiting is not None:
                for index, (_, held, _) in enumerate(waiting):
                    if held is lease:
                        del waiting[index]
                        break
                else:
                    return None  # another lease of the same message id
                self._forget_waiting(lease.message_id, tenant, waiting)
            return None
        del self._tenant_of[lease.message_id]
        now = self._now()
        started = self._started.pop(lease.message_id, None)
        if started is not None:
            run_s = now - started
            self._run_s = (
                run_s if self._run_s is None else self._run_s + _RUN_WEIGHT * (run_s - self._run_s)
            )
        while waiting:
            received, next_lease, cap_s = waiting.popleft()
            self._waiting_ids.discard(received.message_id)
            self._aside(-1)
            if next_lease.active:
                if not waiting:
                    del self._waiting[tenant]
                if self._timed:
                    self._started[received.message_id] = now
                next_lease.start_cap(now, cap_s)
                return received, next_lease  # still counted as running
            self._tenant_of.pop(received.message_id, None)
        self._waiting.pop(tenant, None)
        running = self._running[tenant] - 1
        if running:
            self._running[tenant] = running
        else:
            del self._running[tenant]
        return None

    def _aside(self, count: int) -> None:
        """`count` more messages wait (fewer, if negative): their slots are free for others."""
        if count > 0:
            self._slots.set_aside()
        elif count:
            self._slots.take_up(-count)
        if self._on_waiting is not None and count:
            self._on_waiting(count)

    def take_waiting(self) -> list[Lease]:
        """Every waiting message's lease, no longer waiting (a shutdown releases them)."""
        taken = [lease for waiting in self._waiting.values() for _, lease, _ in waiting]
        for waiting in self._waiting.values():
            for received, _, _ in waiting:
                self._tenant_of.pop(received.message_id, None)
        self._waiting.clear()
        self._waiting_ids.clear()
        self._aside(-len(taken))
        return taken

    def _forget_waiting(
        self, message_id: str, tenant: str, waiting: deque[tuple[ReceivedMessage, Lease, float]]
    ) -> None:
        self._waiting_ids.discard(message_id)
        self._aside(-1)
        del self._tenant_of[message_id]
        if not waiting:
            del self._waiting[tenant]
