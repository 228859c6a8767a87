"""Synchronous handlers in daemon threads.

Python cannot stop a thread, so a synchronous handler cannot be interrupted: not by a lost
lease, not by the lease's hard cap, not by a shutdown. What the runtime does instead (see
`worker.runtime.handlers`): its message keeps its lease while the thread runs, and is never
handed back (released) before the thread has ended; at the end of a shutdown, a thread still
running is left to the process's exit and its message to its lease's lapse.

anyio's worker threads are not daemon threads: a thread still running at exit would keep the
process alive after everything was settled, until the orchestrator's SIGKILL. Here each call
gets its own daemon thread, started under a capacity limit, and keeps its place under the
limit until it returns, even after the runtime stopped waiting for it.

Threads are started through the event loop's `run_in_executor`, which is how a loop knows a
thread is working for it: looptime (tests on a fast-forwarded clock) then moves the clock at
the real pace while one runs, instead of racing to the next timer.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import threading
from collections.abc import Callable, Hashable
from typing import Any, ParamSpec, TypeVar

import anyio

__all__ = ["DaemonThreads"]

T = TypeVar("T")
P = ParamSpec("P")


class _OneThreadEach(concurrent.futures.Executor):
    """A `concurrent.futures.Executor` that runs each call in a new daemon thread."""

    def submit(
        self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs
    ) -> concurrent.futures.Future[T]:
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def target() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                result = fn(*args, **kwargs)
            except StopIteration as error:
                # An asyncio future refuses StopIteration (it would end a coroutine): wrap
                # it, as PEP 479 does for async handlers.
                failure = RuntimeError("synchronous handler raised StopIteration")
                failure.__cause__ = error
                future.set_exception(failure)
            except BaseException as error:  # SystemExit too: the handler's failure, as it is
                future.set_exception(error)
            else:
                future.set_result(result)

        threading.Thread(target=target, name="lease-worker-sync", daemon=True).start()
        return future


class DaemonThreads:
    """Daemon threads for synchronous handlers, at most `size` at once.

    `busy(key)` says whether a thread started for `key` (a message) still runs, and
    `wait_idle(key)` lets a later run of the same message wait for it: a message is never
    handled twice at once in this process.
    """

    def __init__(self, size: int) -> None:
        self._limiter = anyio.CapacityLimiter(size)
        self._executor = _OneThreadEach()
        self._running: dict[Hashable, asyncio.Future[Any]] = {}

    @property
    def any_running(self) -> bool:
        """True while any thread runs (read before building a key for `busy`)."""
        return bool(self._running)

    def busy(self, key: Hashable) -> bool:
        return key in self._running

    def running_keys(self) -> list[Hashable]:
        """The keys whose thread still runs (a copy)."""
        return list(self._running)

    async def wait_idle(self, key: Hashable) -> None:
        """Wait until no thread started for `key` is still running."""
        while (running := self._running.get(key)) is not None:
            await asyncio.wait((running,))

    async def start(self, key: Hashable, func: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """Start `func(*args)` in a thread once one is free; returns its future, which the
        caller must never cancel (await it through `asyncio.shield` or `asyncio.wait`)."""
        token = object()
        await self._limiter.acquire_on_behalf_of(token)
        context = contextvars.copy_context()  # the handler's log context goes along
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.run_in_executor(self._executor, context.run, func, *args)
        self._running[key] = future

        def done(_: asyncio.Future[T]) -> None:
            if not future.cancelled():
                future.exception()  # a thread nobody waits for any more: no warning at exit
            self._limiter.release_on_behalf_of(token)
            if self._running.get(key) is future:
                del self._running[key]

        future.add_done_callback(done)
        return future
