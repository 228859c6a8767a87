"""`HandlerTasks`: the group of handler tasks, one per message (or per FIFO group or batch).

Structured as a task group is: after `close()`, `wait()` returns once every task has ended;
`cancel()` cancels them all; a task that ends with an exception (a bug of the runtime: what
a handler raises is its message's failure and never reaches here) cancels the others and is
reported to `on_crash` at once, so the supervisor starts its shutdown without waiting for
them. No task of the group's own waits for the handlers, so the supervisor can stop
waiting for one that will not end, which a task group entered by its own task could not.

Not asyncio.TaskGroup, for its cost per task: its done callback is a new bound method and a
copy of the caller's context for every task (128 bytes each, held for as long as the task
runs, at up to 100,000 in flight); here both are made once, and the tasks share one name.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Coroutine
from typing import Any

import anyio

__all__ = ["HandlerTasks"]

#: Every handler task's name: one string for all. Unnamed, a task gets a number of its own
#: (an int object: 32 bytes a message in flight, on CPython 3.11).
TASK_NAME = "lease-worker handler"


class HandlerTasks:
    """The handler tasks; `open()` it in the event loop, then `create_task()` as often as
    needed, then `close()` or `cancel()`, and `wait()`."""

    def __init__(self, on_crash: Callable[[BaseException], None]) -> None:
        self._on_crash = on_crash
        self._loop: asyncio.AbstractEventLoop | None = None
        # A dict, not a set: insertion order, so that cancelling them all goes in the order
        # they started whatever their ids (a run repeats exactly: the simulator).
        self._tasks: dict[asyncio.Task[Any], None] = {}
        self._closing = False
        self._stopping = False  # cancelled, or a task crashed: no new tasks
        self._ended = anyio.Event()
        self._over = False  # `_ended` is set: a plain bool, read once a task
        # Made once, used for every task: see the module's docstring.
        self._task_done = self._done
        self._callback_context = contextvars.Context()

    @property
    def opened(self) -> bool:
        return self._loop is not None

    @property
    def ended(self) -> bool:
        return self._ended.is_set()

    async def open(self) -> HandlerTasks:
        self._loop = asyncio.get_running_loop()
        return self

    def create_task(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Run `coro` as a task of the group; RuntimeError once it is stopping or ended."""
        if self._loop is None or self._stopping or self._over:
            coro.close()  # never awaited, on purpose: no warning about it
            state = "not open" if self._loop is None else "stopping or ended"
            raise RuntimeError(f"the handler task group is {state}")
        task = self._loop.create_task(coro, name=TASK_NAME)
        self._tasks[task] = None
        task.add_done_callback(self._task_done, context=self._callback_context)
        return task

    def close(self) -> None:
        """No more tasks: the group ends once those it has end."""
        self._closing = True
        self._end_if_empty()

    def cancel(self) -> None:
        """Cancel every handler task (someone else's cancellation, to them)."""
        if self._loop is None:
            return
        self._stopping = True
        for task in list(self._tasks):
            task.cancel()
        self._end_if_empty()

    async def wait(self) -> None:
        if self._loop is not None:
            await self._ended.wait()

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.pop(task, None)
        error = None if task.cancelled() else task.exception()
        if error is not None:
            if not self._stopping:
                self._stopping = True
                for other in list(self._tasks):
                    other.cancel()
            self._on_crash(error)
        if not self._tasks:  # else it cannot end yet: no call once a task
            self._end_if_empty()

    def _end_if_empty(self) -> None:
        if not self._tasks and (self._closing or self._stopping) and self._loop is not None:
            self._over = True
            self._ended.set()
