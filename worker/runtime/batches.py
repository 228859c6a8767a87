"""Batch handlers: messages gathered per queue, handed over as one list, settled one by one.

Rules:
- A batch starts with the first message that arrives for its queue and is handed over when
  it holds `max_size` messages or `max_wait_s` after that first one, whichever is first.
- Every lease of a batch stays tracked by the lease keeper (renewed like any other) until
  its own message is settled. The batch's cancel scope stands in for a handler scope on
  each lease: a shutdown or the hard cap of one lease cancels the batch (its messages are
  released); a *lost* lease cancels nothing: the handler can see `message.lease.lost`, and
  that message is forgotten, never deleted, whatever the handler answers.
- The handler returns the ids that failed (or raises `BatchFailure(ids)`); those go through
  the error policy, the others are deleted (the settler sends them together). Any other
  error fails the whole batch, a BaseException too (GeneratorExit included: see
  `worker.runtime.handlers`); `Retry` releases it whole after `after_s`; `Discard` deletes
  it whole. A body that cannot be decoded fails its message alone, before the handler runs.
- A `LeaseLostError` (a message's `lease.ensure_held()`) raised while a lease of the batch
  is in fact gone is a fence that held (`handler.fenced` once for the batch, see
  `worker.runtime.handlers`): the messages whose lease is gone are lease-lost, the others
  fail with the batch. With every lease still held it fails the batch like any error.
- FIFO: after the first message of a group that does not succeed, the later messages of that
  group in the batch are released too (as SKIPPED), as Lambda's partial batch response
  requires; batches of one FIFO queue run one at a time, so a group stays in order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import structlog

from worker.core.lease import Lease
from worker.core.settlement import Outcome
from worker.envelope.tracing import batch_span, set_outcome
from worker.errors import BatchFailure, DecodeError, Discard, LeaseLostError, Retry
from worker.message import Message, lease_of
from worker.registry import HandlerSpec
from worker.runtime.handler_tasks import HandlerTasks
from worker.runtime.handlers import Executor, decode, fetch, raised_by_handler
from worker.types import ReceivedMessage

__all__ = ["Batches"]

_Entry = tuple[ReceivedMessage, Lease]
_OK = (Outcome.SUCCEEDED, Outcome.DISCARDED, Outcome.DUPLICATE)


@dataclass
class _Batch:
    spec: HandlerSpec
    entries: list[_Entry] = field(default_factory=list)
    full: anyio.Event = field(default_factory=anyio.Event)
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)


@dataclass(frozen=True, slots=True)
class _Member:
    """What a batch lease's `scope` is: a lost lease leaves the batch running."""

    batch: _Batch
    lease: Lease

    def cancel(self) -> None:
        if self.lease.cancel_reason is not Outcome.LEASE_LOST:
            self.batch.scope.cancel()


class Batches:
    def __init__(
        self, *, executor: Executor, is_fifo: Callable[[str], bool], logger: Any = None
    ) -> None:
        self._executor = executor
        self._is_fifo = is_fifo
        self._log = logger or structlog.get_logger("lease_worker.batch")
        self._open: dict[str, _Batch] = {}
        self._fifo_locks: dict[str, anyio.Lock] = {}

    def add(
        self, spec: HandlerSpec, received: ReceivedMessage, lease: Lease, tasks: HandlerTasks
    ) -> None:
        assert spec.batch is not None
        batch = self._open.get(spec.queue)
        if batch is None:
            batch = _Batch(spec)
            # Open with its task or not at all: a batch the stopping task group refuses
            # (RuntimeError, this message released by the caller) would take the queue's
            # later messages with no task to hand them over.
            tasks.create_task(self._run(batch))
            self._open[spec.queue] = batch
        batch.entries.append((received, lease))
        lease.scope = _Member(batch, lease)
        if len(batch.entries) >= spec.batch.max_size:
            del self._open[spec.queue]  # the next message starts the next batch
            batch.full.set()

    async def _run(self, batch: _Batch) -> None:
        spec = batch.spec
        assert spec.batch is not None
        outcomes: dict[str, tuple[Outcome, float]] = {}
        started = self._executor.clock.now()
        try:
            with batch.scope:
                with anyio.move_on_after(spec.batch.max_wait_s):
                    await batch.full.wait()
                if self._open.get(spec.queue) is batch:
                    del self._open[spec.queue]
                lock = self._fifo_locks.setdefault(spec.queue, anyio.Lock())
                if self._is_fifo(spec.queue):
                    async with lock:
                        outcomes = await self._call(spec, batch.entries)
                else:
                    outcomes = await self._call(spec, batch.entries)
        finally:
            self._settle(spec, batch.entries, outcomes, started)

    async def _call(
        self, spec: HandlerSpec, entries: Sequence[_Entry]
    ) -> dict[str, tuple[Outcome, float]]:
        outcomes: dict[str, tuple[Outcome, float]] = {}
        messages: list[Message] = []
        ready: list[ReceivedMessage] = []
        for received, lease in entries:
            if lease.cancel_reason is not None:
                continue  # decided in _settle, from the lease
            try:
                body = decode(spec, await fetch(spec, received))
                messages.append(Message(received, body, lease))
                ready.append(received)
            except DecodeError as error:
                self._log.error(
                    "handler.undecodable_body",
                    message_id=received.message_id,
                    reason=error.reason,
                    receive_count=received.receive_count,
                )
                outcomes[received.message_id] = Outcome.FAILED, 0.0
        if not messages:
            return outcomes
        with batch_span(spec.queue, ready) as span:
            outcomes.update(await self._handle(spec, messages))
            failed = sum(outcome is not Outcome.SUCCEEDED for outcome, _ in outcomes.values())
            set_outcome(span, "failed" if failed else "succeeded")
            if span is not None:
                span.set_attribute("lease_worker.failed_messages", failed)
        return outcomes

    async def _handle(
        self, spec: HandlerSpec, messages: list[Message]
    ) -> dict[str, tuple[Outcome, float]]:
        ids = [m.message_id for m in messages]
        failed: Iterable[str] = ()
        func: Callable[[list[Message]], Awaitable[object]] = spec.func  # type: ignore[assignment]
        task = asyncio.current_task()
        try:
            returned = await func(list(messages))
            failed = _ids(returned)
        except BatchFailure as signal:
            failed = signal.failed
        except Retry as signal:
            return dict.fromkeys(ids, (Outcome.RETRY, signal.after_s))
        except Discard:
            return dict.fromkeys(ids, (Outcome.DISCARDED, 0.0))
        except asyncio.CancelledError:
            raise
        except BaseException as error:  # SystemExit, KeyboardInterrupt, GeneratorExit, ...
            if isinstance(error, GeneratorExit) and not raised_by_handler(task):
                raise  # this coroutine is being closed: it never runs again
            fenced = isinstance(error, LeaseLostError) and self._executor.fenced(
                spec, [lease_of(message) for message in messages], batch=True
            )
            if not fenced:
                self._log.exception("handler.failed", handler=spec.name, messages=len(ids))
            # Fenced, the messages whose lease is gone are lease-lost (`_settle`); the others
            # fail with the batch, which gave up on them.
            return dict.fromkeys(ids, (Outcome.FAILED, 0.0))
        failed = set(failed)
        unknown = failed - set(ids)
        if unknown:
            self._log.warning("batch.unknown_failed_ids", handler=spec.name, ids=len(unknown))
        return {
            message_id: ((Outcome.FAILED if message_id in failed else Outcome.SUCCEEDED), 0.0)
            for message_id in ids
        }

    def _settle(
        self,
        spec: HandlerSpec,
        entries: Sequence[_Entry],
        outcomes: dict[str, tuple[Outcome, float]],
        started: float,
    ) -> None:
        stopped: set[str] = set()  # FIFO groups with a message that did not succeed
        fifo = self._is_fifo(spec.queue)
        for received, lease in entries:
            lease.scope = None
            outcome, after = outcomes.get(received.message_id, (Outcome.SHUTDOWN, 0.0))
            if lease.lost:
                outcome, after = Outcome.LEASE_LOST, 0.0
            elif lease.cancel_reason is not None and received.message_id not in outcomes:
                outcome = lease.cancel_reason
            group = received.group_id if fifo else None
            if group is not None and group in stopped and outcome in _OK:
                outcome, after = Outcome.SKIPPED, 0.0
            if group is not None and outcome not in _OK:
                stopped.add(group)
            self._executor.finish(spec, received, lease, outcome, after, started)


def _ids(returned: object) -> Iterable[str]:
    if returned is None:
        return ()
    if isinstance(returned, str) or not isinstance(returned, Iterable):
        raise TypeError(
            f"a batch handler returns the failed message ids (a set of str) or None, "
            f"got a {type(returned).__name__}"
        )
    return returned
