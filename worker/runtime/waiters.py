"""Tasks waiting for something to happen to a key (a lease's renewal), woken all at once.

Rules: `wait(key)` returns once `wake(key)` is called after it started waiting; an entry
lives only while someone waits on it, so a waiter that gives up (cancelled, timed out)
leaves nothing behind, and the number of entries is bounded by the number of waiters.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

import anyio

__all__ = ["Waiters"]

K = TypeVar("K", bound=Hashable)


class Waiters(Generic[K]):
    def __init__(self) -> None:
        #: key -> (the event its waiters wait on, how many wait)
        self._entries: dict[K, tuple[anyio.Event, int]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    async def wait(self, key: K) -> None:
        done, count = self._entries.get(key, (anyio.Event(), 0))
        self._entries[key] = (done, count + 1)
        try:
            await done.wait()
        finally:
            self._leave(key, done)

    def wake_all(self) -> None:
        """Wake every waiter (the one who would wake them is gone)."""
        entries, self._entries = self._entries, {}
        for done, _ in entries.values():
            done.set()

    def wake(self, key: K) -> None:
        if self._entries:  # mostly empty: no lookup per message
            entry = self._entries.pop(key, None)
            if entry is not None:
                entry[0].set()

    def _leave(self, key: K, done: anyio.Event) -> None:
        entry = self._entries.get(key)
        if entry is None or entry[0] is not done:
            return  # woken: the entry is gone already
        if entry[1] <= 1:
            del self._entries[key]
        else:
            self._entries[key] = (done, entry[1] - 1)
