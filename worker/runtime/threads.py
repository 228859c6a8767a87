"""Synchronous handlers in daemon threads.

anyio's worker threads are not daemon threads: a synchronous handler abandoned at shutdown
(Python cannot stop a thread) would keep the process alive after everything was released,
until the orchestrator's SIGKILL. Here each call gets its own daemon thread, started under
a capacity limit; a cancelled call stops waiting at once and its thread runs on, detached,
until it returns or the process exits.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

import anyio

__all__ = ["DaemonThreads"]

T = TypeVar("T")


def _resolve(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.cancelled():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


class DaemonThreads:
    """Daemon threads for synchronous handlers, at most `size` at once.

    A thread keeps its place under the limit until it returns, even after the task that
    awaited it was cancelled, and `wait_idle(key)` lets a later run of the same message
    wait for it: a message is never handled twice at once in this process.
    """

    def __init__(self, size: int) -> None:
        self._limiter = anyio.CapacityLimiter(size)
        self._running: dict[Hashable, asyncio.Event] = {}

    async def wait_idle(self, key: Hashable) -> None:
        """Wait until no thread started for `key` (a message) is still running."""
        while (finished := self._running.get(key)) is not None:
            await finished.wait()

    async def run(self, key: Hashable, func: Callable[..., T], *args: Any) -> T:
        token = object()
        await self._limiter.acquire_on_behalf_of(token)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        finished = self._running[key] = asyncio.Event()
        context = contextvars.copy_context()  # the handler's log context goes along

        def done(result: Any, error: BaseException | None) -> None:  # on the loop's thread
            _resolve(future, result, error)
            self._limiter.release_on_behalf_of(token)
            finished.set()
            if self._running.get(key) is finished:
                del self._running[key]

        def target() -> None:
            try:
                result = context.run(func, *args)
            except StopIteration as error:
                # A future refuses StopIteration (it would end a coroutine): wrap it, as
                # PEP 479 does for async handlers.
                failure = RuntimeError("synchronous handler raised StopIteration")
                failure.__cause__ = error
                loop.call_soon_threadsafe(done, None, failure)
            except BaseException as error:  # handed to the awaiting task as it is
                loop.call_soon_threadsafe(done, None, error)
            else:
                loop.call_soon_threadsafe(done, result, None)

        threading.Thread(target=target, name="lease-worker-sync", daemon=True).start()
        return await future
