"""Running one handler on one message, and turning what it did into a settlement.

Each message gets its own task and its own level-triggered cancel scope (`HandlerScope`):
the lease keeper cancels it when the lease is lost (LEASE_LOST) or reaches its hard cap
(TIMED_OUT), the supervisor at the end of a shutdown drain (SHUTDOWN), and every await of
the handler after that raises CancelledError again until it ends. Whatever happens, the
message is handed to the settler exactly once, even when the task itself is cancelled from
outside, and not at all if the supervisor already settled it (a handler it gave up on).

What a handler raises is its message's failure (the error policy applies), BaseExceptions
too (SystemExit, KeyboardInterrupt, GeneratorExit, one of its own): one message never stops
the worker. A GeneratorExit is told apart from this coroutine being closed (garbage
collected, never to run again) by who runs: raised by handler code, the handler's task is
running its step (`raised_by_handler`). A CancelledError nobody asked for (the handler's
own, or a library's) is a failure as well, logged as `handler.raised_cancelled_error`.

A `LeaseLostError` (from `message.lease.ensure_held()`, `extend()`, a send) raised out of a
handler whose lease is in fact gone (lost, or lapsed by the clock: the keeper loses it then)
is a fence that held, not a crash: logged once as `handler.fenced` (a warning, no
traceback), counted in `handlers_fenced_total`, outcome LEASE_LOST (neither deleted nor
released). Raised while the lease is still held with time left (by hand, or by `extend()`
once the keeper stopped), it is the handler's failure: the message can still be handed
back, so its error policy applies.

Synchronous handlers run in a daemon thread (`worker.runtime.threads`), so they never hold
up the event loop and the lease keeper with it. They cannot be interrupted. Cancelled for a
shutdown, the task keeps waiting for the thread, with the lease still renewed, and settles
by what the thread did if it ends in time; the supervisor gives up on it at the end of the
shutdown, and its message is then left to lapse (visible again when its last extension runs
out), never released while the thread may still be working on it. So is an async handler's
message when the supervisor gives up on a coroutine that will not end (`abandon`). After a
lost lease or at the hard cap the lease cannot be kept: the task stops waiting and the
message is forgotten, not released, while the thread runs on to its end (or the process's
exit).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Sequence
from typing import Any

import structlog

from worker.backend import Limits
from worker.clock import LoopClock
from worker.core.lease import Lease, LeaseState
from worker.core.settlement import FIXED, Action, Outcome, Settlement, settlement_for
from worker.envelope import fence
from worker.envelope.codecs import PayloadError
from worker.envelope.large_payloads import MissingPayload
from worker.envelope.tracing import open_handler_span
from worker.errors import DecodeError, Discard, Duplicate, LeaseLostError, Retry
from worker.message import Message, lease_of
from worker.middleware import CallNext, build_chain
from worker.registry import HandlerSpec
from worker.runtime.families import CounterChild, HistogramChild
from worker.runtime.lease_keeper import LeaseKeeper
from worker.runtime.log_context import bind_body, bind_message
from worker.runtime.metrics import Metrics
from worker.runtime.scope import HandlerScope
from worker.runtime.settler import Settler
from worker.runtime.threads import DaemonThreads
from worker.types import ReceivedMessage

__all__ = ["Executor", "Observer", "decode", "fetch", "raised_by_handler"]

_FORGET = Settlement(Action.FORGET)
_HELD = LeaseState.HELD
_LOST = LeaseState.LOST
_SUCCEEDED = Outcome.SUCCEEDED
_SKIPPED = Outcome.SKIPPED


class _QueueMetrics:
    """One queue's metric children that `finish` writes, looked up once, not once a
    message (`labels()` builds a tuple and looks it up)."""

    __slots__ = ("_handled", "_metrics", "_queue", "seconds")

    def __init__(self, metrics: Metrics, queue: str) -> None:
        self._metrics = metrics
        self._queue = queue
        self._handled: dict[Outcome, CounterChild] = {}
        self.seconds: HistogramChild = metrics.handler_seconds.labels(queue)

    def handled(self, outcome: Outcome) -> CounterChild:
        child = self._handled.get(outcome)
        if child is None:
            child = self._handled[outcome] = self._metrics.handled.labels(
                self._queue, outcome._value_
            )
        return child


#: Called after each handler run with (message, outcome, settlement): for tests and hooks.
Observer = Callable[[ReceivedMessage, Outcome, Settlement], None]


class Executor:
    def __init__(
        self,
        *,
        keeper: LeaseKeeper,
        settler: Settler,
        clock: LoopClock,
        metrics: Metrics,
        limits: Limits,
        sync_threads: int,
        observers: list[Observer],
        logger: Any = None,
    ) -> None:
        self._keeper = keeper
        self._settler = settler
        self._clock = clock
        self._metrics = metrics
        self._limits = limits
        self._threads = DaemonThreads(sync_threads)
        self._observers = observers
        self._log = logger or structlog.get_logger("lease_worker.handler")
        self._chains: dict[str, CallNext] = {}
        self._queue_metrics: dict[str, _QueueMetrics] = {}
        #: The last bound logger `finish` saw, and whether it keeps debug events.
        self._debug_log: object = None
        self._debug_on = True

    @property
    def clock(self) -> LoopClock:
        return self._clock

    @property
    def threads(self) -> DaemonThreads:
        """The threads of synchronous handlers (read for metrics)."""
        return self._threads

    def chain_for(self, spec: HandlerSpec) -> CallNext:
        chain = self._chains.get(spec.queue)
        if chain is None:
            chain = self._chains[spec.queue] = build_chain(spec.middleware, self._endpoint(spec))
        return chain

    def _endpoint(self, spec: HandlerSpec) -> CallNext:
        arguments = spec.binding.arguments
        func: Callable[..., Any] = spec.func
        if spec.is_async:
            if spec.binding.order == ("message",):
                return func

            async def typed(message: Message) -> Any:
                return await func(*arguments(message))

            return typed

        async def in_thread(message: Message) -> Any:
            key = (message.queue, message.message_id)
            # Returned for an idempotency guard that caches results (an async handler's
            # return value reaches it too: the guard is the innermost middleware).
            return await _wait_for_thread(
                await self._threads.start(key, func, *arguments(message)), lease_of(message)
            )

        return in_thread

    def abandon(self, lease: Lease) -> bool:
        """The supervisor gives up waiting for this lease's handler: settle the message now.

        Forgotten (left to lapse: no more renewals, visible again when the last extension
        runs out) while anything of its handler still exists: its coroutine (one that
        swallows every cancellation, or never awaits; a batch's), or its synchronous
        handler's thread. Released, another consumer could run it alongside that code.
        Released at once if its handler never started (a FIFO group's later message).
        Returns True if left to lapse.
        """
        scope = lease.scope  # set from the handler's start (a batch's: from its gathering)
        in_thread = self._threads.busy((lease.queue, lease.message_id))
        if in_thread or scope is not None:
            self._settler.submit(lease, _FORGET)
        else:
            release = Settlement(Action.RELEASE, self._limits.min_release_visibility_s)
            self._settler.submit(lease, release)
        if isinstance(scope, HandlerScope):
            if in_thread:
                scope.cancel()  # wakes the task waiting for the thread: it stops waiting
            else:
                scope.abandon()
        return in_thread or scope is not None

    def skip(self, spec: HandlerSpec, received: ReceivedMessage, lease: Lease) -> None:
        """Release a message without running its handler (to keep a FIFO group in order)."""
        self.finish(spec, received, lease, Outcome.SKIPPED, 0.0, self._clock.now())

    async def run(self, spec: HandlerSpec, received: ReceivedMessage, lease: Lease) -> Outcome:
        """The whole life of one message's handler task; returns its outcome.

        One coroutine, with synchronous helpers, on purpose: every frame of this chain is
        held, with the handler's own, for as long as the handler runs (about 300 bytes each,
        at up to 100,000 messages in flight), and each level costs an await per message.
        """
        # Each task runs in its own copy of the context: no need to unbind afterwards.
        bind_message(received.queue, received.message_id)
        bind_body(received.body)  # what it logs is scrubbed of the body's values
        fence.enter(lease)  # a send from inside the handler checks its lease first
        started = self._clock.now()
        outcome, retry_after = Outcome.SHUTDOWN, 0.0
        span = open_handler_span(received)  # no `with`: see OpenSpan
        try:
            if started >= lease.deadline and lease.state is _HELD:
                # A stall since the receive (the process stopped, the loop blocked): the
                # lease ran out before its handler could start, perhaps before the keeper's
                # watchdog runs. Lost, never run: another consumer may hold it already.
                self._keeper.lapsed(lease, started)
            if lease.cancel_reason is not None:  # lost, capped or shut down before it started
                outcome = Outcome.LEASE_LOST if lease.lost else lease.cancel_reason
                return outcome
            # The clock's loop, while the supervisor runs: the task is found without looking
            # the loop up (LoopClock.bind).
            task = asyncio.current_task(self._clock.loop)
            scope = lease.scope = HandlerScope(task)
            try:
                # An earlier copy of this message may still run in an abandoned thread.
                threads = self._threads
                if threads.any_running and threads.busy((received.queue, received.message_id)):
                    await threads.wait_idle((received.queue, received.message_id))
                fetched = received if spec.large_payloads is None else await fetch(spec, received)
                chain = self._chains.get(spec.queue)
                if chain is None:
                    chain = self.chain_for(spec)
                # raw_body stays what travelled on the queue (an S3 pointer, say).
                await chain(Message(received, decode(spec, fetched), lease))
                outcome = _SUCCEEDED
            except asyncio.CancelledError as error:
                if not scope.close():
                    raise  # someone else's cancellation too: the task group is going down
                outcome = self._cancelled(spec, received, lease, scope, error)
            except BaseException as error:  # SystemExit, KeyboardInterrupt, GeneratorExit, ...
                if isinstance(error, GeneratorExit) and not raised_by_handler(task):
                    raise  # this coroutine is being closed: it never runs again
                outcome, retry_after = self._failed(spec, received, lease, error)
                scope.close()  # a cancellation it caught and swallowed is taken back
            else:
                scope.close()
            finally:
                lease.scope = None
            if lease.state is _LOST:
                outcome, retry_after = Outcome.LEASE_LOST, 0.0
        finally:
            if span is not None:
                span.close(outcome.value)
            self.finish(spec, received, lease, outcome, retry_after, started)
        return outcome

    def _cancelled(
        self,
        spec: HandlerSpec,
        received: ReceivedMessage,
        lease: Lease,
        scope: HandlerScope,
        error: asyncio.CancelledError,
    ) -> Outcome:
        """A cancellation of the handler's own scope: asked for (the lease's reason), or
        the handler's (or a library's) own CancelledError, which is its failure."""
        if scope.requested:
            return lease.cancel_reason or Outcome.SHUTDOWN
        self._log.error(
            "handler.raised_cancelled_error",
            handler=spec.name,
            receive_count=received.receive_count,
            exc_info=error,
        )
        return Outcome.FAILED

    def _failed(
        self, spec: HandlerSpec, received: ReceivedMessage, lease: Lease, error: BaseException
    ) -> tuple[Outcome, float]:
        """What the handler (or the decoding of its body) raised, as an outcome."""
        if isinstance(error, LeaseLostError) and self.fenced(spec, (lease,)):
            return Outcome.LEASE_LOST, 0.0
        if isinstance(error, Discard):
            self._log.info("handler.discarded", reason=error.reason)
            return Outcome.DISCARDED, 0.0
        if isinstance(error, Duplicate):
            self._log.info("handler.duplicate", reason=error.reason)
            return Outcome.DUPLICATE, 0.0
        if isinstance(error, Retry):
            self._log.info("handler.retry", after_s=error.after_s, reason=error.reason)
            return Outcome.RETRY, error.after_s
        if isinstance(error, DecodeError):
            self._log.error(
                "handler.undecodable_body",
                reason=error.reason,
                receive_count=received.receive_count,
            )
            return Outcome.FAILED, 0.0
        self._log.error(
            "handler.failed",
            handler=spec.name,
            receive_count=received.receive_count,
            exc_info=error,
        )
        return Outcome.FAILED, 0.0

    def fenced(self, spec: HandlerSpec, leases: Sequence[Lease], *, batch: bool = False) -> bool:
        """For a `LeaseLostError` raised out of a handler of `leases` (one, or a batch's):
        True if its fence held, i.e. one of them is in fact gone (lost, or its deadline
        passed by the clock: the keeper loses it now); then logged once as `handler.fenced`
        (no traceback: a lease event, not a bug) and counted. False if every lease is
        still held with time left (a `LeaseLostError` raised by hand, or by `extend()` once
        the keeper stopped): that is the handler's failure, and its message can still be
        handed back by its error policy."""
        now = self._clock.now()
        gone = [lease for lease in leases if self._keeper.lapsed(lease, now)]
        if not gone:
            return False
        self._metrics.handlers_fenced.labels(spec.queue).inc()
        reason = gone[0].lost_reason
        if not batch:  # the message's queue and id are bound to the task's log context
            self._log.warning("handler.fenced", handler=spec.name, reason=reason)
        else:
            self._log.warning(
                "handler.fenced",
                handler=spec.name,
                queue=spec.queue,
                messages=len(gone),
                reason=reason,
            )
        return True

    def finish(  # also for each message of a batch (worker.runtime.batches)
        self,
        spec: HandlerSpec,
        received: ReceivedMessage,
        lease: Lease,
        outcome: Outcome,
        retry_after: float,
        started: float,
    ) -> None:
        now = self._clock.now()
        if (
            outcome is not _SKIPPED
            # Held with time left is not lapsed: the keeper is asked only otherwise.
            and (lease.state is not _HELD or now >= lease.deadline)
            and self._keeper.lapsed(lease, now)
        ):
            # A commit point: its deadline passed before anything noticed (a stall), so the
            # message may be someone else's now. Lost (and logged by the keeper): nothing
            # to delete or release.
            outcome = Outcome.LEASE_LOST
        duration = now - started
        queue_metrics = self._queue_metrics.get(received.queue)
        if queue_metrics is None:
            queue_metrics = self._queue_metrics[received.queue] = _QueueMetrics(
                self._metrics, received.queue
            )
        queue_metrics.handled(outcome).inc()
        if outcome is not _SKIPPED:
            queue_metrics.seconds.observe(duration)
        if outcome is _SUCCEEDED:
            self._keeper.record_duration(duration)
        if self._threads.any_running and self._threads.busy((received.queue, received.message_id)):
            settlement = _FORGET  # its thread runs on: never handed back before it ends
        else:
            settlement = FIXED.get(outcome) or settlement_for(
                outcome,
                policy=spec.policy,
                receive_count=received.receive_count,
                message_id=received.message_id,
                retry_after_s=retry_after,
                min_release_s=self._limits.min_release_visibility_s,
                max_visibility_s=self._limits.max_visibility_s,
                cap_left_s=lease.invisible_left_s(now),
            )
        # Once a message, mostly filtered out: `bind()` is what a lazy proxy's `.debug` does
        # anyway, without its failed attribute lookup first; a filtering logger is asked
        # first, since building the call's keywords for its no-op cost more than the rest
        # of the event; and round(x * 1000) / 1000 is round(x, 3) at a seventh of the cost.
        log = self._log.bind()
        if log is not self._debug_log:  # a filtering logger's level is its class's: kept
            self._debug_log, self._debug_on = log, _debug_enabled(log)
        if self._debug_on:
            log.debug(
                "handler.done",
                outcome=outcome._value_,  # .value is a descriptor: four times the cost
                action=settlement.action._value_,
                duration_s=round(duration * 1000) / 1000,
            )
        if lease.state is _HELD:  # else the supervisor settled it, giving up on us
            self._settler.submit(lease, settlement)
        for observer in self._observers:
            try:
                observer(received, outcome, settlement)
            except Exception:  # an observer's bug must not strand the message or the worker
                self._log.exception("observer.failed", observer=repr(observer))


def _debug_enabled(log: Any) -> bool:
    """False if `log` is a structlog filtering logger that drops debug events (its
    `is_enabled_for`); True for any other logger, which decides for itself."""
    enabled = getattr(log, "is_enabled_for", None)
    return enabled is None or bool(enabled(logging.DEBUG))


async def _wait_for_thread(done: asyncio.Future[object], lease: Lease) -> object:
    """The thread's result, waited for through cancellations that cannot stop it.

    A shutdown's cancellation does not end the wait while the lease is held: the message
    stays leased (and renewed) until the thread ends or the supervisor gives up on it. A
    lost lease, the hard cap, or anyone else's cancellation ends the wait at once.
    """
    scope = lease.scope
    assert isinstance(scope, HandlerScope)
    scope.hold()
    try:
        while True:
            try:
                return await asyncio.shield(done)
            except asyncio.CancelledError:
                if (
                    not scope.take_back()
                    or lease.cancel_reason is not Outcome.SHUTDOWN
                    or lease.state is not LeaseState.HELD
                ):
                    raise
    finally:
        scope.resume()


def raised_by_handler(task: asyncio.Task[Any] | None) -> bool:
    """For a GeneratorExit caught in `task`'s coroutine: True if code it runs raised it (the
    task is running its step), False if the coroutine is being closed from outside (`close()`
    by the garbage collector: its task is not the one running, if any runs at all)."""
    return task is not None and asyncio.current_task(task.get_loop()) is task


async def fetch(spec: HandlerSpec, received: ReceivedMessage) -> ReceivedMessage:
    """`received` with its body fetched from S3 if it holds a pointer (and the worker has a
    store); an object that cannot be read is a decode failure."""
    if spec.large_payloads is None:
        return received
    try:
        return await spec.large_payloads.resolve(received)
    except MissingPayload as error:
        raise DecodeError(received.message_id, str(error)) from None


def decode(spec: HandlerSpec, received: ReceivedMessage) -> Any:
    try:
        return spec.decoder(received.body)
    except Exception as error:
        raise DecodeError(received.message_id, _reason(error)) from None


def _reason(error: Exception) -> str:
    # Only the error's kind and position: its text could quote the body.
    if isinstance(error, json.JSONDecodeError):
        return f"invalid JSON: {error.msg} (line {error.lineno}, column {error.colno})"
    if isinstance(error, PayloadError):  # its reason names fields, never values
        return error.reason
    return type(error).__name__
