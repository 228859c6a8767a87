"""The deduplication ids of one queue of the in-memory engine, each with its first message.

Rules this module keeps:

- Deduplication ids are remembered for a fixed window from the first send.
- An id is forgotten lazily, in `settle(now)`, which the queue runs with its own.
"""

from __future__ import annotations

import heapq

__all__ = ["DEDUPLICATION_WINDOW_S", "DeduplicationWindow"]

DEDUPLICATION_WINDOW_S = 300.0


class DeduplicationWindow:
    """Deduplication id -> the message id first sent with it, while the window lasts."""

    def __init__(self) -> None:
        self._ids: dict[str, tuple[float, str]] = {}
        self._expiries: list[tuple[float, str]] = []

    def settle(self, now: float) -> None:
        """Forget every id whose window has ended by `now`."""
        while self._expiries and self._expiries[0][0] <= now:
            expires_at, dedup_id = heapq.heappop(self._expiries)
            if self._ids.get(dedup_id, (None, ""))[0] == expires_at:
                del self._ids[dedup_id]

    def duplicate_of(self, dedup_id: str, now: float) -> str | None:
        """The message id first sent with `dedup_id` inside the window, if any."""
        entry = self._ids.get(dedup_id)
        if entry is None or entry[0] <= now:
            return None
        return entry[1]

    def remember(self, dedup_id: str, message_id: str, now: float) -> None:
        self.restore(dedup_id, message_id, now + DEDUPLICATION_WINDOW_S)

    def restore(self, dedup_id: str, message_id: str, expires_at: float) -> None:
        self._ids[dedup_id] = (expires_at, message_id)
        heapq.heappush(self._expiries, (expires_at, dedup_id))

    def entries(self) -> list[tuple[str, str, float]]:
        """(deduplication id, message id, window end) of every id remembered."""
        return [(dedup_id, entry[1], entry[0]) for dedup_id, entry in self._ids.items()]
