"""The lease keeper: the only task that extends leases, however many there are.

It sleeps until the earliest lease is due (its deadline less the renewal margin), takes that
lease with every lease of the same queue due within the coalescing window, up to the
backend's batch size, and extends them in one call. Calls run side by side in a task group,
so one slow call never delays another queue's renewals.

Rules:
- Choosing a lease for renewal and marking it `extending` is one step (no await between):
  the settler, which checks `extending` and marks `settle_call` in one step too, never puts a
  delete or release on the wire beside a renewal of the same handle.
- A lease whose delete or release is on the wire (`settle_call`) is not renewed; the settler
  abandons a delete in time for a renewal after it, and has the lease renewed first when not
  even a call's time is left (`wait_extension_idle(lease, hold_s)`), so a slow delete
  cannot let the lease lapse.
- A handler's `await lease.extend(s)` is a request kept until a renewal with `s` succeeds
  (a failed call is retried with the same `s`), or the lease is lost or capped.

What can happen to a lease at renewal time:
- renewed: new deadline = (time the call was sent) + visibility, less the clock drift
  allowed for (`core.lease.held_for`); a new receipt handle, if
  the backend hands one out, replaces the old one before any later call.
- transient failure (whole call, or an entry the service says was its own fault): retried
  after `retry_interval_s`, as long as that is before the deadline.
- a whole call refused for a reason that one entry may have caused: asked again one lease a
  call, so that each lease gets its own answer.
- refused (ReceiptHandleIsInvalid, MessageNotInflight, ...) or the deadline passed: LOST.
  The handler is cancelled, the message is neither deleted nor released.
- at the hard cap (`max_lease_s` from receive): the handler is cancelled as TIMED_OUT while
  the lease still has `renew_margin_s` left, so its release happens before SQS's 12 h cap;
  the lease stays scheduled at its deadline, so that a handler still running then (a thread)
  finds it lost, not held.

Calls that land late (issue 27): a renewal may reach the service and answer late.
- On a backend whose extension hands out a new receipt handle (SMQ), a renewal is never
  abandoned while its answer can still arrive before the deadline: the old handle stops
  working once the call lands, so a retry with it would be refused and the lease lost.
  A late answer's handle is adopted.
- Elsewhere (SQS: an extension is idempotent) a renewal is hedged, never abandoned before
  the deadline: each time a call's time passes without an answer (twice the slowest recent
  round trip, at least `renew_timeout_s`) another call goes out beside it and the first
  answer wins, so a slow network costs an extra call instead of every lease that needs a
  renewal, and a lost answer is covered by the next call.

Stalls: a watchdog, a plain loop callback every half margin (at least `_WATCH_S`; not a
task; a lease lapses only in a stall longer than the margin), notices when the
loop did not run for a while (SIGSTOP, a long GC, blocking code) and loses every lease whose
deadline passed meanwhile, cancelling its handler, in the first loop step after the stall:
before any handler task resumes (their wake-ups run in the step after).
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import Sequence
from typing import Any

import anyio
import structlog
from anyio.abc import TaskStatus

from worker.backend import Backend
from worker.clock import Clock
from worker.config import LeaseConfig
from worker.core.histogram import DurationHistogram
from worker.core.lease import Lease, LeaseState, held_for
from worker.core.schedule import LeaseSchedule
from worker.core.settlement import Outcome
from worker.errors import TransientBackendError
from worker.runtime.calls import as_backend_error, hedged_call_by, no_answer
from worker.runtime.metrics import Metrics
from worker.runtime.waiters import Waiters
from worker.types import BatchResult, EntryFailure, VisibilityChange

__all__ = ["LeaseKeeper"]

#: Entry codes that mean the handle is no longer ours: the lease is lost.
_LOST_CODES = frozenset({"ReceiptHandleIsInvalid", "MessageNotInflight", "InvalidReceiptHandle"})
#: The service refused the visibility itself: in practice the 12 h cap, measured by the service.
_CAP_CODES = frozenset({"InvalidParameterValue"})
#: Whole-call refusals that one entry can cause: asked again one lease a call. Others
#: (access denied, a missing queue) are the same for every lease: no point splitting.
_ENTRY_CODES = _LOST_CODES | _CAP_CODES | frozenset({"MissingParameter", "ValidationError"})

#: (lease, visibility sent, the handler's request it answers or None)
_Renewal = tuple[Lease, int, int | None]

#: The stall watchdog looks at most this often (seconds); a tick later than half its interval
#: means the loop stood still.
_WATCH_S = 1.0
#: Recent renewal round trips kept to set the next call's time limit.
_ROUND_TRIPS = 16


class LeaseKeeper:
    def __init__(
        self,
        backend: Backend,
        config: LeaseConfig,
        *,
        clock: Clock,
        metrics: Metrics,
        logger: Any = None,
    ) -> None:
        self._backend = backend
        self._config = config
        self._clock = clock
        self._metrics = metrics
        self._log = logger or structlog.get_logger("lease_worker.lease")
        self._schedule: LeaseSchedule[Lease] = LeaseSchedule()
        self._wake = anyio.Event()
        self._sleeping_until = -math.inf
        self._durations = DurationHistogram(
            min_s=config.adaptive_min_s, max_s=config.adaptive_max_s
        )
        self._requests: Waiters[Lease] = Waiters()
        #: Callers waiting for a renewal on the wire to come back.
        self._idle: Waiters[Lease] = Waiters()
        self._blocked = False
        #: The keeper's task has ended (shutdown, crash): nobody will renew anything now.
        self._down = False
        self._started = False
        #: Bound once: every lease keeps it (a bound method made per lease is 64 bytes).
        self._requester = self._request_extension
        #: Leases whose renewal is on the wire (out of the schedule meanwhile).
        #: A dict for its order (a sweep loses leases in the order they went out).
        self._on_wire: dict[Lease, None] = {}
        #: Recent renewal round trips (seconds): from the send to the answer, or to the
        #: deadline for a call that got none.
        self._round_trips: deque[float] = deque(maxlen=_ROUND_TRIPS)
        self._watchdog: asyncio.TimerHandle | None = None
        self._watch_every = max(_WATCH_S, config.renew_margin_s / 2)
        self._watch_due = math.inf

    # -- bookkeeping ------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._schedule)

    @property
    def waiting_requests(self) -> int:
        """Leases with a caller waiting in `lease.extend()` (for tests and metrics)."""
        return len(self._requests)

    def track(self, lease: Lease) -> None:
        """Start keeping `lease` alive; call right after the receive."""
        lease._requester = self._requester
        lease.tracked = True
        self._schedule_renewal(lease)

    def reschedule(self, lease: Lease) -> None:
        """The lease's deadline moved (a newer receive of the same message), or its cap (a
        handler starting after its tenant's turn came): follow it."""
        if lease in self._schedule:
            self._schedule_renewal(lease)

    def untrack(self, lease: Lease) -> None:
        """Stop renewing `lease`, also after a renewal that is on the wire right now."""
        lease.tracked = False
        self._schedule.discard(lease)
        self._notify(lease)

    # -- requests: the others change a lease only through these (one step, no await) -------

    def adopt(self, lease: Lease, receipt_handle: str, deadline: float) -> None:
        """A newer copy of the held message was received: its handle, and the deadline the
        service counts from that receive, replace the lease's (the dispatcher)."""
        lease.receipt_handle = receipt_handle
        lease.deadline = deadline
        self.reschedule(lease)

    def settling(self, lease: Lease, *, stop_renewals: bool) -> None:
        """A delete or release of `lease` is queued (the settler): a release stops renewals
        at once (one landing after it would hide the message again); a delete keeps them
        until it is confirmed."""
        lease.state = LeaseState.SETTLING
        if stop_renewals:
            self.untrack(lease)

    def claim(self, lease: Lease) -> str:
        """The settler puts a delete or release of `lease` on the wire now: the handle to
        use, with renewals held until `unclaim` (the caller saw no renewal on the wire and
        has not awaited since)."""
        assert not lease.extending, "a settle call never goes out beside a renewal"
        lease.settle_call = True
        return lease.receipt_handle

    def unclaim(self, lease: Lease) -> None:
        """The settle call of `lease` came back (or was abandoned): renewals may go out."""
        lease.settle_call = False

    def settled(self, lease: Lease) -> None:
        """`lease` is settled for good (deleted, released, forgotten, or given up on)."""
        self.untrack(lease)
        lease.finish(LeaseState.DONE)

    def lapsed(self, lease: Lease, now: float) -> bool:
        """True if `lease` is lost, or its deadline has passed (it is lost now, held or being
        settled): asked at a commit point, before a handler's success is reported, and
        before each delete or release of it goes on the wire."""
        if lease.active and now >= lease.deadline:
            self._lose(lease, "lapsed")
        return lease.lost

    def record_duration(self, duration_s: float) -> None:
        """A successful handler's run time, for the adaptive extension (kept only then)."""
        if self._config.adaptive:
            self._durations.add(duration_s)

    def extension_s(self) -> int:
        """The visibility each renewal asks for now."""
        if self._config.adaptive and len(self._durations):
            return self._durations.percentile(99)
        return self._config.extension_s

    def _schedule_renewal(self, lease: Lease, at: float | None = None) -> None:
        if not lease.tracked:
            return
        if at is None:
            # Due for renewal, or for its cap if that comes first (a max_lease_s shorter
            # than the first renewal must not wait for it).
            due = min(lease.deadline, lease.max_until) - self._config.renew_margin_s
        else:
            due = at
        self._schedule.set(lease, lease.queue, due)
        if due < self._sleeping_until:  # most new leases fall due after the next wake-up
            self._wake.set()

    async def _request_extension(self, lease: Lease, visibility_s: int) -> bool:
        """Renew `lease` to `visibility_s` now; False if the keeper is down (nothing will
        renew it: waiting would hang a delete or a handler)."""
        limit = self._backend.limits.max_visibility_s
        if not 0 <= visibility_s <= limit:
            raise ValueError(f"visibility_s={visibility_s!r}: must be within 0..{limit}")
        lease.requested_visibility_s = visibility_s
        if self._down:
            return False
        if not lease.extending:  # else the call on the wire reschedules it when it returns
            self._schedule_renewal(lease, at=self._clock.now())
        await self._requests.wait(lease)
        return not self._down

    async def wait_extension_idle(self, lease: Lease, hold_s: float = 0.0) -> None:
        """Wait for a renewal of `lease` on the wire, so that a later call uses the newest
        handle; with `hold_s`, also make sure the lease outlives a call of that length and a
        renewal after it (renewing it now if need be), when it can still be renewed."""
        while True:
            while lease.extending:
                await self._idle.wait(lease)
            if hold_s <= 0 or not self._needs_renewal_before(lease, hold_s):
                return
            await self._request_extension(lease, self.extension_s())
            if not lease.active or lease.lost:
                return

    def _needs_renewal_before(self, lease: Lease, hold_s: float) -> bool:
        now = self._clock.now()
        if self._down or not lease.tracked or not lease.active or now >= lease.deadline:
            return False
        if self._at_cap(lease, now):
            return False  # the keeper would cap it, not renew it: asking again would spin
        # After a call abandoned at `hold_s`, the keeper looks again within one retry
        # interval and needs one renewal call's time: the lease must last that long.
        config = self._config
        needed = hold_s + config.retry_interval_s + config.effective_renew_timeout_s
        time_left = lease.time_left_s(now)
        # Worth a call only if it buys more than a call's time (not right after a renewal,
        # nor at the cap, nor when no extension could give `needed`: then one is enough).
        gain = lease.next_visibility(now, self.extension_s()) - time_left
        return time_left < needed and gain > config.effective_renew_timeout_s

    def _at_cap(self, lease: Lease, now: float) -> bool:
        """A renewal could not carry the lease past its next due time."""
        return math.floor(lease.cap_left_s(now)) <= self._config.renew_margin_s

    def _end_extension(self, lease: Lease) -> None:
        lease.extending = False
        self._on_wire.pop(lease, None)
        self._idle.wake(lease)

    # -- the task ---------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """The keeper's task has started and not ended: leases are being renewed."""
        return self._started and not self._down

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        self._started = True
        self._watch(asyncio.get_running_loop())
        try:
            await self._run(task_status)
        finally:
            self._down = True
            if self._watchdog is not None:
                self._watchdog.cancel()
            self._requests.wake_all()
            self._idle.wake_all()

    # -- stalls -----------------------------------------------------------------------------

    def _watch(self, loop: asyncio.AbstractEventLoop) -> None:
        """The watchdog's tick: a loop callback, so that after a stall it runs in the first
        loop step, before the handler tasks that the stall's I/O and timers wake."""
        now = loop.time()
        if now - self._watch_due > self._watch_every / 2:
            self.sweep(now)
        self._watch_due = now + self._watch_every
        self._watchdog = loop.call_at(self._watch_due, self._watch, loop)

    def sweep(self, now: float) -> int:
        """Lose every lease whose deadline has passed (cancelling its handler); returns how
        many. Run by the watchdog after a stall; callable at any commit point."""
        lapsed = [
            lease
            for lease in (*self._schedule, *self._on_wire)
            if lease.active and now >= lease.deadline
        ]
        for lease in lapsed:
            self._lose(lease, "lapsed")
        return len(lapsed)

    async def _run(self, task_status: TaskStatus[None]) -> None:
        async with anyio.create_task_group() as calls:
            task_status.started()
            while True:
                batch = self._schedule.pop_batch(
                    self._clock.now(),
                    window=self._config.coalesce_window_s,
                    limit=self._backend.limits.extend_batch,
                )
                if batch is not None:
                    renewals = self._choose(batch[1])
                    if renewals:
                        calls.start_soon(self._renew, batch[0], renewals)
                    continue
                await self._sleep(self._schedule.next_due())

    async def _sleep(self, until: float | None) -> None:
        self._wake = anyio.Event()
        self._sleeping_until = math.inf if until is None else until
        with anyio.CancelScope(deadline=self._sleeping_until):
            await self._wake.wait()
        self._sleeping_until = -math.inf
        if until is not None:
            self._check_lateness(self._clock.now() - until)

    def _check_lateness(self, late_s: float) -> None:
        """A wake-up later than the margin means the event loop did not run: every lease due
        meanwhile may have lapsed. Say so once per episode, naming the likely cause."""
        blocked = late_s > self._config.renew_margin_s
        if blocked and not self._blocked:
            self._log.warning(
                "loop.blocked",
                late_s=round(late_s, 3),
                renew_margin_s=self._config.renew_margin_s,
                leases=len(self._schedule),
                cause="the event loop did not run for longer than the renewal margin, so "
                "leases could not be renewed in time: blocking code in an async handler "
                "(use a sync def handler, which runs in a thread, or anyio.to_thread)",
            )
        self._blocked = blocked

    def _choose(self, leases: list[Lease]) -> list[_Renewal]:
        """Decide, lease by lease, whether to renew now, and mark the chosen ones
        `extending` in this same step."""
        now = self._clock.now()
        chosen: list[_Renewal] = []
        for lease in leases:
            if not lease.active:
                self._notify(lease)
            elif now >= lease.deadline:
                self._lose(lease, "lapsed")
            elif lease.settle_call:
                # A renewal beside a delete could come back "invalid" and be taken for a
                # lost lease (and on SMQ it would change the handle under the delete).
                retry_at = now + self._config.retry_interval_s
                self._schedule_renewal(lease, at=min(retry_at, lease.deadline))
            elif self._at_cap(lease, now):
                self._cap(lease)
            else:
                asked = lease.requested_visibility_s
                wanted = self.extension_s() if asked is None else asked
                lease.extending = True
                self._on_wire[lease] = None
                chosen.append((lease, lease.next_visibility(now, wanted), asked))
        return chosen

    async def _renew(self, queue: str, renewals: Sequence[_Renewal]) -> None:
        # Checked again as the call goes out (no await from here to the wire): the process
        # may have stalled since the leases were chosen, and a renewal with the handle of a
        # lease that lapsed meanwhile could hide another consumer's message again.
        renewals = self._unlapsed(renewals)
        if not renewals:
            return
        entries = [
            VisibilityChange(str(i), lease.receipt_handle, visibility)
            for i, (lease, visibility, _) in enumerate(renewals)
        ]
        sent_at = self._clock.now()
        self._metrics.renewal_calls.labels(queue).inc()
        one_by_one = called = False
        try:
            try:
                result, sent_at = await self._extend_before_deadline(queue, entries, renewals)
                called = True
            except Exception as raised:
                error = as_backend_error(raised, self._log, "ChangeMessageVisibilityBatch", queue)
                one_by_one = (
                    len(renewals) > 1
                    and not isinstance(error, TransientBackendError)
                    and error.code in _ENTRY_CODES
                )
                retry = "one lease a call" if one_by_one else "after retry_interval_s"
                self._call_failed(queue, len(renewals), error, retry)
                result = BatchResult(
                    failed=tuple(
                        EntryFailure(e.entry_id, error.code or "call", str(error), False)
                        for e in entries
                    )
                )
            if one_by_one:
                # One entry may have made the service refuse the whole call: ask again one
                # lease a call, so that no lease pays for another's answer.
                async with anyio.create_task_group() as calls:
                    for renewal in renewals:
                        calls.start_soon(self._renew, queue, [renewal])
                return
        finally:
            if not one_by_one:
                for lease, _, _ in renewals:
                    self._end_extension(lease)
        if called:  # a failed call was logged as such (lease.renew_call_failed)
            self._log.debug(
                "lease.renewed",
                queue=queue,
                leases=len(result.succeeded),
                failed=len(result.failed),
                visibility_s=max(v for _, v, _ in renewals),
            )
        self._apply(result, renewals, [entry.receipt_handle for entry in entries], sent_at)

    def _unlapsed(self, renewals: Sequence[_Renewal]) -> Sequence[_Renewal]:
        """`renewals` less those whose lease's deadline has passed by now (lost here)."""
        now = self._clock.now()
        if all(now < lease.deadline for lease, _, _ in renewals):
            return renewals
        kept = []
        for renewal in renewals:
            lease = renewal[0]
            if now < lease.deadline:
                kept.append(renewal)
            else:
                self._end_extension(lease)
                self.lapsed(lease, now)  # lost now, if nothing else had lost it
        return kept

    def _call_failed(self, queue: str, leases: int, error: Exception, retry: str) -> None:
        code = getattr(error, "code", "") or type(error).__name__
        self._log.warning(
            "lease.renew_call_failed",
            queue=queue,
            leases=leases,
            code=code,
            error=str(error),
            retry=retry,
        )
        self._metrics.renewal_failures.labels(queue, code).inc(leases)

    async def _extend_before_deadline(
        self, queue: str, entries: list[VisibilityChange], renewals: Sequence[_Renewal]
    ) -> tuple[BatchResult, float]:
        """The call and when the call that answered was sent, abandoned at the batch's
        earliest deadline (an answer that comes later cannot be trusted: SQS may have let
        the message go to another consumer meanwhile).

        A backend whose extension hands out a new handle (SMQ): one call, never abandoned
        before the deadline (the old handle stops working once it lands, so only its answer
        carries a handle that works). Elsewhere (SQS: an extension is idempotent), hedged:
        each time a call's time passes without an answer (`renew_timeout_s`, or twice the
        slowest recent round trip if longer) another call goes out beside the ones under
        way, and the first answer wins: a late answer still renews the lease, a lost one is
        covered by the next call."""
        now = self._clock.now()
        deadline = min(lease.deadline for lease, _, _ in renewals)
        if self._backend.limits.extension_returns_new_handle:
            hedge_every = math.inf
        else:
            slowest = max(self._round_trips, default=0.0)
            hedge_every = max(self._config.effective_renew_timeout_s, 2 * slowest)

        def hedged() -> None:  # the call under way is slow: counted and said as a timeout
            slow = no_answer("ChangeMessageVisibilityBatch", queue, "Timeout")
            self._call_failed(queue, len(renewals), slow, "a second call beside it (hedged)")

        try:
            result, sent_at = await hedged_call_by(
                hedge_every,
                deadline,
                lambda: self._backend.extend(queue, entries),
                operation="ChangeMessageVisibilityBatch",
                queue=queue,
                on_hedge=hedged,
            )
        finally:
            self._round_trips.append(self._clock.now() - now)
        return result, sent_at

    def _apply(
        self,
        result: BatchResult,
        renewals: Sequence[_Renewal],
        handles: Sequence[str],
        sent_at: float,
    ) -> None:
        succeeded = set(result.succeeded)
        failures = {failure.entry_id: failure for failure in result.failed}
        for i, (lease, visibility, asked) in enumerate(renewals):
            entry_id = str(i)
            if lease.receipt_handle != handles[i]:
                # A newer receive gave the lease a new handle while this call was out: its
                # answer, success or failure, speaks of a handle that is no longer ours.
                self._schedule_renewal(lease)
            elif entry_id in succeeded:
                new_handle = result.new_handles.get(entry_id)
                self._renewed_ok(lease, visibility, asked, sent_at, new_handle)
            else:
                failure = failures.get(entry_id) or EntryFailure(entry_id, "Missing", "no answer")
                self._renewal_failed(lease, failure)
            if not lease.active:
                self._notify(lease)

    def _renewed_ok(
        self,
        lease: Lease,
        visibility: int,
        asked: int | None,
        sent_at: float,
        new_handle: str | None,
    ) -> None:
        if new_handle is not None:
            lease.receipt_handle = new_handle
        if not lease.active:
            return
        self._metrics.renewals.labels(lease.queue).inc()
        self._metrics.time_to_deadline.labels(lease.queue).observe(
            max(0.0, lease.deadline - sent_at)
        )
        lease.deadline = sent_at + held_for(visibility)
        lease.renewals += 1
        if lease.requested_visibility_s is not None and lease.requested_visibility_s == asked:
            lease.requested_visibility_s = None  # the handler's request is answered
            self._notify(lease)
        pending = lease.requested_visibility_s is not None  # asked for again meanwhile
        self._schedule_renewal(lease, at=self._clock.now() if pending else None)

    def _renewal_failed(self, lease: Lease, failure: EntryFailure) -> None:
        if not lease.active:
            return
        if failure.code in _LOST_CODES:
            self._metrics.renewal_failures.labels(lease.queue, failure.code).inc()
            self._lose(lease, failure.code)
        elif failure.code in _CAP_CODES:
            self._metrics.renewal_failures.labels(lease.queue, failure.code).inc()
            self._cap(lease)
        else:
            # Retried with the same request, if any: `extend(600)` keeps asking for 600.
            retry_at = self._clock.now() + self._config.retry_interval_s
            self._schedule_renewal(lease, at=min(retry_at, lease.deadline))

    def _lose(self, lease: Lease, reason: str) -> None:
        self._schedule.discard(lease)
        lease.lost_reason = reason
        lease.finish(LeaseState.LOST)
        lease.cancel(Outcome.LEASE_LOST)
        self._metrics.leases_lost.labels(lease.queue, reason).inc()
        self._log.warning(
            "lease.lost",
            queue=lease.queue,
            message_id=lease.message_id,
            reason=reason,
            renewals=lease.renewals,
        )
        self._notify(lease)

    def _cap(self, lease: Lease) -> None:
        """The lease cannot be extended further: cancel the handler while time is left."""
        if lease.state is LeaseState.HELD and lease.cancel_reason is None:
            self._metrics.leases_capped.labels(lease.queue).inc()
            self._log.warning(
                "lease.max_lease_reached",
                queue=lease.queue,
                message_id=lease.message_id,
                renewals=lease.renewals,
            )
            lease.cancel(Outcome.TIMED_OUT)
        lease.requested_visibility_s = None
        if lease.tracked and lease.active:
            # Not renewed again, but looked at again at its deadline: a handler that has not
            # ended by then (a thread) must find the lease lost, not held.
            self._schedule.set(lease, lease.queue, lease.deadline)
        self._notify(lease)

    def _notify(self, lease: Lease) -> None:
        self._requests.wake(lease)
