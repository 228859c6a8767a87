"""FIFO receive attempts (ReceiveRequestAttemptId): a retried receive gets the same messages.

Rules this module keeps, as SQS documents them:
- A receive on a FIFO queue may carry an attempt id. Within 5 minutes of it, a receive with
  the same id returns the same messages with the same receipt handles, and starts their
  visibility timeout again, as long as none of them was modified since (deleted, received
  again, its visibility changed, or its timeout ended): then it is a new receive.
- Only receives that returned messages are remembered; ids are forgotten lazily.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ATTEMPT_WINDOW_S", "Attempt", "ReceiveAttempts"]

ATTEMPT_WINDOW_S = 300.0


@dataclass(frozen=True, slots=True)
class Attempt:
    """What one receive returned: (message id, receipt handle, generation) each."""

    expires_at: float
    taken: tuple[tuple[str, str, int], ...]


class ReceiveAttempts:
    def __init__(self) -> None:
        self._attempts: dict[str, Attempt] = {}

    def recall(self, attempt_id: str, now: float) -> Attempt | None:
        attempt = self._attempts.get(attempt_id)
        if attempt is None or attempt.expires_at <= now:
            self._attempts.pop(attempt_id, None)
            return None
        return attempt

    def remember(
        self, attempt_id: str, taken: tuple[tuple[str, str, int], ...], expires_at: float
    ) -> None:
        if len(self._attempts) > 1024:  # forget the expired now and then, all at once
            oldest = expires_at - ATTEMPT_WINDOW_S
            self._attempts = {k: a for k, a in self._attempts.items() if a.expires_at > oldest}
        self._attempts[attempt_id] = Attempt(expires_at, taken)
