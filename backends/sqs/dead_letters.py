"""The dead-letter tools' calls on SQS (`worker.backend.DeadLetterAdmin`), as a mixin of
`SqsBackend`: ListQueues, ListDeadLetterSourceQueues, and the message move tasks
(StartMessageMoveTask, ListMessageMoveTasks, CancelMessageMoveTask). SQS cannot peek: a
message can be read only by receiving it, which counts a receive; `peek` says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from worker.errors import UnsupportedOperation
from worker.rules import queue_name, queue_name_in_arn
from worker.types import MoveTask, ReceivedMessage

__all__ = ["DeadLetterCalls", "move_task_from_wire"]


class _Calls(Protocol):
    async def _call(self, operation: str, queue: str, **params: Any) -> dict[str, Any]: ...

    async def _url(self, queue: str) -> str: ...

    async def _arn(self, queue: str) -> str: ...


class DeadLetterCalls:
    async def list_queues(self: _Calls, prefix: str = "") -> list[str]:
        params: dict[str, Any] = {"QueueNamePrefix": prefix} if prefix else {}
        return await _names(self, "ListQueues", prefix, "QueueUrls", params)

    async def dead_letter_source_queues(self: _Calls, queue: str) -> list[str]:
        params = {"QueueUrl": await self._url(queue)}
        return await _names(self, "ListDeadLetterSourceQueues", queue, "queueUrls", params)

    async def peek(self, queue: str, max_messages: int) -> Sequence[ReceivedMessage]:
        raise UnsupportedOperation(
            f"SQS cannot peek at {queue!r}: a message is read only by receiving it (which "
            "counts a receive); use `lease-worker dlq inspect`",
            operation="Peek",
            queue=queue,
            code="UnsupportedOperation",
        )

    async def start_message_move_task(
        self: _Calls,
        source: str,
        *,
        destination: str | None = None,
        max_per_second: int | None = None,
    ) -> str:
        params: dict[str, Any] = {"SourceArn": await self._arn(source)}
        if destination is not None:
            params["DestinationArn"] = await self._arn(destination)
        if max_per_second is not None:
            params["MaxNumberOfMessagesPerSecond"] = max_per_second
        response = await self._call("StartMessageMoveTask", source, **params)
        return str(response["TaskHandle"])

    async def list_message_move_tasks(
        self: _Calls, source: str, *, max_results: int = 10
    ) -> list[MoveTask]:
        arn = await self._arn(source)
        response = await self._call(
            "ListMessageMoveTasks", source, SourceArn=arn, MaxResults=max_results
        )
        return [move_task_from_wire(raw) for raw in response.get("Results") or []]

    async def cancel_message_move_task(self: _Calls, task_handle: str) -> int:
        response = await self._call("CancelMessageMoveTask", "", TaskHandle=task_handle)
        return int(response.get("ApproximateNumberOfMessagesMoved", 0))


async def _names(
    calls: _Calls, operation: str, queue: str, key: str, params: dict[str, Any]
) -> list[str]:
    """Every page of a listing of queue URLs (1,000 a page), as queue names."""
    params = {**params, "MaxResults": 1000}
    names: list[str] = []
    while True:
        response = await calls._call(operation, queue, **params)
        names += [queue_name(url) for url in response.get(key) or []]
        token = response.get("NextToken")
        if not token:
            return names
        params["NextToken"] = token


def move_task_from_wire(raw: dict[str, Any]) -> MoveTask:
    destination = raw.get("DestinationArn")
    to_move = raw.get("ApproximateNumberOfMessagesToMove")
    per_second = raw.get("MaxNumberOfMessagesPerSecond")
    return MoveTask(
        handle=raw.get("TaskHandle"),
        status=str(raw.get("Status", "")),
        source=queue_name_in_arn(str(raw.get("SourceArn", ""))),
        destination=queue_name_in_arn(destination) if destination else None,
        max_per_second=int(per_second) if per_second is not None else None,
        moved=int(raw.get("ApproximateNumberOfMessagesMoved", 0)),
        to_move=int(to_move) if to_move is not None else None,
        failure_reason=raw.get("FailureReason"),
        started_at_ms=int(raw.get("StartedTimestamp", 0)),
    )
