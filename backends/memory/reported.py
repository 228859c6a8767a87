"""The part of `MemoryEngine` that reports changes to whole queues and move tasks to its
`changes` sink (`backends.memory.changes`); the engine reports its messages' changes itself.

Every change to a queue as a whole (attributes, tags, permissions, a purge, a deletion, a
move task's start) looks its queue up by its operation's name first (`_queue`): the queue is
named then, and recorded whole once the call is over (an operation that fails records it
unchanged, which costs a little and is harmless).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from backends.memory.changes import Changes
from backends.memory.message import Message
from backends.memory.move_tasks import MessageMoves
from backends.memory.moves import MoveStatus, MoveTask
from backends.memory.queue import Queue
from worker.rules import queue_name_in_arn
from worker.types import QueueSpec

__all__ = ["ReportedMoves"]

#: The operations that change a queue as a whole (see `MemoryEngine._queue`).
_WHOLE_QUEUE_CHANGES = frozenset(
    {
        "SetQueueAttributes", "DeleteQueue", "PurgeQueue", "TagQueue", "UntagQueue",
        "AddPermission", "RemovePermission", "StartMessageMoveTask",
    }
)  # fmt: skip


class ReportedMoves(MessageMoves):
    """`MessageMoves` that tells `changes` (None: nobody) what changed."""

    changes: Changes | None = None

    def _changed(self, queue: str, messages: Sequence[Message]) -> None:
        if self.changes is not None:
            for message in messages:
                self.changes.message(queue, message.message_id)

    def create_queue(
        self,
        spec: QueueSpec,
        *,
        max_message_bytes: int | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> str:
        url = super().create_queue(spec, max_message_bytes=max_message_bytes, tags=tags)
        if self.changes is not None:
            self.changes.queue(spec.name)
        return url

    def _queue(self, queue: str, operation: str) -> Queue:
        state = super()._queue(queue, operation)
        if self.changes is not None and operation in _WHOLE_QUEUE_CHANGES:
            self.changes.queue(state.config.name)
        return state

    def _advance_moves(self) -> None:
        if self.changes is not None and any(
            task.status is MoveStatus.RUNNING for task in self._moves.values()
        ):
            self.changes.engine()
        super()._advance_moves()

    def _move_one(self, task: MoveTask, source: Queue, now: float) -> bool:
        first = next(iter(source.visible), None)
        message = None if first is None else source.messages[first]
        moved = super()._move_one(task, source, now)
        if moved and self.changes is not None and message is not None:
            # Gone from `source`, stored under a new id at the end of its target.
            self.changes.message(source.config.name, message.message_id)
            arn = message.dead_letter_source_arn
            name = task.destination or queue_name_in_arn(str(arn))
            self.changes.message(name, next(reversed(self._queues[name].messages)), new=True)
        return moved
