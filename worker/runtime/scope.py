"""Handler tasks and their cancellation.

`HandlerScope` cancels one handler's task, level-triggered as an anyio cancel scope is: once
cancelled, every later await of the handler raises CancelledError again, so a handler that
catches the cancellation and keeps awaiting (a rollback, a library's retry loop) is stopped
at its next await instead of running on. Only a handler that swallows every one of them, or
that never awaits, outlives it: the supervisor bounds its wait for those and abandons them.

`HandlerTasks` holds the asyncio.TaskGroup of the handler tasks in a task of its own, so
that the supervisor can stop waiting for a handler that will not end, which a task group
entered by the supervisor's own task could not (a group waits for all its tasks).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import anyio

__all__ = ["HandlerScope", "HandlerTasks"]

#: After a handler swallowed two cancellations, how often it is cancelled again: at once
#: would be a busy loop (it swallows, we cancel, ...), which also stalls a fast-forwarded
#: clock (looptime moves time only while the loop is idle).
_SWALLOWED_AGAIN_S = 0.1


class HandlerScope:
    """The cancellation of one handler task, told apart from anyone else's.

    asyncio.timeout()'s way of counting, without a timer: each cancellation of ours is a
    `task.cancel()`, taken back with `task.uncancel()` when the handler is done; if no
    request is left over, the CancelledError was ours alone and the handler's outcome is
    decided here. Re-delivery is a loop callback that runs only while a cancelled handler
    is still inside (an anyio CancelScope does the same at three times the cost per message,
    and this runs once per message): each loop iteration until the handler has swallowed a
    second cancellation, then every `_SWALLOWED_AGAIN_S`.
    """

    __slots__ = ("_cancels", "_delivered", "_handle", "_held", "_open", "_task", "requested")

    def __init__(self) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._task = task
        self._cancels = 0
        self._delivered = 0
        self._handle: asyncio.Handle | None = None
        self._held = False
        self._open = True
        #: True once the lease keeper or the supervisor asked for the cancellation.
        self.requested = False

    def cancel(self) -> None:
        if not self._open:
            return
        if self._held:
            self.requested = True
            self._poke()  # one CancelledError wakes the waiter, which decides what to do
        elif not self.requested:
            self.requested = True
            self._deliver()

    def hold(self) -> None:
        """Stop re-delivering while the handler waits for what cannot be interrupted (a
        thread); each `cancel()` in the meantime still wakes it once."""
        self._held = True

    def resume(self) -> None:
        """Level-triggered again: what the handler does next is cancelled if we asked."""
        self._held = False
        if self.requested and self._open and self._handle is None:
            self._deliver()

    def take_back(self) -> bool:
        """On a CancelledError: take back our cancellations; True if none is left, i.e. it
        was ours alone (or the handler's own) and not the task group's going down."""
        task = self._task
        while self._cancels:
            self._cancels -= 1
            task.uncancel()
        return task.cancelling() == 0

    def close(self) -> bool:
        """The handler is done: stop cancelling it; returns `take_back()`."""
        self._open = False
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        return self.take_back()

    def abandon(self) -> None:
        """Stop re-delivering for good: the supervisor no longer waits for this handler."""
        self._open = False
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _deliver(self) -> None:
        self._handle = None
        if not self._open or self._held:
            return
        # From the task itself (resuming after a thread), a cancellation would be left
        # pending past the handler's end: the next loop iteration delivers it instead.
        if self._task is not asyncio.current_task():
            self._poke()
        loop = self._task.get_loop()
        if self._delivered < 2:
            self._handle = loop.call_soon(self._deliver)
        else:
            self._handle = loop.call_later(_SWALLOWED_AGAIN_S, self._deliver)

    def _poke(self) -> None:
        # As anyio does: cancel unless a CancelledError is already on its way to the task
        # (its next step will raise one, or the future it waits on is already done).
        task = self._task
        if task.done() or task._must_cancel:  # type: ignore[attr-defined]
            return
        waiter = task._fut_waiter  # type: ignore[attr-defined]
        if waiter is None or not waiter.done():
            task.cancel()
            self._cancels += 1
            self._delivered += 1


class HandlerTasks:
    """The handler tasks' asyncio.TaskGroup, held open by a host task until `close()`.

    asyncio's task group, not anyio's: as structured, at a third of the cost per task
    (memory and CPU), which counts at 100,000 in flight. A task ending with an exception
    (a bug of the runtime: handlers' own exceptions are their messages' failures) ends the
    group, as in any task group, and `on_crash` hears of it.
    """

    def __init__(self, on_crash: Callable[[BaseException], None]) -> None:
        self._on_crash = on_crash
        self._closing = anyio.Event()
        self._ended = anyio.Event()
        self._host: asyncio.Task[None] | None = None

    @property
    def opened(self) -> bool:
        return self._host is not None

    @property
    def ended(self) -> bool:
        return self._ended.is_set()

    async def open(self) -> asyncio.TaskGroup:
        loop = asyncio.get_running_loop()
        opened: asyncio.Future[asyncio.TaskGroup] = loop.create_future()
        self._host = loop.create_task(self._hold(opened), name="lease-worker handlers")
        self._host.add_done_callback(self._host_done)
        return await opened

    def close(self) -> None:
        """No more tasks: the group ends once those it has end."""
        self._closing.set()

    def cancel(self) -> None:
        """Cancel every handler task (someone else's cancellation, to them)."""
        if self._host is not None:
            self._host.cancel()

    async def wait(self) -> None:
        if self._host is not None:
            await self._ended.wait()

    async def _hold(self, opened: asyncio.Future[asyncio.TaskGroup]) -> None:
        async with asyncio.TaskGroup() as group:
            if not opened.cancelled():
                opened.set_result(group)
            await self._closing.wait()

    def _host_done(self, host: asyncio.Task[None]) -> None:
        self._ended.set()
        if not host.cancelled() and (error := host.exception()) is not None:
            self._on_crash(error)
