"""`MemoryStore`: idempotency records in this process's memory.

For tests and for a single worker process (several handlers, one event loop): it guards
against redeliveries to this process only. Each write drops the oldest records once they
are well past expiry (completed: the TTL; in progress: `stale_at`), so memory stays bounded by
the keys seen within about one TTL.
"""

from __future__ import annotations

import itertools

from worker.idempotency.record import GC_SLACK_S, Record, RecordState

__all__ = ["MemoryStore"]


class MemoryStore:
    """An `IdempotencyStore` in a dict. Each operation is one step of the event loop."""

    def __init__(self) -> None:
        self._records: dict[str, Record] = {}
        self._beats: dict[str, float] = {}

    def __len__(self) -> int:
        return len(self._records)

    def get(self, key: str) -> Record | None:
        """Test hook: `key`'s record as stored."""
        return self._records.get(key)

    async def create(self, record: Record, *, now: float) -> Record | None:
        self._prune(now)
        current = self._records.get(record.key)
        if current is not None and not _overwritable(current, now):
            return current
        self._records[record.key] = record
        return None

    async def replace(self, record: Record, *, token: str) -> bool:
        current = self._records.get(record.key)
        if current is None or current.token != token:
            return False
        self._records[record.key] = record
        return True

    async def remove(self, key: str, *, token: str) -> bool:
        current = self._records.get(key)
        if current is None or current.token != token:
            return False
        del self._records[key]
        return True

    async def beat(self, owner: str, *, until: float) -> None:
        self._beats[owner] = until

    async def beat_of(self, owner: str) -> float | None:
        return self._beats.get(owner)

    def _prune(self, now: float) -> None:
        # Oldest first (a dict keeps insertion order); two per write keeps pace with writes.
        for key in list(itertools.islice(self._records, 2)):
            record = self._records[key]
            if max(record.expires_at, record.stale_at) + GC_SLACK_S <= now:
                del self._records[key]


def _overwritable(record: Record, now: float) -> bool:
    # An in-progress claim is judged by the caller (it needs the owner's heartbeat).
    return record.state is RecordState.COMPLETED and record.expires_at <= now
