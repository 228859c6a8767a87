"""A backend wrapper for tests: records every call and can inject whole-call failures.

A fake around the real in-memory backend, not a mock: every call still reaches the engine
unless a failure was planned for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import anyio

from backends.memory import MemoryBackend
from worker.backend import Limits
from worker.types import (
    BatchResult,
    Deletion,
    OutgoingMessage,
    QueueInfo,
    QueueSpec,
    ReceivedMessage,
    VisibilityChange,
)


@dataclass(frozen=True, slots=True)
class Call:
    operation: str
    queue: str
    at: float
    entries: int
    visibility: tuple[int, ...] = ()


@dataclass
class RecordingBackend:
    inner: MemoryBackend = field(default_factory=MemoryBackend)
    calls: list[Call] = field(default_factory=list)
    #: operation -> errors to raise, one per call, before reaching the engine.
    failures: dict[str, list[Exception]] = field(default_factory=dict)

    @property
    def engine(self) -> object:
        return self.inner.engine

    @property
    def limits(self) -> Limits:
        return self.inner.limits

    def of(self, operation: str) -> list[Call]:
        return [call for call in self.calls if call.operation == operation]

    def _record(
        self, operation: str, queue: str, entries: int, visibility: tuple[int, ...] = ()
    ) -> None:
        self.calls.append(Call(operation, queue, anyio.current_time(), entries, visibility))
        planned = self.failures.get(operation)
        if planned:
            raise planned.pop(0)

    async def queue_info(self, queue: str) -> QueueInfo:
        return await self.inner.queue_info(queue)

    async def receive(
        self, queue: str, *, max_messages: int, wait_s: float, visibility_s: int | None = None
    ) -> Sequence[ReceivedMessage]:
        self._record("receive", queue, max_messages)
        return await self.inner.receive(
            queue, max_messages=max_messages, wait_s=wait_s, visibility_s=visibility_s
        )

    async def extend(self, queue: str, entries: Sequence[VisibilityChange]) -> BatchResult:
        self._record("extend", queue, len(entries), tuple(e.visibility_s for e in entries))
        return await self.inner.extend(queue, entries)

    async def release(self, queue: str, entries: Sequence[VisibilityChange]) -> BatchResult:
        self._record("release", queue, len(entries), tuple(e.visibility_s for e in entries))
        return await self.inner.release(queue, entries)

    async def delete(self, queue: str, entries: Sequence[Deletion]) -> BatchResult:
        self._record("delete", queue, len(entries))
        return await self.inner.delete(queue, entries)

    async def send(self, queue: str, messages: Sequence[OutgoingMessage]) -> BatchResult:
        return await self.inner.send(queue, messages)

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def create_queue(self, spec: QueueSpec) -> str:
        return await self.inner.create_queue(spec)

    async def delete_queue(self, queue: str) -> None:
        await self.inner.delete_queue(queue)

    async def purge(self, queue: str) -> None:
        await self.inner.purge(queue)
