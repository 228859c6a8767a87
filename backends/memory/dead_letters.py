"""The dead-letter tools' calls on the engine (`worker.backend.DeadLetterAdmin`), as a
mixin of `MemoryBackend`: the engine's own methods, each after a checkpoint, as the other
calls are. The engine can peek (`MemoryEngine.browse`), whatever its dialect."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from backends.memory.engine import MemoryEngine
from worker.types import MoveTask, ReceivedMessage

__all__ = ["DeadLetterCalls"]


class _Engine(Protocol):
    @property
    def engine(self) -> MemoryEngine: ...

    async def _checkpoint(self) -> None: ...


class DeadLetterCalls:
    async def list_queues(self: _Engine, prefix: str = "") -> list[str]:
        await self._checkpoint()
        return self.engine.list_queues(prefix)

    async def dead_letter_source_queues(self: _Engine, queue: str) -> list[str]:
        await self._checkpoint()
        return self.engine.dead_letter_source_queues(queue)

    async def peek(self: _Engine, queue: str, max_messages: int) -> Sequence[ReceivedMessage]:
        await self._checkpoint()
        return self.engine.browse(queue, max_messages)

    async def start_message_move_task(
        self: _Engine,
        source: str,
        *,
        destination: str | None = None,
        max_per_second: int | None = None,
    ) -> str:
        await self._checkpoint()
        return self.engine.start_message_move_task(source, destination, max_per_second)

    async def list_message_move_tasks(
        self: _Engine, source: str, *, max_results: int = 10
    ) -> list[MoveTask]:
        await self._checkpoint()
        return [
            MoveTask(
                handle=task.task_handle,
                status=task.status.value,
                source=task.source,
                destination=task.destination,
                max_per_second=task.max_per_second,
                moved=task.moved,
                to_move=task.to_move,
                failure_reason=task.failure_reason,
                started_at_ms=task.started_timestamp_ms,
            )
            for task in self.engine.list_message_move_tasks(source, max_results)
        ]

    async def cancel_message_move_task(self: _Engine, task_handle: str) -> int:
        await self._checkpoint()
        return self.engine.cancel_message_move_task(task_handle)
