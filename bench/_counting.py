"""A memory backend that counts calls per operation and stamps renewal calls with CPU time."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence

import anyio

from backends.memory import MemoryBackend
from worker.types import BatchResult, Deletion, ReceivedMessage, VisibilityChange


class CountingBackend(MemoryBackend):
    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter[str] = Counter()
        #: (loop time, CPU seconds, entries) for every extend call.
        self.extends: list[tuple[float, float, int]] = []

    async def receive(
        self, queue: str, *, max_messages: int, wait_s: float, visibility_s: int | None = None
    ) -> Sequence[ReceivedMessage]:
        self.calls["receive"] += 1
        return await super().receive(
            queue, max_messages=max_messages, wait_s=wait_s, visibility_s=visibility_s
        )

    async def extend(self, queue: str, entries: Sequence[VisibilityChange]) -> BatchResult:
        self.calls["extend"] += 1
        self.extends.append((anyio.current_time(), time.process_time(), len(entries)))
        return await super().extend(queue, entries)

    async def release(self, queue: str, entries: Sequence[VisibilityChange]) -> BatchResult:
        self.calls["release"] += 1
        return await super().release(queue, entries)

    async def delete(self, queue: str, entries: Sequence[Deletion]) -> BatchResult:
        self.calls["delete"] += 1
        return await super().delete(queue, entries)

    def rounds(self, gap_s: float = 1.0) -> list[list[tuple[float, float, int]]]:
        """Extend calls grouped into renewal rounds (calls less than `gap_s` apart)."""
        grouped: list[list[tuple[float, float, int]]] = []
        for call in self.extends:
            if grouped and call[0] - grouped[-1][-1][0] < gap_s:
                grouped[-1].append(call)
            else:
                grouped.append([call])
        return grouped
