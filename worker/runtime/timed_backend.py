"""`TimedBackend`: the backend as the runtime's own components see it, each call timed into
`api_call_duration_seconds{queue, operation, wait}` (failed and abandoned calls included;
`wait` is `long_poll` for a receive allowed to wait, whose time is mostly that wait, and
`none` for every other call, whose time is the service's latency).

The application's own code (start-up hooks, background tasks) gets the backend itself
through its `WorkerContext`, with whatever admin methods that backend has.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from worker.backend import Backend, Limits
from worker.runtime.metrics import Metrics
from worker.types import (
    BatchResult,
    Deletion,
    OutgoingMessage,
    QueueInfo,
    ReceivedMessage,
    VisibilityChange,
)

__all__ = ["TimedBackend"]

T = TypeVar("T")


class TimedBackend:
    def __init__(self, backend: Backend, metrics: Metrics) -> None:
        self._backend = backend
        self._seconds = metrics.api_seconds

    @property
    def limits(self) -> Limits:
        return self._backend.limits

    async def _timed(
        self, queue: str, operation: str, call: Callable[[], Awaitable[T]], wait: str = "none"
    ) -> T:
        # Wall time on purpose: the latency a call took, not the loop's (possibly virtual) time.
        started = time.perf_counter()
        try:
            return await call()
        finally:
            self._seconds.labels(queue, operation, wait).observe(time.perf_counter() - started)

    async def queue_info(self, queue: str) -> QueueInfo:
        return await self._timed(queue, "queue_info", lambda: self._backend.queue_info(queue))

    async def receive(
        self, queue: str, *, max_messages: int, wait_s: float, visibility_s: int | None = None
    ) -> Sequence[ReceivedMessage]:
        return await self._timed(
            queue,
            "receive",
            lambda: self._backend.receive(
                queue, max_messages=max_messages, wait_s=wait_s, visibility_s=visibility_s
            ),
            "long_poll" if wait_s > 0 else "none",
        )

    async def extend(self, queue: str, entries: Sequence[VisibilityChange]) -> BatchResult:
        return await self._timed(queue, "extend", lambda: self._backend.extend(queue, entries))

    async def release(self, queue: str, entries: Sequence[VisibilityChange]) -> BatchResult:
        return await self._timed(queue, "release", lambda: self._backend.release(queue, entries))

    async def delete(self, queue: str, entries: Sequence[Deletion]) -> BatchResult:
        return await self._timed(queue, "delete", lambda: self._backend.delete(queue, entries))

    async def send(self, queue: str, messages: Sequence[OutgoingMessage]) -> BatchResult:
        return await self._timed(queue, "send", lambda: self._backend.send(queue, messages))

    async def aclose(self) -> None:
        await self._backend.aclose()
