"""The settler: deletes and releases, batched per queue up to the backend's batch size.

A settlement waits at most `linger_s` for companions, and a full batch goes at once, so a
busy worker pays one call per 10 messages and an idle one adds at most `linger_s` of
latency. Calls run side by side.

Ordering with the lease keeper:
- a delete keeps its lease renewed until the service confirms it, since a lapse before the
  delete lands would hand the message to another consumer. No renewal goes out while the
  delete is on the wire, so the delete is abandoned (and retried) in time for a renewal
  after it: a retry interval and a renewal call before the lease's deadline. If that leaves
  less than a renewal call's time, the keeper renews the lease first;
- a release stops renewals first (a renewal landing after the release would hide the
  message again); if the release itself fails the lease simply lapses, which is what a
  release asked for, only later.
Before a call it waits for any extension in flight on the same message, so that it uses the
newest receipt handle (SMQ hands out a new one on every extension); checking that no
extension is in flight and claiming the lease from the keeper (the handle to use, renewals
held) is one step. The settler changes no lease itself: it asks the keeper
(`settling`, `lapsed`, `claim`, `unclaim`, `settled`). A handle replaced while the
call was on the wire (a second copy of the message adopted) gets the call again with the
new handle, whatever the answer to the old one was (SQS answers success for a stale delete).

A settlement is checked when it goes on the wire, not when it was queued: in that same
step, before every call and every retry (after a failure, a lost answer, in `send_now`),
the keeper is asked whether each entry's lease `lapsed` (lost, or its deadline passed by
the clock: a stall while it waited, SIGSTOP, a long GC). Such an entry is dropped, never
sent: its message is visible again, perhaps another consumer's now, and a service that
honoured the stale handle would hide it again or delete it. It is logged once
(`settle.dropped`) and counted (`settlements_dropped_total`); a call left empty is not made.

Failures: a refused entry (ReceiptHandleIsInvalid, ...) is logged and counted: the message
will be delivered again, which at-least-once allows. A transient whole-call failure is
retried while the lease is still held (and checked again before the retry goes out), but
a release whose call may have landed (no answer came: `calls.may_have_landed`) is not: the
message may already be visible and another consumer's, and a second release with the same
handle could end that consumer's lease; with renewals stopped, it is visible at its
deadline anyway.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import anyio
import structlog
from anyio.abc import TaskStatus

from worker.backend import Backend
from worker.clock import Clock
from worker.core.lease import Lease, LeaseState
from worker.core.settlement import Action, Settlement
from worker.errors import BackendError, TransientBackendError
from worker.runtime.calls import as_backend_error, call_by, may_have_landed
from worker.runtime.lease_keeper import LeaseKeeper
from worker.runtime.metrics import Metrics
from worker.types import BatchResult, Deletion, EntryFailure, VisibilityChange

__all__ = ["Settler"]

_Key = tuple[str, Action]
_Item = tuple[Lease, int]
_HELD = LeaseState.HELD
#: Entry ids, made once: a batch's entries are numbered from 0 (no str() per message).
_IDS = tuple(str(i) for i in range(64))


def _entry_ids(count: int) -> Sequence[str]:
    """The ids of a batch of `count` entries: "0", "1", ..."""
    return _IDS[:count] if count <= len(_IDS) else [str(i) for i in range(count)]


class Settler:
    def __init__(
        self,
        backend: Backend,
        *,
        clock: Clock,
        metrics: Metrics,
        linger_s: float,
        leases: LeaseKeeper,
        retry_interval_s: float = 1.0,
        call_timeout_s: float = 5.0,
        renew_timeout_s: float = 1.0,
        logger: Any = None,
    ) -> None:
        self._backend = backend
        self._clock = clock
        self._metrics = metrics
        self._linger = linger_s
        self._leases = leases
        self._retry_interval = retry_interval_s
        self._call_timeout = call_timeout_s
        self._renew_timeout = renew_timeout_s
        self._log = logger or structlog.get_logger("lease_worker.settle")
        limits = backend.limits  # a backend's limits are fixed: read once, not per message
        self._batch_sizes = {
            Action.DELETE: limits.delete_batch,
            Action.RELEASE: limits.release_batch,
        }
        self._pending: dict[_Key, list[_Item]] = {}
        self._first_at: dict[_Key, float] = {}
        #: Keys with a failed call to retry: nothing of theirs goes out before this time.
        self._not_before: dict[_Key, float] = {}
        self._wake = anyio.Event()
        self._calls_in_flight = 0
        self._idle: anyio.Event | None = None  # made by `flush`, set when all is sent
        self._flush_all = False
        #: The settler's task has ended: `flush` cannot wait for it, `send_now` must send.
        self._down = False

    def submit(self, lease: Lease, settlement: Settlement) -> None:
        """Queue a delete or release of `lease`; FORGET settles it here and now."""
        if lease.state is not _HELD and not lease.active:
            return
        action = settlement.action
        if action is Action.FORGET:
            self._leases.settled(lease)
            return
        self._leases.settling(lease, stop_renewals=action is Action.RELEASE)
        self._enqueue(lease, action, settlement.visibility_s)

    @property
    def pending(self) -> int:
        return sum(len(items) for items in self._pending.values())

    async def flush(self) -> None:
        """Send everything pending now and wait until no call is in flight."""
        while (self._pending or self._calls_in_flight) and not self._down:
            self._flush_all = True
            self._idle = self._idle or anyio.Event()
            self._wake.set()
            await self._idle.wait()

    async def send_now(self) -> None:
        """Send what is pending from the calling task: for when the settler's own task is
        being cancelled with everything else (the supervisor cancelled from outside). A
        retry waiting out its pause goes now too: there is no later."""
        self._flush_all = True
        for key, items in self._take_ready(waive_pauses=True):
            self._calls_in_flight += 1
            # The keeper went down too: nothing can renew a lease first any more.
            await self._send(key, items, hold=False)

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        try:
            await self._run(task_status)
        finally:
            self._down = True
            if self._idle is not None:
                self._idle.set()

    async def _run(self, task_status: TaskStatus[None]) -> None:
        async with anyio.create_task_group() as calls:
            task_status.started()
            while True:
                for key, items in self._take_ready():
                    self._calls_in_flight += 1
                    calls.start_soon(self._send, key, items)
                self._update_idle()
                self._wake = anyio.Event()
                with anyio.CancelScope(deadline=self._next_deadline()):
                    await self._wake.wait()

    def _take_ready(self, *, waive_pauses: bool = False) -> list[tuple[_Key, list[_Item]]]:
        now = self._clock.now()
        ready: list[tuple[_Key, list[_Item]]] = []
        for key in list(self._pending):
            if waive_pauses:
                self._not_before.pop(key, None)
            elif now < self._not_before.get(key, -math.inf):
                continue  # a retry waits out its pause, even during a flush
            size = self._batch_size(key[1])
            items = self._pending[key]
            while len(items) >= size or (items and now >= self._due_at(key)):
                ready.append((key, items[:size]))
                del items[:size]
            if not items:
                del self._pending[key], self._first_at[key]
                self._not_before.pop(key, None)
        return ready

    def _due_at(self, key: _Key) -> float:
        lingered = -math.inf if self._flush_all else self._first_at[key] + self._linger
        return max(lingered, self._not_before.get(key, -math.inf))

    def _next_deadline(self) -> float:
        return min((self._due_at(key) for key in self._pending), default=math.inf)

    def _update_idle(self) -> None:
        if not self._pending and self._calls_in_flight == 0:
            self._flush_all = False
            if self._idle is not None:
                self._idle.set()
                self._idle = None

    def _batch_size(self, action: Action) -> int:
        return self._batch_sizes[action]

    async def _send(self, key: _Key, items: list[_Item], *, hold: bool = True) -> None:
        queue, action = key
        live: list[_Item] = []  # the entries claimed and put on the wire
        try:
            await self._wait_for_renewals(action, items, hold=hold)
            # From here to the wire, no await: the lease checked is the lease the call uses.
            live = self._unlapsed(queue, action, items)
            if not live:
                return  # every entry dropped: no call at all
            handles = [self._leases.claim(lease) for lease, _ in live]
            self._metrics.settle_calls.labels(queue, action.value).inc()
            try:
                result = await self._call(queue, action, live, handles, hold=hold)
            except Exception as raised:
                operation = (
                    "DeleteMessageBatch"
                    if action is Action.DELETE
                    else "ChangeMessageVisibilityBatch"
                )
                self._call_failed(key, live, as_backend_error(raised, self._log, operation, queue))
                return
            self._apply(queue, action, live, result, handles)
        except anyio.get_cancelled_exc_class():
            # Cancelled with the settler (the supervisor cancelled from outside): the call
            # may not have landed, so `send_now` sends a delete again rather than let a
            # handled message lapse and run twice (a repeated delete is harmless; a lapsed
            # lease is dropped there, as here). A release that went out may have landed, and
            # is not sent again (`_call_failed`): given up on, visible at its deadline.
            sent = {id(lease) for lease, _ in live}
            for lease, visibility in items:
                if not lease.active:
                    continue
                if action is Action.RELEASE and id(lease) in sent:
                    self._leases.settled(lease)
                else:
                    self._enqueue(lease, action, visibility)
            raise
        finally:
            for lease, _ in live:
                self._leases.unclaim(lease)
            self._calls_in_flight -= 1
            self._wake.set()

    async def _wait_for_renewals(
        self, action: Action, items: Sequence[_Item], *, hold: bool
    ) -> None:
        """Wait until no renewal of these leases is on the wire (a delete's lease renewed
        first if it could lapse during the call); the caller then claims them from the
        keeper without an await: the handles to use, and no renewal of them goes out until
        they are unclaimed."""
        hold_s = self._renew_timeout if hold and action is Action.DELETE else 0.0
        # A lease with more time left than this needs no renewal first (the keeper decides
        # for the others): the busy path awaits nothing per message.
        short_s = hold_s + self._retry_interval + self._renew_timeout if hold_s > 0 else 0.0
        while True:
            now, waited = self._clock.now(), False
            for lease, _ in items:
                if lease.extending or lease.deadline - now < short_s:
                    await self._leases.wait_extension_idle(lease, hold_s)
                    waited = True
            if not waited or not any(lease.extending for lease, _ in items):
                return

    def _unlapsed(self, queue: str, action: Action, items: list[_Item]) -> list[_Item]:
        """`items` less the entries whose lease is gone now, by the clock: lost, or its
        deadline passed (the keeper loses it now). Those are never sent: the message is
        visible again at the service, perhaps another consumer's, and a service that
        honoured the stale handle would hide or delete that consumer's message. Each is
        logged and counted once (it leaves the settler here)."""
        now = self._clock.now()
        for lease, _ in items:
            if now >= lease.deadline or not lease.active:
                break
        else:
            return items  # the busy path: every lease still held
        live: list[_Item] = []
        for item in items:
            lease = item[0]
            if lease.state is LeaseState.DONE:
                # Ended while it waited: a copy received meanwhile is running as a new
                # delivery (`Dispatcher.adopt`), and this handle is no longer the message's.
                reason = "superseded"
            elif not self._leases.lapsed(lease, now):
                live.append(item)
                continue
            else:
                reason = lease.lost_reason or "lapsed"
            self._metrics.settlements_dropped.labels(queue, action.value, reason).inc()
            self._log.warning(
                "settle.dropped",
                queue=queue,
                message_id=lease.message_id,
                action=action.value,
                reason=reason,
            )
        return live

    def _delete_deadline(self, items: Sequence[_Item]) -> float:
        """A delete is abandoned in time for a renewal after it (no renewal goes out while it
        is on the wire): a retry interval and a renewal call before the earliest deadline.
        `_wait_for_renewals` made sure that leaves at least a call's normal time, where it
        could."""
        now = self._clock.now()
        latest = min(lease.deadline for lease, _ in items)
        latest -= self._retry_interval + self._renew_timeout
        if latest < now + self._renew_timeout:  # could not be renewed (cap): best effort
            return now + self._call_timeout
        return min(now + self._call_timeout, latest)

    async def _call(
        self,
        queue: str,
        action: Action,
        items: Sequence[_Item],
        handles: Sequence[str],
        *,
        hold: bool,
    ) -> BatchResult:
        deadline = self._clock.now() + self._call_timeout
        if action is Action.DELETE:
            if hold:  # else no renewal can follow (the keeper is gone): all the time there is
                deadline = self._delete_deadline(items)
            deletions = list(map(Deletion, _entry_ids(len(handles)), handles))
            return await call_by(
                deadline,
                lambda: self._backend.delete(queue, deletions),
                operation="DeleteMessageBatch",
                queue=queue,
            )
        changes = [
            VisibilityChange(entry_id, handle, vis)
            for entry_id, handle, (_, vis) in zip(
                _entry_ids(len(handles)), handles, items, strict=True
            )
        ]
        return await call_by(
            deadline,
            lambda: self._backend.release(queue, changes),
            operation="ChangeMessageVisibilityBatch",
            queue=queue,
        )

    def _apply(
        self,
        queue: str,
        action: Action,
        items: Sequence[_Item],
        result: BatchResult,
        handles: Sequence[str],
    ) -> None:
        succeeded = set(result.succeeded)
        failures = {failure.entry_id: failure for failure in result.failed}
        ids = _entry_ids(len(items))
        for i, (lease, visibility) in enumerate(items):
            if lease.receipt_handle != handles[i] and lease.active:
                # Adopted a newer copy while the call was out: the answer, whatever it was,
                # speaks of the old handle. The same call again, with the new one.
                self._enqueue(lease, action, visibility)
                continue
            entry_id = ids[i]
            if not failures and entry_id in succeeded:  # the busy path: all went through
                self._leases.settled(lease)
                continue
            failure = failures.get(entry_id)
            if failure is None and entry_id not in succeeded:
                failure = EntryFailure(entry_id, "Missing", "no answer for this entry")
            if failure is not None and not failure.sender_fault and self._may_retry(lease, action):
                self._retry_later(lease, action, visibility)
                continue
            if failure is not None:
                self._metrics.settle_failures.labels(queue, action.value, failure.code).inc()
                self._log.warning(
                    f"settle.{action.value}_failed",
                    queue=queue,
                    message_id=lease.message_id,
                    code=failure.code,
                )
            self._leases.settled(lease)

    def _call_failed(self, key: _Key, items: Sequence[_Item], error: BackendError) -> None:
        queue, action = key
        code = error.code or type(error).__name__
        self._metrics.settle_failures.labels(queue, action.value, code).inc(len(items))
        self._log.warning(
            f"settle.{action.value}_call_failed",
            queue=queue,
            messages=len(items),
            code=code,
            error=str(error),
        )
        # A release that may have landed is not sent again: the message may be visible
        # already and received by another consumer, whose lease a second release with this
        # handle could end (SQS does not always refuse a stale handle). Its renewals have
        # stopped, so it is visible at its deadline at the latest: a delay, never a run
        # beside another. A delete is idempotent: retried while the lease holds.
        landed = action is Action.RELEASE and may_have_landed(error)
        for lease, visibility in items:
            if (
                isinstance(error, TransientBackendError)
                and not landed
                and self._may_retry(lease, action)
            ):
                self._retry_later(lease, action, visibility)
            else:
                self._leases.settled(lease)

    def _may_retry(self, lease: Lease, action: Action) -> bool:
        # Until the lease's deadline: the keeper moves it on while a delete is pending (so a
        # delete is retried while the lease holds); after it, the message is visible anyway.
        return lease.active and self._clock.now() < lease.deadline

    def _enqueue(self, lease: Lease, action: Action, visibility: int) -> None:
        key = (lease.queue, action)
        pending = self._pending.get(key)
        if pending is None:
            self._pending[key] = [(lease, visibility)]
            self._first_at[key] = self._clock.now()
            self._wake.set()  # a new linger deadline to wait for
            return
        pending.append((lease, visibility))
        if len(pending) >= self._batch_sizes[action]:
            self._wake.set()  # a full batch goes at once

    def _retry_later(self, lease: Lease, action: Action, visibility: int) -> None:
        self._enqueue(lease, action, visibility)
        self._not_before[(lease.queue, action)] = self._clock.now() + self._retry_interval
