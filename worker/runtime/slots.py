"""Flow control: how many messages of one queue may be held at once, and how many bytes."""

from __future__ import annotations

import anyio

__all__ = ["Slots"]


class Slots:
    """Messages held per queue, and slots reserved by receives under way.

    A receive reserves its slots before it is sent and gives back what it did not fill, so
    several concurrent receives of one queue never hold more than `capacity` together.

    `limit` (an adaptive concurrency limit, `worker.core.concurrency`) bounds the messages
    held whose handler has not ended (`ended` counts the others, held until their delete or
    release is answered): it limits the load on the handler's downstream, `capacity` what is
    held. `max_bytes` stops new receives while `bytes` reaches it: what the receiver counts
    for the messages held and the receives under way (`worker.core.byte_budget`).

    Messages set aside (waiting for their tenant's turn, `worker.runtime.tenants`) are held
    but take no slot, until `take_up`; receives stop while `aside_most` or more are aside.
    """

    def __init__(self, capacity: int, *, max_bytes: int | None = None) -> None:
        self.capacity = capacity
        self.limit = capacity
        self.used = 0
        #: Messages held whose handler has ended (counted only with an adaptive limit).
        self.ended = 0
        #: Bytes counted for the messages held and receives under way (with `max_bytes`).
        self.bytes = 0
        self.max_bytes = max_bytes
        #: Held messages that take no slot (waiting for their tenant's turn), and how many
        #: of them stop receives.
        self.aside = 0
        self.aside_most: int | None = None
        self._freed = anyio.Event()
        self._waiting = 0  # receives waiting for a slot: only they need the event set
        self._closed = False

    @property
    def free(self) -> int:
        if self.max_bytes is not None and self.bytes >= self.max_bytes:
            return 0
        taken = self.used - self.aside
        if self.aside and self.aside_most is not None and self.aside >= self.aside_most:
            return 0
        return max(0, min(self.capacity - taken, self.limit - taken + self.ended))

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

    def set_aside(self) -> None:
        """A held message waits for its tenant's turn: its slot is free for others."""
        self.aside += 1
        if self._waiting:
            self._freed.set()

    def take_up(self, count: int = 1) -> None:
        """Messages set aside no longer are (their turn came, or their lease ended)."""
        self.aside -= count
        if count > 0 and self._waiting:
            self._freed.set()

    def hold_bytes(self, size: int) -> None:
        self.bytes += size

    def free_bytes(self, size: int) -> None:
        self.bytes -= size
        if size > 0 and self._waiting:
            self._freed.set()

    def handler_ended(self) -> None:
        """A held message's handler ended (its settling goes on): a slot under the limit."""
        self.ended += 1
        if self._waiting:
            self._freed.set()

    def settled(self) -> None:
        """A message counted by `handler_ended` is no longer held (call after `give_back`)."""
        self.ended -= 1

    def set_limit(self, limit: int) -> None:
        """The adaptive limit moved: a receive waiting for a slot may go now."""
        raised = limit > self.limit
        self.limit = limit
        if raised and self._waiting:
            self._freed.set()
