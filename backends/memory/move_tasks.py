"""The engine's message move tasks (SQS's StartMessageMoveTask, ListMessageMoveTasks,
CancelMessageMoveTask) and dead-letter bookkeeping; the rules are `backends.memory.moves`.

A part of `MemoryEngine` (its base class), over the queues of `QueueCatalog`: these are
plain methods that a tool (a `dlq` command, a test) can call on an engine directly.
"""

from __future__ import annotations

from backends.memory.catalog import QueueCatalog
from backends.memory.message import Message
from backends.memory.moves import MAX_MOVES_PER_SECOND, MessageMoveTask, MoveStatus, MoveTask
from backends.memory.queue import Queue
from backends.memory.rules import fail
from worker.rules import queue_name_in_arn

__all__ = ["MessageMoves"]


class MessageMoves(QueueCatalog):
    """Move tasks over the catalog's queues. Moves happen lazily: each engine call first
    moves what is due by its clock (`_settled`)."""

    _moves: dict[str, MoveTask]

    def _new_id(self) -> str:
        raise NotImplementedError  # the engine's message ids

    def start_message_move_task(
        self, source: str, destination: str | None = None, max_per_second: int | None = None
    ) -> str:
        """Start moving the messages of the dead-letter queue `source` to `destination`
        (None: each back to the queue it was dead-lettered from); returns the task handle."""
        op = "StartMessageMoveTask"
        state = self._settled(source, op)
        name = state.config.name
        if not self.dead_letter_source_queues(name):
            fail(op, name, "InvalidParameterValue", "the source is not a dead-letter queue")
        target = None if destination is None else self._queue(destination, op).config.name
        if max_per_second is not None and not 1 <= max_per_second <= MAX_MOVES_PER_SECOND:
            fail(op, name, "InvalidParameterValue", "MaxNumberOfMessagesPerSecond 1-500")
        if any(t.source == name and t.status is MoveStatus.RUNNING for t in self._moves.values()):
            fail(op, name, "InvalidParameterValue", "a move task is already running on it")
        now = self.clock.now()
        handle = f"move-{self._new_id()}"
        self._moves[handle] = MoveTask(
            task_handle=handle,
            source=name,
            destination=target,
            max_per_second=max_per_second,
            started_at=now,
            started_timestamp_ms=self._wall_ms(now),
            to_move=len(state.messages),
        )
        self._forget_old_tasks(name)
        self._advance_moves()
        return handle

    def _forget_old_tasks(self, source: str, keep: int = 10) -> None:
        """Keep the latest `keep` tasks of `source` (ListMessageMoveTasks shows at most 10):
        every engine call walks the running ones, and a long-lived engine starts many."""
        tasks = [handle for handle, task in self._moves.items() if task.source == source]
        for handle in tasks[:-keep]:
            if self._moves[handle].status is not MoveStatus.RUNNING:
                del self._moves[handle]

    def list_message_move_tasks(self, source: str, max_results: int = 1) -> list[MessageMoveTask]:
        """The latest `max_results` (1-10) tasks of `source`, newest first."""
        op = "ListMessageMoveTasks"
        name = self._settled(source, op).config.name
        if not 1 <= max_results <= 10:
            fail(op, name, "InvalidParameterValue", "MaxResults 1-10")
        tasks = [task.view() for task in self._moves.values() if task.source == name]
        return tasks[::-1][:max_results]

    def cancel_message_move_task(self, task_handle: str) -> int:
        """Cancel a running task; returns how many messages it had moved."""
        self._advance_moves()
        task = self._moves.get(task_handle)
        if task is None or task.status is not MoveStatus.RUNNING:
            fail("CancelMessageMoveTask", "", "ResourceNotFoundException", "no such running task")
        task.end(MoveStatus.CANCELLED)
        return task.moved

    def next_move_due(self) -> float | None:
        """When the next message of any running task may move (for a waiting receive).

        A task whose source has no visible message is stalled until one becomes visible (a
        visibility or a delay ending): not due before that, or a due time in the past would
        wake every waiting receive at once, over and over.
        """
        due = []
        for task in self._moves.values():
            at = task.next_due()
            source = self._queues.get(task.source)
            if at is None or source is None:
                continue
            if not source.visible:
                timer = source.next_timer()
                if timer is None:
                    continue
                at = max(at, timer)
            due.append(at)
        return min(due, default=None)

    # -- internals ----------------------------------------------------------------------

    def _settled(self, queue: str, operation: str) -> Queue:
        if self._moves:
            self._advance_moves()
        return super()._settled(queue, operation)

    def _advance_moves(self) -> None:
        now = self.clock.now()
        for task in self._moves.values():
            if task.status is not MoveStatus.RUNNING:
                continue
            source = self._queues.get(task.source)
            if source is None:
                task.end(MoveStatus.FAILED, "the source queue was deleted")
                continue
            source.settle(now)
            for _ in range(task.due(now)):
                if not self._move_one(task, source, now):
                    break
                task.moved += 1
            if task.status is MoveStatus.RUNNING and (
                task.moved >= task.to_move or not source.messages
            ):
                task.end(MoveStatus.COMPLETED)

    def _move_one(self, task: MoveTask, source: Queue, now: float) -> bool:
        """Move the first visible message of `source`; False if none is (or the task failed)."""
        if not source.visible:
            return False
        message = source.messages[next(iter(source.visible))]
        target_name = task.destination
        if target_name is None and message.dead_letter_source_arn is not None:
            target_name = queue_name_in_arn(message.dead_letter_source_arn)
        target = None if target_name is None else self._queues.get(target_name)
        if target is None:
            task.end(MoveStatus.FAILED, "a destination queue does not exist")
            return False
        source.remove(message)
        moved = Message(
            message_id=self._new_id(),
            body=message.body,
            message_attributes=message.message_attributes,
            sent_at=now,
            sent_timestamp_ms=self._wall_ms(now),
            group_id=message.group_id,
            deduplication_id=message.deduplication_id,
            trace_header=message.trace_header,
            visible_at=now,
        )
        target.add(moved, now, expires_at=now + target.config.retention_s)
        self._notify(target.config.name)
        return True
