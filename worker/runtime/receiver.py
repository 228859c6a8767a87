"""The receive loop of one queue, with flow control.

Each long poll asks for min(batch size, free slots) messages, reserving those slots first,
so that the worker never holds more than `max_in_flight` messages of the queue even with
`receive_concurrency` polls under way at once: a slot is held from the receive until the
message's lease ends (deleted, released, forgotten or lost). Every message gets a
lease the moment it arrives, before its handler starts.

With `FlowControl.max_bytes`, each message held counts what it costs in memory (its body,
attributes and, unless the handler takes the body raw, its decoded payload), and each
receive asks for no more messages than the bytes left can take, the largest message seen so
far counted with its answer's buffers, which stay counted while the receive is under way
(`worker.core.byte_budget`): the count goes past the cap by one message at most.

A transient failure (throttling, 5xx, timeouts, `OverLimit`) pauses receiving with a
doubling backoff while handlers and renewals go on. A fatal one (missing queue, access
denied) is passed to `on_fatal`, which starts a shutdown.

`stop()` (a shutdown) ends receiving without throwing away what a long poll already took:
no new poll starts (a loop waiting for a slot or pausing after a failure returns at once),
a poll in flight is left to finish, and whatever it brings goes to `release` (handed back
at once, its handler never run) instead of `dispatch`. A poll is given `wait_s` plus the
call timeout at most; the supervisor bounds the wait by the shutdown's grace and then
cancels what is left (`cut_short`): messages the service handed out in an answer that
never arrives cannot be released, having no receipt handle here, and stay invisible until
the visibility asked for at receive (`LeaseConfig.visibility_s`) runs out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import anyio
import structlog
from anyio.abc import TaskStatus

from worker.backend import Backend
from worker.clock import Clock
from worker.config import WorkerConfig
from worker.core.byte_budget import ByteBudget, message_bytes
from worker.core.lease import Lease
from worker.errors import FatalBackendError
from worker.runtime.calls import as_backend_error, call_by
from worker.runtime.lease_keeper import LeaseKeeper
from worker.runtime.metrics import Metrics
from worker.runtime.rate_gate import RateGate
from worker.runtime.slots import Slots
from worker.types import ReceivedMessage

__all__ = ["Receiver"]


class Receiver:
    def __init__(
        self,
        queue: str,
        *,
        backend: Backend,
        keeper: LeaseKeeper,
        clock: Clock,
        metrics: Metrics,
        config: WorkerConfig,
        slots: Slots,
        adopt: Callable[[ReceivedMessage, float, float], bool],
        dispatch: Callable[[ReceivedMessage, Lease], None],
        release: Callable[[Lease], None],
        on_finish: Callable[[Lease], None],
        on_fatal: Callable[[FatalBackendError], None],
        logger: Any = None,
        note_sent: bool = False,
        rate: RateGate | None = None,
        decoded: bool = True,
    ) -> None:
        self.queue = queue
        self._backend = backend
        self._keeper = keeper
        self._clock = clock
        self._metrics = metrics
        self._config = config
        self._poll_wait_s = config.poll_wait_s  # worked out once: the config is frozen
        self._slots = slots
        self._rate = rate
        #: With `max_bytes`: each receive sized to the bytes left (`worker.core.byte_budget`),
        #: and what each held message counted (taken off when its lease ends).
        self._budget = None if slots.max_bytes is None else ByteBudget(slots.max_bytes)
        self._decoded = decoded  # the handler decodes the body: its payload is counted too
        self._counted: dict[Lease, int] = {}
        self._adopt = adopt
        self._dispatch = dispatch
        self._release = release
        self._on_finish = on_finish
        self._stopping = False  # read once a receive: a plain bool
        self._stopped = anyio.Event()  # wakes a pause after a failed receive
        self._loops = 0  # `run()`s under way (`receive_concurrency`)
        self._ended = anyio.Event()  # set once stopped and every loop has returned
        #: Polls cancelled on the wire after `stop()`: what they took cannot be released.
        self.cut_short = 0
        #: The polls under way, each in a scope `stop()` may cancel.
        self._polls: dict[anyio.CancelScope, None] = {}  # in order: runs repeat exactly
        # Bound once: every lease keeps both, and a bound method made per lease is 64 bytes.
        self._now = clock.now
        self._lease_finished = self._finished
        # Looked up once: they change with every message.
        self._received = metrics.received.labels(queue)
        self._in_flight = metrics.in_flight.labels(queue)
        self._on_fatal = on_fatal
        self._log = logger or structlog.get_logger("lease_worker.receive")
        #: False from a failed receive until the next one that answers: for readiness.
        self.reachable = True
        self._oldest_sent_ms: int | None = None
        #: Keep the oldest SentTimestamp received, for the queue sampler (only when it runs:
        #: it costs a lookup and a parse per message).
        self._note_sent_on = note_sent

    def stop(self) -> None:
        """Start no more polls; those in flight finish, and what they bring is released (on
        a backend whose cancelled receive takes nothing, they are cancelled at once)."""
        self._stopping = True
        self._stopped.set()
        self._slots.close()
        if self._backend.limits.cancelled_receive_takes_nothing:
            for poll in self._polls:
                poll.cancel()
        self._end_if_idle()

    async def wait_stopped(self) -> None:
        """Return once stopped and no poll is under way any more."""
        await self._ended.wait()

    def _end_if_idle(self) -> None:
        if self._stopping and not self._loops:
            self._ended.set()

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        self._loops += 1
        try:
            await self._run(task_status)
        finally:
            self._loops -= 1
            self._end_if_idle()

    async def _run(self, task_status: TaskStatus[None]) -> None:
        task_status.started()
        pause = self._config.receive_backoff_s
        while True:
            reserved = await self._slots.reserve(self._backend.limits.receive_batch)
            if not reserved:
                return  # stopped
            if self._budget is not None:
                # No more messages than the bytes left can take (bodies seen so far).
                wanted = self._budget.receive_count(reserved, self._slots.bytes)
                self._slots.give_back(reserved - wanted)
                reserved = wanted
            if self._rate is not None:
                # Held back before the receive: a message the limit delays is not received.
                granted = await self._rate.acquire(reserved, self._stopped)
                self._slots.give_back(reserved - granted)
                reserved = granted
                if not reserved:
                    return  # stopped
            held = 0
            try:
                held = await self._receive_once(reserved)
            except Exception as raised:
                if isinstance(raised, FatalBackendError):
                    self._slots.give_back(reserved - held)
                    self._metrics.receive_errors.labels(self.queue, raised.code or "fatal").inc()
                    self._on_fatal(raised)
                    return
                error = as_backend_error(raised, self._log, "ReceiveMessage", self.queue)
                self._metrics.receive_errors.labels(self.queue, error.code or "transient").inc()
                self.reachable = False
                self._log.warning(
                    "receive.failed",
                    queue=self.queue,
                    code=error.code,
                    error=str(error),
                    retry_in_s=pause,
                )
                self._slots.give_back(reserved - held)
                with anyio.move_on_after(pause):
                    await self._stopped.wait()  # a stop ends the pause
                pause = min(pause * 2, self._config.receive_backoff_max_s)
                continue
            except BaseException:
                self._slots.give_back(reserved - held)
                raise
            self._slots.give_back(reserved - held)
            self.reachable = True
            pause = self._config.receive_backoff_s

    async def _receive_once(self, count: int) -> int:
        """One receive of up to `count` (reserved) messages; returns how many are now held.
        With `max_bytes`, what its answer may cost while it is read is counted until then."""
        budget = self._budget
        if budget is None:
            return await self._receive(count)
        ahead = budget.ahead(count)
        self._slots.hold_bytes(ahead)
        try:
            return await self._receive(count)
        finally:
            self._slots.free_bytes(ahead)

    async def _receive(self, count: int) -> int:
        """`_receive_once`, bytes apart.

        After a failed receive the next one is a short poll: an empty long poll answers only
        after `wait_s`, which kept `/readyz` failing for that long after the service came
        back; the short poll's answer says at once that it is reachable again."""
        visibility_s = self._config.lease.visibility_s
        wait_s = self._poll_wait_s if self.reachable else 0
        sent_at = self._clock.now()
        self._metrics.receive_calls.labels(self.queue).inc()
        messages: Sequence[ReceivedMessage] = ()
        try:
            with anyio.CancelScope() as poll:
                self._polls[poll] = None
                messages = await call_by(
                    sent_at + wait_s + self._config.call_timeout_s,
                    lambda: self._backend.receive(
                        self.queue,
                        max_messages=count,
                        wait_s=wait_s,
                        visibility_s=visibility_s,
                    ),
                    operation="ReceiveMessage",
                    queue=self.queue,
                )
        except BaseException as raised:
            if self._rate is not None:
                self._rate.refund(count)
            if self._stopping and isinstance(raised, anyio.get_cancelled_exc_class()):
                self.cut_short += 1
            raise
        finally:
            self._polls.pop(poll, None)
        if self._rate is not None:
            self._rate.refund(count - len(messages))
        # The service handed these out after the request left, and that is all an answer
        # proves: it may have waited anywhere on the way back (a proxy, a retransmit, a
        # pause of this process). See `Lease` for why the send time is the only safe date.
        handed_out = sent_at
        # Stopped while the poll was out: what it brought is handed back, never run.
        dispatch = self._release_now if self._stopping else self._dispatch
        if not messages:
            self._metrics.empty_receives.labels(self.queue).inc()
        else:
            self._received.inc(len(messages))
        if messages:
            return self._hold(messages, handed_out, dispatch)
        return 0

    def _hold(
        self,
        messages: Sequence[ReceivedMessage],
        handed_out: float,
        dispatch: Callable[[ReceivedMessage, Lease], None],
    ) -> int:
        """A lease for each message received (bar copies of those held), then its handler;
        returns how many are held. What is the same for the whole answer is read once."""
        queue = self.queue
        visibility_s = self._config.lease.visibility_s
        service_max_lease_s = self._backend.limits.max_lease_s
        max_lease_s = min(self._config.lease.max_lease_s, service_max_lease_s)
        keeper, now, finished = self._keeper, self._now, self._lease_finished
        # Counted up front for the whole answer (a copy adopted is taken off again), so
        # that a lease lost on arrival below never takes the gauge under what is held.
        self._in_flight.inc(len(messages))
        # One reading for the answer: nothing below awaits. A stall in between (the process
        # stopped) is caught when each handler starts (Executor.run looks at its deadline).
        arrived = now()
        held = 0
        for received in messages:
            if self._note_sent_on:
                self._note_sent(received)
            # Routed by this receiver's own queue (the name or URL the handler was
            # registered under), whatever spelling the backend used.
            if received.queue != queue:
                received = replace(received, queue=queue)
            if self._adopt(received, handed_out, visibility_s):
                self._in_flight.dec()
                continue
            # Positional: ten keywords matched a message cost more than the lease's fields.
            lease = Lease(
                queue,
                received.message_id,
                received.receipt_handle,
                handed_out,  # received_at
                visibility_s,
                max_lease_s,
                now,
                service_max_lease_s,
                finished,  # on_finish
                received,
            )
            held += 1
            if self._budget is not None:
                counted = self._counted[lease] = message_bytes(received, decoded=self._decoded)
                self._budget.seen(counted, received)
                self._slots.hold_bytes(counted)
            keeper.track(lease)
            if arrived >= lease.deadline and keeper.lapsed(lease, arrived):
                continue  # lapsed before it arrived (a late answer, a stall): lost, never run
            dispatch(received, lease)
        return held

    def _release_now(self, received: ReceivedMessage, lease: Lease) -> None:
        self._release(lease)

    def _note_sent(self, received: ReceivedMessage) -> None:
        sent = received.attributes.get("SentTimestamp")
        if sent is not None and sent.isdigit():
            sent_ms = int(sent)
            if self._oldest_sent_ms is None or sent_ms < self._oldest_sent_ms:
                self._oldest_sent_ms = sent_ms

    def take_oldest_age_s(self) -> float | None:
        """Age of the oldest message received since the last call (None: none received)."""
        sent_ms, self._oldest_sent_ms = self._oldest_sent_ms, None
        if sent_ms is None:
            return None
        wall_now = self._clock.now() + self._clock.wall_offset_s()
        return max(0.0, wall_now - sent_ms / 1000)

    def _finished(self, lease: Lease) -> None:
        self._slots.give_back()
        if self._budget is not None:
            self._slots.free_bytes(self._counted.pop(lease, 0))
        self._in_flight.dec()
        self._on_finish(lease)
