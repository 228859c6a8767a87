"""The lease heap: when each lease is next due, and which leases go out together.

Rules:
- One heap per queue (a visibility batch call names one queue). An entry is
  (due_at, sequence, key, queue); the sequence keeps equal times in insertion order (and,
  being unique, keeps the comparison from reaching the key).
- Re-scheduling or removing a key does not touch the heap: the key's current entry (the
  same tuple as in the heap: one object per scheduled lease) is kept in `_current`, and heap
  entries that are no longer current are dropped when they surface (lazy deletion), so
  every operation is O(log n).
- Stale entries are pruned (as trio's `Deadlines` does): once they outnumber the live ones
  (and a floor), the heaps are rebuilt from `_current`, so a finished lease does not stay in
  memory until its due time, and memory is O(live leases), amortised O(1) per operation.
- A batch is taken only when its first lease is due; it is filled, in due order, with leases
  of the same queue due within `window` seconds after `now`, up to `limit`. Leases renewed
  together get the same new deadline and stay together: after the first round, N aligned
  leases cost ceil(N / limit) calls per round.

Pure: no I/O, no clock; the caller passes `now`.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Hashable, Iterator
from typing import Generic, TypeAlias, TypeVar

__all__ = ["LeaseSchedule"]

K = TypeVar("K", bound=Hashable)

#: (due_at, sequence, key, queue)
_Entry: TypeAlias = tuple[float, int, K, str]

#: Below this many stale entries, pruning would cost more than it saves.
_PRUNE_FLOOR = 64


class LeaseSchedule(Generic[K]):
    def __init__(self) -> None:
        self._heaps: dict[str, list[_Entry[K]]] = {}
        self._current: dict[K, _Entry[K]] = {}
        self._sequence = itertools.count()
        self._entries = 0  # in all heaps, live and stale

    @property
    def heap_entries(self) -> int:
        """Entries held in the heaps, stale ones included (for tests)."""
        return self._entries

    def __len__(self) -> int:
        return len(self._current)

    def __contains__(self, key: K) -> bool:
        return key in self._current

    def __iter__(self) -> Iterator[K]:
        """The scheduled keys, in no particular order."""
        return iter(self._current)

    def due_at(self, key: K) -> float | None:
        entry = self._current.get(key)
        return None if entry is None else entry[0]

    def set(self, key: K, queue: str, due_at: float) -> None:
        """Schedule `key` (again) at `due_at`, replacing any earlier schedule."""
        entry = self._current[key] = (due_at, next(self._sequence), key, queue)
        heapq.heappush(self._heaps.setdefault(queue, []), entry)
        self._entries += 1
        if self._entries > 2 * len(self._current) + _PRUNE_FLOOR:
            self._prune()

    def discard(self, key: K) -> None:
        if (
            self._current.pop(key, None) is not None
            and self._entries > 2 * len(self._current) + _PRUNE_FLOOR
        ):
            self._prune()

    def _prune(self) -> None:
        heaps: dict[str, list[_Entry[K]]] = {}
        for entry in self._current.values():
            heaps.setdefault(entry[3], []).append(entry)
        for heap in heaps.values():
            heapq.heapify(heap)
        self._heaps = heaps
        self._entries = len(self._current)

    def next_due(self) -> float | None:
        """The earliest due time of any scheduled key, or None when nothing is scheduled."""
        earliest: float | None = None
        for queue in list(self._heaps):
            top = self._top(queue)
            if top is not None and (earliest is None or top < earliest):
                earliest = top
        return earliest

    def pop_batch(self, now: float, *, window: float, limit: int) -> tuple[str, list[K]] | None:
        """Take the leases of the queue whose first lease is due, or None if nothing is due."""
        for queue in list(self._heaps):
            top = self._top(queue)
            if top is not None and top <= now:
                return queue, self._take(queue, now + window, limit)
        return None

    def _top(self, queue: str) -> float | None:
        heap = self._heaps[queue]
        while heap:
            entry = heap[0]
            if self._current.get(entry[2]) is entry:
                return entry[0]
            heapq.heappop(heap)
            self._entries -= 1
        del self._heaps[queue]
        return None

    def _take(self, queue: str, until: float, limit: int) -> list[K]:
        heap = self._heaps[queue]
        taken: list[K] = []
        while heap and len(taken) < limit and heap[0][0] <= until:
            entry = heapq.heappop(heap)
            self._entries -= 1
            key = entry[2]
            if self._current.get(key) is entry:
                del self._current[key]
                taken.append(key)
        return taken
