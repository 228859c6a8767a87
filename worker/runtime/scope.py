"""Handler tasks and their cancellation.

`HandlerScope` cancels one handler's task, level-triggered as an anyio cancel scope is: once
cancelled, every later await of the handler raises CancelledError again, so a handler that
catches the cancellation and keeps awaiting (a rollback, a library's retry loop) is stopped
at its next await instead of running on. Only a handler that swallows every one of them, or
that never awaits, outlives it: the supervisor bounds its wait for those and abandons them.

The tasks themselves are in `worker.runtime.handler_tasks`.
"""

from __future__ import annotations

import asyncio

__all__ = ["HandlerScope"]

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

    def __init__(self, task: asyncio.Task[object] | None = None) -> None:
        """The scope of `task`, by default the current one."""
        task = task or asyncio.current_task()
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
        if self._cancels:
            return self.take_back()
        return self._task.cancelling() == 0  # nothing of ours to take back (most handlers)

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
        # Always a real `task.cancel()`: when the future the handler awaits is already done
        # (its answer came while the loop stood still: a stall, SIGSTOP), the task's next
        # step would resume the handler with that answer, past its lost lease, to its side
        # effect; cancel() makes that step raise CancelledError at the await instead. A
        # second cancel() before the task runs adds one request, which `take_back` undoes.
        task = self._task
        if task.done():
            return
        task.cancel()
        self._cancels += 1
        self._delivered += 1
