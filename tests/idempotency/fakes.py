"""Fakes around real parts, for the guard's tests (no mocks).

- `FaultyStore`: a real store that counts its calls, and can be slow (per operation), down
  (every call raises `StoreError`) or frozen (every call hangs, as in a process that
  stopped).
- `LossyBackend`: the in-memory backend whose next deletes answer success and delete
  nothing (SQS does so for a stale handle), or that freezes (every call hangs).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import anyio

from tests.recording import RecordingBackend
from worker.idempotency import IdempotencyStore, Record, StoreError
from worker.types import (
    BatchResult,
    Deletion,
    ReceivedMessage,
    VisibilityChange,
)


class FaultyStore:
    def __init__(self, inner: IdempotencyStore) -> None:
        self.inner = inner
        self.calls: Counter[str] = Counter()
        self.down = False
        self.frozen = False
        #: Seconds each call of an operation takes before it reaches the store.
        self.slow: dict[str, float] = {}

    async def _enter(self, operation: str) -> None:
        self.calls[operation] += 1
        if operation in self.slow:
            await anyio.sleep(self.slow[operation])
        if self.frozen:
            await anyio.sleep_forever()
        if self.down:
            raise StoreError(operation, "down (test)")

    async def create(self, record: Record, *, now: float) -> Record | None:
        await self._enter("create")
        return await self.inner.create(record, now=now)

    async def replace(self, record: Record, *, token: str) -> bool:
        await self._enter("replace")
        return await self.inner.replace(record, token=token)

    async def remove(self, key: str, *, token: str) -> bool:
        await self._enter("remove")
        return await self.inner.remove(key, token=token)

    async def beat(self, owner: str, *, until: float) -> None:
        await self._enter("beat")
        await self.inner.beat(owner, until=until)

    async def beat_of(self, owner: str) -> float | None:
        await self._enter("beat_of")
        return await self.inner.beat_of(owner)


class LossyBackend(RecordingBackend):
    #: How many of the next deletes answer success without deleting.
    lose_deletes: int = 0
    frozen: bool = False

    async def _hang_if_frozen(self) -> None:
        if self.frozen:
            await anyio.sleep_forever()

    async def receive(
        self, queue: str, *, max_messages: int, wait_s: float, visibility_s: int | None = None
    ) -> Sequence[ReceivedMessage]:
        await self._hang_if_frozen()
        return await super().receive(
            queue, max_messages=max_messages, wait_s=wait_s, visibility_s=visibility_s
        )

    async def extend(self, queue: str, entries: Sequence[VisibilityChange]) -> BatchResult:
        await self._hang_if_frozen()
        return await super().extend(queue, entries)

    async def release(self, queue: str, entries: Sequence[VisibilityChange]) -> BatchResult:
        await self._hang_if_frozen()
        return await super().release(queue, entries)

    async def delete(self, queue: str, entries: Sequence[Deletion]) -> BatchResult:
        await self._hang_if_frozen()
        if self.lose_deletes > 0:
            self.lose_deletes -= 1
            self._record("delete", queue, len(entries))
            return BatchResult(succeeded=tuple(entry.entry_id for entry in entries))
        return await super().delete(queue, entries)
