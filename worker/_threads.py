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
from collections.abc import Callable
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
    def __init__(self, size: int) -> None:
        self._limiter = anyio.CapacityLimiter(size)

    async def run(self, func: Callable[..., T], *args: Any) -> T:
        async with self._limiter:
            loop = asyncio.get_running_loop()
            future: asyncio.Future[T] = loop.create_future()
            context = contextvars.copy_context()  # the handler's log context goes along

            def target() -> None:
                try:
                    result = context.run(func, *args)
                except BaseException as error:  # handed to the awaiting task as it is
                    loop.call_soon_threadsafe(_resolve, future, None, error)
                else:
                    loop.call_soon_threadsafe(_resolve, future, result, None)

            threading.Thread(target=target, name="lease-worker-sync", daemon=True).start()
            return await future
