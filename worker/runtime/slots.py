"""Flow control: how many messages of one queue may be held at once."""

from __future__ import annotations

import anyio

__all__ = ["Slots"]


class Slots:
    """Messages held per queue, and slots reserved by receives under way.

    A receive reserves its slots before it is sent and gives back what it did not fill, so
    several concurrent receives of one queue never hold more than `capacity` together.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0
        self._freed = anyio.Event()
        self._waiting = 0  # receives waiting for a slot: only they need the event set
        self._closed = False

    @property
    def free(self) -> int:
        return max(0, self.capacity - self.used)

    async def reserve(self, most: int) -> int:
        """Wait for a free slot, then reserve up to `most`; returns how many, 0 once closed
        (a receive waiting for a slot returns then too)."""
        while self.free == 0 and not self._closed:
            if self._freed.is_set():  # one event for all waiters: every receiver wakes
                self._freed = anyio.Event()
            self._waiting += 1
            try:
                await self._freed.wait()
            finally:
                self._waiting -= 1
        if self._closed:
            return 0
        count = min(most, self.free)
        self.used += count
        return count

    def close(self) -> None:
        """No more receives: every `reserve()`, waiting or later, returns 0."""
        self._closed = True
        self._freed.set()

    def give_back(self, count: int = 1) -> None:
        self.used -= count
        if count > 0 and self._waiting:
            self._freed.set()
