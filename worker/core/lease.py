"""A lease: the runtime's claim on one received message, from receive to settlement.

A lease is created the moment a message is received (not when its handler starts), so time
spent waiting for a handler slot counts against it and is covered by renewals. Its deadline
is tracked on the worker's monotonic clock, counted from when the receive that brought the
message was sent: the service handed it out after that, and an answer proves nothing more
(it may have waited on the way for any time: a proxy, a retransmit, a paused process), so
the lease's deadline is never later than the service's own. A long poll waits no longer
than the visibility less the renewal margin (`WorkerConfig.poll_wait_s`), so a message
handed out at the end of an idle poll still arrives with the margin left; one whose answer
came after its deadline is lost on arrival and never run.

States::

    HELD ──settle──> SETTLING ──call done──> DONE
      │                  │
      └──────lost────────┴──> LOST      (renewal refused, or the deadline passed)

Who may do what (issue 27: one owner):
- The lease keeper (`worker.runtime.lease_keeper`) is the only writer of a lease's state:
  its deadline, receipt handle, the call on the wire (`extending`, `settle_call`) and its
  `state`. The others send it requests, each applied in one synchronous step (no await
  inside): the dispatcher `adopt`s a newer copy's handle; the settler marks a lease
  `settling`, `claim`s it for a delete or release (the handle to use now, and renewals held
  while the call is out, as one answer), `unclaim`s it after the call, and reports it
  `settled`; the executor asks whether it `lapsed` before it reports a handler's success,
  and the settler before each delete or release of it goes on the wire (a lapsed lease,
  held or being settled, is lost then).
- Anyone may ask to cancel the handler (`cancel(reason)`): the keeper (lost, capped), the
  supervisor (shutdown), the idempotency guard (its store's heartbeat lapsed).
- Handlers see a `LeaseView` (`message.lease`): the deadline, the time left, whether it is
  lost, `extend()` and `ensure_held()`; nothing they can change.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from enum import Enum
from typing import Protocol

from worker.core.settlement import Outcome
from worker.errors import LeaseLostError
from worker.types import ReceivedMessage

__all__ = ["CLOCK_DRIFT", "Lease", "LeaseState", "LeaseView", "held_for"]

#: How much slower than the service's the worker's clock may run (0.05%, 500 ppm: the most
#: NTP ever slews a clock, and ten times a disciplined clock's error). A visibility of V
#: seconds is held for V less this share by the worker's clock, so that a worker whose clock
#: runs slow never believes a lease the service has already let go.
CLOCK_DRIFT = 5e-4


def held_for(visibility_s: float) -> float:
    """How long, by the worker's clock, a visibility of `visibility_s` surely lasts at the
    service (see `CLOCK_DRIFT`)."""
    return visibility_s * (1.0 - CLOCK_DRIFT)


class _Cancellable(Protocol):
    def cancel(self) -> None: ...


class LeaseState(Enum):
    """Where a lease is in its life: held, being settled, done, or lost."""

    HELD = "held"
    SETTLING = "settling"
    DONE = "done"
    LOST = "lost"


class Lease:
    """One message's lease. Handlers see it as `message.lease`."""

    __slots__ = (
        "_invisible_for",
        "_max_lease_s",
        "_now",
        "_on_finish",
        "_requester",
        "cancel_reason",
        "deadline",
        "extending",
        "lost_reason",
        "message_id",
        "queue",
        "receipt_handle",
        "received",
        "received_at",
        "renewals",
        "requested_visibility_s",
        "scope",
        "settle_call",
        "state",
        "tracked",
    )

    def __init__(  # positional too: the receiver makes one a message, and keywords cost
        self,
        queue: str,
        message_id: str,
        receipt_handle: str,
        received_at: float,
        visibility_s: float,
        max_lease_s: float,
        now: Callable[[], float],
        service_max_lease_s: float | None = None,
        on_finish: Callable[[Lease], None] | None = None,
        received: ReceivedMessage | None = None,
    ) -> None:
        self.queue = queue
        self.message_id = message_id
        self.receipt_handle = receipt_handle
        self.received_at = received_at
        self.deadline = received_at + held_for(visibility_s)
        # The caps are kept as spans (the caller's own numbers, shared by every lease) and
        # added to received_at when read: two floats fewer per message in flight.
        self._max_lease_s = max_lease_s
        self._invisible_for = max_lease_s if service_max_lease_s is None else service_max_lease_s
        self.state = LeaseState.HELD
        self.lost_reason: str | None = None
        self.renewals = 0
        #: True while the lease keeper renews this lease.
        self.tracked = False
        #: True while a delete or release of this message is on the wire.
        self.settle_call = False
        #: The running handler's cancel scope (anything with `cancel()`), or None.
        self.scope: _Cancellable | None = None
        self.cancel_reason: Outcome | None = None
        self.requested_visibility_s: int | None = None
        #: True while a renewal of this lease is on the wire (never more than one).
        self.extending = False
        self._now = now
        self._requester: Callable[[Lease, int], Awaitable[bool]] | None = None
        self._on_finish = on_finish
        #: The message as it was received (for the console), when the receiver made it;
        #: None once the lease has finished.
        self.received = received

    def __repr__(self) -> str:
        where = f"{self.queue}/{self.message_id}"
        return f"<Lease {where} {self.state.value} deadline={self.deadline:.3f}>"

    # -- what handlers use ------------------------------------------------------------------

    @property
    def lost(self) -> bool:
        return self.state is LeaseState.LOST

    def time_left_s(self, now: float | None = None) -> float:
        """Seconds until the current deadline (negative once it has passed)."""
        return self.deadline - (self._now() if now is None else now)

    async def extend(self, visibility_s: int) -> None:
        """Extend now, to `visibility_s` whole seconds from now, ahead of the keeper's own
        schedule; returns once the service has confirmed it (a failed call is retried).

        Raises `TypeError` for anything but an `int` (a float or a bool would be refused by
        the service), `ValueError` outside what the backend allows, and `LeaseLostError` if
        the lease is (or becomes) lost, or if nothing renews leases any more (the lease
        keeper has stopped: shutdown): the extension did not happen.
        """
        if type(visibility_s) is not int:
            raise TypeError(
                f"lease.extend(visibility_s={visibility_s!r}): a whole number of seconds (int)"
            )
        if self._requester is None or self.state is not LeaseState.HELD:
            raise LeaseLostError(f"lease of {self.message_id} is {self.state.value}")
        if not await self._requester(self, visibility_s):
            raise LeaseLostError(
                f"lease of {self.message_id} cannot be extended: the lease keeper has stopped"
            )
        if self.lost:
            raise LeaseLostError(f"lease of {self.message_id} was lost: {self.lost_reason}")

    def ensure_held(self, now: float | None = None) -> None:
        """A cheap synchronous fence: raise `LeaseLostError` unless the lease is still ours
        by the clock (not lost, not settled, its deadline not passed). Call it right before
        a side effect that must not happen twice (a payment, a write elsewhere): after a
        stall the deadline may have passed before anything noticed."""
        if self.state is not LeaseState.HELD:
            raise LeaseLostError(f"lease of {self.message_id} is {self.state.value}")
        if (self._now() if now is None else now) >= self.deadline:
            raise LeaseLostError(f"lease of {self.message_id} lapsed: its deadline has passed")

    # -- what the runtime uses --------------------------------------------------------------

    @property
    def max_until(self) -> float:
        """The handler's cap (`LeaseConfig.max_lease_s` from the receive): renewals stop here."""
        return self.received_at + self._max_lease_s

    def defer_cap(self) -> float:
        """Held without a handler yet (waiting for its tenant's turn): only the service's cap
        applies until `start_cap`. Returns the handler's cap, to give to it then."""
        span, self._max_lease_s = self._max_lease_s, self._invisible_for
        return span

    def start_cap(self, now: float, span: float) -> None:
        """The handler starts now: its cap (`span`, from `defer_cap`) counts from now, within
        the service's cap from the receive."""
        self._max_lease_s = min(self._invisible_for, now - self.received_at + span)

    @property
    def invisible_until(self) -> float:
        """The service's cap (SQS: 12 h from the receive): no release asks past it."""
        return self.received_at + self._invisible_for

    @property
    def releasing(self) -> bool:
        """A release of it is decided (queued or on the wire): renewals have stopped."""
        return self.state is LeaseState.SETTLING and not self.tracked

    @property
    def active(self) -> bool:
        return self.state in (LeaseState.HELD, LeaseState.SETTLING)

    def cap_left_s(self, now: float) -> float:
        """Time left before the handler's cap (`max_lease_s` from the receive)."""
        return self.max_until - now

    def invisible_left_s(self, now: float) -> float:
        """How long the message may still be kept invisible, by the service's own cap: the
        longest delay a release may ask for (`Retry(after_s)`, a backoff)."""
        return self.invisible_until - now

    def next_visibility(self, now: float, extension_s: int) -> int:
        """Visibility for a renewal at `now`, never past the lease's hard cap."""
        return max(0, min(extension_s, math.floor(self.max_until - now)))

    def cancel(self, reason: Outcome) -> None:
        """Cancel the handler (if it runs) and remember why."""
        if self.cancel_reason is None:
            self.cancel_reason = reason
        if self.scope is not None:
            self.scope.cancel()

    def finish(self, state: LeaseState) -> None:
        """Move to DONE or LOST, once; the owner's `on_finish` hears of it (frees the slot)."""
        if self.state in (LeaseState.DONE, LeaseState.LOST):
            return
        self.state = state
        if self._on_finish is not None:
            self._on_finish(self)
        # The lease may outlive its message by a while (the keeper's heap drops a finished
        # lease lazily, a settle call may still name it): its body must not.
        self.received = None


class LeaseView:
    """What a handler sees of its lease (`message.lease`): read-only, with `extend()` and
    `ensure_held()`. The lease keeper alone changes the lease behind it."""

    __slots__ = ("_lease",)

    def __init__(self, lease: Lease) -> None:
        self._lease = lease

    def __repr__(self) -> str:
        return repr(self._lease)

    @property
    def queue(self) -> str:
        return self._lease.queue

    @property
    def message_id(self) -> str:
        return self._lease.message_id

    @property
    def receipt_handle(self) -> str:
        """The current receipt handle (SMQ hands out a new one with every extension)."""
        return self._lease.receipt_handle

    @property
    def deadline(self) -> float:
        """When the message becomes visible again unless renewed (the worker's clock)."""
        return self._lease.deadline

    @property
    def received_at(self) -> float:
        return self._lease.received_at

    @property
    def renewals(self) -> int:
        """How many times the runtime has renewed it."""
        return self._lease.renewals

    @property
    def state(self) -> LeaseState:
        return self._lease.state

    @property
    def lost(self) -> bool:
        """The lease was lost (refused, or its deadline passed): the message may be
        someone else's now."""
        return self._lease.lost

    @property
    def lost_reason(self) -> str | None:
        return self._lease.lost_reason

    @property
    def cancel_reason(self) -> Outcome | None:
        """Why the handler was asked to stop (lost, capped, shutdown), or None."""
        return self._lease.cancel_reason

    def time_left_s(self, now: float | None = None) -> float:
        """Seconds until the current deadline (negative once it has passed)."""
        return self._lease.time_left_s(now)

    def cap_left_s(self, now: float) -> float:
        """Time left before the handler's cap (`max_lease_s` from the receive)."""
        return self._lease.cap_left_s(now)

    async def extend(self, visibility_s: int) -> None:
        """Extend now, to `visibility_s` whole seconds from now (see `Lease.extend`)."""
        await self._lease.extend(visibility_s)

    def ensure_held(self, now: float | None = None) -> None:
        """Raise `LeaseLostError` unless the lease is still ours by the clock (see
        `Lease.ensure_held`): call it right before a side effect that must not run twice."""
        self._lease.ensure_held(now)

    def cancel(self, reason: Outcome) -> None:
        """Stop the handler (a middleware stopping the handler it wraps: the idempotency
        guard when its store's heartbeat lapses); the lease itself is the keeper's."""
        self._lease.cancel(reason)
