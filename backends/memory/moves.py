"""Message move tasks (SQS's StartMessageMoveTask): the rules, and one task's progress.

The engine (`MemoryEngine.start_message_move_task` and its siblings) keeps the tasks and
moves the messages; this module holds what a task is and how far it should be by `now`.

- A task moves messages out of a dead-letter queue (a queue some queue's redrive policy
  names) to `destination`, or, without one, each message back to the queue it was
  dead-lettered from. Only one task per source queue runs at a time.
- It sets out to move the messages stored in the source when it starts
  (`to_move`); it takes visible ones in order, so one in flight waits until it is visible.
  It ends COMPLETED when `to_move` are moved or the source holds no more, CANCELLED by
  `cancel_message_move_task`, FAILED when a queue it needs is gone (`failure_reason`).
- A moved message is a new message: a new MessageId, sent now, receive count 0; its body,
  attributes and FIFO group and deduplication ids carry over.
- `max_per_second` (1-500) bounds the pace on the engine's clock: by `started_at + t` at
  most `floor(t * max_per_second)` are moved. Without it, everything moves at once. Like
  every change in the engine, moves happen lazily, at the next call to it; `next_due` says
  when the next one is due so that a long poll wakes for it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

__all__ = ["MAX_MOVES_PER_SECOND", "MessageMoveTask", "MoveStatus", "MoveTask"]

MAX_MOVES_PER_SECOND = 500


class MoveStatus(StrEnum):
    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    CANCELLED = "CANCELLED"
    FAILED = "FAILED"


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageMoveTask:
    """One task as ListMessageMoveTasks reports it (queues by name)."""

    task_handle: str
    status: MoveStatus
    source: str
    #: None: each message back to the queue it was dead-lettered from.
    destination: str | None
    max_per_second: int | None
    moved: int
    to_move: int
    failure_reason: str | None
    #: Wall-clock milliseconds since the epoch.
    started_timestamp_ms: int


@dataclass(slots=True, kw_only=True)
class MoveTask:
    """One task's state; the engine changes it as it moves messages."""

    task_handle: str
    source: str
    destination: str | None
    max_per_second: int | None
    started_at: float
    started_timestamp_ms: int
    to_move: int
    moved: int = 0
    status: MoveStatus = MoveStatus.RUNNING
    failure_reason: str | None = None

    def due(self, now: float) -> int:
        """How many more messages should be moved by `now`."""
        if self.max_per_second is None:
            allowed = self.to_move
        else:
            allowed = min(self.to_move, math.floor((now - self.started_at) * self.max_per_second))
        return max(0, allowed - self.moved)

    def next_due(self) -> float | None:
        """When the next message is due (None: nothing more is); for a waiting receive."""
        if self.status is not MoveStatus.RUNNING or self.moved >= self.to_move:
            return None
        if self.max_per_second is None:
            return self.started_at
        return self.started_at + (self.moved + 1) / self.max_per_second

    def end(self, status: MoveStatus, reason: str | None = None) -> None:
        self.status = status
        self.failure_reason = reason

    def view(self) -> MessageMoveTask:
        return MessageMoveTask(
            task_handle=self.task_handle,
            status=self.status,
            source=self.source,
            destination=self.destination,
            max_per_second=self.max_per_second,
            moved=self.moved,
            to_move=self.to_move,
            failure_reason=self.failure_reason,
            started_timestamp_ms=self.started_timestamp_ms,
        )
