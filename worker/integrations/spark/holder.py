"""The streaming source's leases, held in Spark's long-lived source runner process.

Spark calls a stream reader's control methods (`initialOffset`, `latestOffset`,
`partitions`, `commit`) one at a time, on one object, in one Python process it keeps for the
query's life; `read()` runs elsewhere, on a pickled copy. So the leases live here: an event
loop in a thread of its own (anyio's blocking portal) that the control methods call into,
with one task that keeps renewing whatever is due between and during those calls.

Rules:
- A deadline is counted from the moment the receive was sent (a safe estimate of when the
  service handed the message out), renewed `margin_s` before it to `extension_s`, in
  batches of the backend's `extend_batch`; a new handle from a renewal is adopted.
- A renewal refused for a handle (a sender's fault) loses the lease: the message is dropped
  and comes back from the queue; a transient failure is retried on the next tick.
- A delete or release never shares the wire with a renewal of the same handle: its messages
  are out of the ledger (no later renewal round takes them) and it waits for the round in
  flight, if any, to end, so it uses the newest handle. Renewals wait for no delete.
- Receiving runs ahead: while Spark runs a batch, the next one is received (short polls,
  `concurrency` calls at once) until `max_batch` messages are pending or the queue answers
  short; they are held and renewed like the rest. `latestOffset` waits for that to end,
  then gives the pending messages an offset; only with nothing pending does it long-poll
  (`wait_s`). So a batch is `max_batch` messages unless the queue ran short. Once a receive
  finds the queue short, nothing is received ahead: an idle queue costs one long poll per
  `latestOffset`, as without receiving ahead.
- On commit, the batch's messages are deleted in the background (`concurrency` calls at
  once, each retried three times; one still failing is logged and will be delivered again:
  at least once) while Spark plans and runs the next batch; a commit first waits for the
  previous commit's deletes, so at most one batch waits for its deletes.
- Going away (`close`, or SIGTERM, which is how Spark ends the runner when a query stops or
  fails) lets the receive ahead end, finishes the committed batch's deletes, then releases
  everything held, with the backend's shortest visibility, bounded by
  `release_timeout_s`. A SIGKILL releases nothing: those messages come back when their last
  renewal runs out, at most `extension_s` later.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Future
from contextlib import ExitStack
from dataclasses import dataclass
from types import FrameType
from typing import Any

import anyio
import structlog
from anyio.from_thread import BlockingPortal, start_blocking_portal

from worker.backend import Backend
from worker.errors import BackendError
from worker.integrations.spark.ledger import Held, Ledger, Offset
from worker.types import Deletion, ReceivedMessage, VisibilityChange

__all__ = ["BackendConnect", "HolderSettings", "LeaseHolder"]

#: A picklable zero-argument async callable that opens a backend. It runs in Spark's Python
#: processes, not the caller's: a `functools.partial` of a module-level function, say.
BackendConnect = Callable[[], Awaitable[Backend]]

log = structlog.get_logger("worker.integrations.spark")

_ATTEMPTS = 3
#: Longest pause of the renewal task between looks at the ledger.
_TICK_S = 1.0


@dataclass(frozen=True, slots=True, kw_only=True)
class HolderSettings:
    queue: str
    max_batch: int
    visibility_s: int
    extension_s: int
    margin_s: float
    wait_s: float
    #: SQS calls at once for receiving ahead and for deleting a committed batch.
    concurrency: int = 4
    release_timeout_s: float = 5.0


class LeaseHolder:
    """The leases of one stream reader, kept alive by a task on a loop in a thread."""

    def __init__(self, connect: BackendConnect, settings: HolderSettings, run: str) -> None:
        self.settings = settings
        self.ledger = Ledger(
            run=run,
            visibility_s=settings.visibility_s,
            extension_s=settings.extension_s,
            margin_s=settings.margin_s,
        )
        self._connect = connect
        self._stack = ExitStack()
        self._portal: BlockingPortal | None = None
        self._backend: Backend | None = None
        #: Set while no renewal round runs.
        self._renewed: anyio.Event | None = None
        self._keeper: Future[None] | None = None
        self._ahead: Future[None] | None = None
        self._kick: anyio.Event | None = None
        #: Set while no receive ahead runs.
        self._idle: anyio.Event | None = None
        #: The committed batch's messages to delete in the background, and its deletes'
        #: end (set while none run).
        self._to_delete: Sequence[Held] = []
        self._delete_kick: anyio.Event | None = None
        self._deleting: anyio.Event | None = None
        self._deleter: Future[None] | None = None
        #: The last receive found the queue short of messages.
        self._drained = False
        #: True from the start of `close`: a SIGTERM then waits for it to finish.
        self.closing = False
        self.terminate_after_close = False

    def start(self) -> None:
        if self._portal is not None:
            return
        self._portal = self._stack.enter_context(start_blocking_portal(name="leased-queue"))
        self._portal.call(self._setup)
        self._backend = self._portal.call(self._connect)
        self._keeper = self._portal.start_task_soon(self._keep, name="leased-queue-keeper")
        self._ahead = self._portal.start_task_soon(self._receive_ahead, name="leased-queue-ahead")
        self._deleter = self._portal.start_task_soon(
            self._delete_committed, name="leased-queue-del"
        )
        _release_on_sigterm(self)

    def call(self, function: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        self.start()
        assert self._portal is not None
        return self._portal.call(function, *args)

    def close(self) -> None:
        """Release everything held and stop the loop (idempotent)."""
        if self._portal is None or self.closing:
            return
        self.closing = True
        try:
            self._portal.call(self._release_everything)
        finally:
            portal, self._portal = self._portal, None
            if self._backend is not None:
                portal.call(self._backend.aclose)
            for task in (self._keeper, self._ahead, self._deleter):
                if task is not None:
                    task.cancel()
            self._stack.close()
            if self.terminate_after_close:  # a SIGTERM came during the release
                _die_of_sigterm()

    # -- on the holder's loop ---------------------------------------------------------------

    async def _setup(self) -> None:
        self._renewed, self._kick, self._idle = anyio.Event(), anyio.Event(), anyio.Event()
        self._delete_kick, self._deleting = anyio.Event(), anyio.Event()
        for event in (self._renewed, self._idle, self._deleting):
            event.set()

    async def latest(self, start: Offset | None, most: int | None = None) -> Offset:
        most = min(most or self.settings.max_batch, self.settings.max_batch)
        await self._received_ahead()
        offset = self.ledger.latest([], time.monotonic(), start, most)
        if not self._drained:  # an idle queue is long-polled by latestOffset alone
            self._start_ahead()
        return offset

    async def batch(self, start: Offset, end: Offset) -> list[ReceivedMessage]:
        messages = self.ledger.batch(start, end)
        if messages is None:  # a replay: served with what is pending, or received now
            await self._received_ahead()
            self.ledger.serve_replay(end, [], time.monotonic())
            messages = self.ledger.batch(start, end) or []
        return messages

    async def commit(self, end: Offset) -> None:
        await self._deleted()
        done = self.ledger.committed(end)
        if done:
            assert self._deleting is not None and self._delete_kick is not None
            self._to_delete, self._deleting = done, anyio.Event()
            self._delete_kick.set()

    async def _delete_committed(self) -> None:
        while True:
            assert self._delete_kick is not None and self._deleting is not None
            await self._delete_kick.wait()
            self._delete_kick = anyio.Event()
            done, self._to_delete = self._to_delete, []
            try:
                await self._settle(done, delete=True)
            except Exception as error:  # delivered again (at least once); the task lives on
                log.warning("source.delete_failed", error=type(error).__name__)
            finally:
                self._deleting.set()

    async def _deleted(self) -> None:
        assert self._deleting is not None
        await self._deleting.wait()

    async def _received_ahead(self) -> None:
        """Wait for the receive ahead to end; with nothing pending, long-poll for some."""
        assert self._idle is not None
        await self._idle.wait()
        if not self.ledger.pending_count():  # one long poll, as an idle queue gets
            await self._receive(self.settings.wait_s, calls=1)

    def _start_ahead(self) -> None:
        assert self._kick is not None and self._idle is not None
        self._idle = anyio.Event()
        self._kick.set()

    async def _receive_ahead(self) -> None:
        while True:
            assert self._kick is not None and self._idle is not None
            await self._kick.wait()
            self._kick = anyio.Event()
            try:
                await self._receive(0)
            except Exception as error:  # latestOffset receives again; the task lives on
                log.warning("source.receive_failed", error=type(error).__name__)
            finally:
                self._idle.set()

    async def _receive(self, wait_s: float, calls: int | None = None) -> None:
        """Receive until `max_batch` messages are pending or the queue answers short, `calls`
        (`concurrency`) calls at once; the first calls wait up to `wait_s` for messages."""
        backend = self._open()
        size = backend.limits.receive_batch
        asked = 0
        short = False

        async def receiver(wait_s: float) -> None:
            nonlocal asked, short
            while not short and not self.closing:
                wanted = self.settings.max_batch - self.ledger.pending_count() - asked
                if wanted <= 0:
                    return
                count = min(size, wanted)
                asked += count
                sent = time.monotonic()
                try:
                    answer = await backend.receive(
                        self.settings.queue,
                        max_messages=count,
                        wait_s=wait_s,
                        visibility_s=self.settings.visibility_s,
                    )
                finally:
                    asked -= count
                self.ledger.take(answer, sent)
                short = short or len(answer) < count
                wait_s = 0  # more is there: take it without waiting

        async with anyio.create_task_group() as group:
            for _ in range(calls or self.settings.concurrency):
                group.start_soon(receiver, wait_s)
        self._drained = short

    async def _keep(self) -> None:
        while True:
            due = self.ledger.due(time.monotonic())
            if due:
                self._renewed = round_over = anyio.Event()
                try:
                    await self._renew(due)
                except Exception as error:  # retried on the next tick; the task lives on
                    log.warning("source.renew_failed", error=type(error).__name__)
                finally:
                    round_over.set()
            upcoming = self.ledger.next_due()
            pause = _TICK_S if upcoming is None else upcoming - time.monotonic()
            await anyio.sleep(min(max(pause, 0.05), _TICK_S))

    async def _renew(self, due: Sequence[Held]) -> None:
        backend = self._open()
        for chunk in _chunks(due, backend.limits.extend_batch):
            entries = [
                VisibilityChange(str(i), held.handle, self.settings.extension_s)
                for i, held in enumerate(chunk)
            ]
            sent = time.monotonic()
            result = await backend.extend(self.settings.queue, entries)
            for i, held in enumerate(chunk):
                failure = result.failure(str(i))
                if failure is None:
                    handle = result.new_handles.get(str(i), held.handle)
                    self.ledger.renewed(held, handle, sent)
                elif failure.sender_fault:
                    self.ledger.lost([held.message.message_id])
                    log.warning("source.lease_lost", message_id=held.message.message_id)

    async def _settle(self, entries: Sequence[Held], *, delete: bool) -> None:
        backend = self._open()
        assert self._renewed is not None
        await self._renewed.wait()  # `entries` are out of the ledger: no later round has them
        size = backend.limits.delete_batch if delete else backend.limits.release_batch
        chunks = iter(_chunks(entries, size))

        async def settler() -> None:
            for chunk in chunks:  # shared: each settler takes the next chunk
                left = list(chunk)
                for attempt in range(_ATTEMPTS):
                    left = await self._settle_once(backend, left, delete=delete)
                    if not left:
                        break
                    await anyio.sleep(0.1 * 2**attempt)
                for held in left:
                    log.warning("source.settle_failed", message_id=held.message.message_id)

        async with anyio.create_task_group() as group:
            for _ in range(self.settings.concurrency):
                group.start_soon(settler)

    async def _settle_once(
        self, backend: Backend, chunk: list[Held], *, delete: bool
    ) -> list[Held]:
        queue = self.settings.queue
        try:
            if delete:
                result = await backend.delete(
                    queue, [Deletion(str(i), held.handle) for i, held in enumerate(chunk)]
                )
            else:
                visibility = backend.limits.min_release_visibility_s
                changes = [
                    VisibilityChange(str(i), h.handle, visibility) for i, h in enumerate(chunk)
                ]
                result = await backend.release(queue, changes)
        except BackendError:
            return chunk
        return [held for i, held in enumerate(chunk) if result.failure(str(i)) is not None]

    async def _release_everything(self) -> None:
        with anyio.move_on_after(self.settings.release_timeout_s):
            assert self._idle is not None
            await self._idle.wait()  # `closing` ends the receive ahead after its calls
            await self._deleted()
            await self._settle(self.ledger.release_all(), delete=False)

    def _open(self) -> Backend:
        assert self._backend is not None
        return self._backend


def _chunks(items: Sequence[Held], size: int) -> list[Sequence[Held]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def _release_on_sigterm(holder: LeaseHolder) -> None:
    """Spark ends the runner with SIGTERM when the query stops or fails, without calling the
    reader's `stop()` reliably: release what is held, then die of the signal as before.
    Only in the main thread, and only where nobody else handles SIGTERM."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        # The signal may interrupt this same thread inside `close` (the reader's `stop`,
        # when Spark closed the connection first): then let that release finish.
        # Spark may send it twice: a second one must not cut the release short.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if holder.closing:
            holder.terminate_after_close = True
            return
        try:
            holder.close()
        finally:
            _die_of_sigterm()

    signal.signal(signal.SIGTERM, on_sigterm)


def _die_of_sigterm() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)
