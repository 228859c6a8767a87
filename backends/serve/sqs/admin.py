"""The SQS operations on queues' metadata and dead letters: tags, permissions, dead-letter
source queues and message move tasks, over the engine's plain methods of the same names.

Rules this module keeps:
- Tags are a map (`Tags`; CreateQueue's is spelled `tags`, as in SQS's model). Permissions
  are stored and listed by label, not enforced (nothing here is authenticated).
- Move tasks name queues by ARN (`arn:aws:sqs:<region>:<account>:<name>`); a source that is
  not a queue, or a task handle that is not running, is `ResourceNotFoundException`.
  ListMessageMoveTasks reports a task's handle only while it runs, as SQS does.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from backends.memory.engine import MemoryEngine, MessageMoveTask, MoveStatus
from backends.serve.sqs import members as wire_members
from backends.serve.sqs.errors import SqsError
from worker.errors import QueueNotFound
from worker.rules import queue_name_in_arn

__all__ = ["AdminOperations", "create_queue_tags"]

Answer = dict[str, Any] | None
Operation = Callable[[Mapping[str, Any], str], Awaitable[Answer]]
_ARN_PREFIX = "arn:aws:sqs:"


class AdminOperations:
    """The operations; `queue_of(params)` reads a request's QueueUrl, `arn` and `url` make a
    queue's ARN and URL (`url(base_url, name)`) as the service spells them."""

    def __init__(
        self,
        engine: MemoryEngine,
        *,
        queue_of: Callable[[Mapping[str, Any]], str],
        arn: Callable[[str], str],
        url: Callable[[str, str], str],
    ) -> None:
        self._engine = engine
        self._queue_of = queue_of
        self._arn = arn
        self._url = url

    def operations(self) -> dict[str, Operation]:
        return {
            "TagQueue": self.tag_queue,
            "UntagQueue": self.untag_queue,
            "ListQueueTags": self.list_queue_tags,
            "AddPermission": self.add_permission,
            "RemovePermission": self.remove_permission,
            "ListDeadLetterSourceQueues": self.list_dead_letter_source_queues,
            "StartMessageMoveTask": self.start_message_move_task,
            "ListMessageMoveTasks": self.list_message_move_tasks,
            "CancelMessageMoveTask": self.cancel_message_move_task,
        }

    async def tag_queue(self, params: Mapping[str, Any], base_url: str) -> Answer:
        self._engine.tag_queue(self._queue_of(params), _tags(params, "Tags"))
        return None

    async def untag_queue(self, params: Mapping[str, Any], base_url: str) -> Answer:
        keys = wire_members.string_list(params, "TagKeys")
        self._engine.untag_queue(self._queue_of(params), keys)
        return None

    async def list_queue_tags(self, params: Mapping[str, Any], base_url: str) -> Answer:
        tags = self._engine.queue_tags(self._queue_of(params))
        return {"Tags": tags} if tags else {}

    async def add_permission(self, params: Mapping[str, Any], base_url: str) -> Answer:
        self._engine.add_permission(
            self._queue_of(params),
            wire_members.required_string(params, "Label"),
            wire_members.string_list(params, "AWSAccountIds"),
            wire_members.string_list(params, "Actions"),
        )
        return None

    async def remove_permission(self, params: Mapping[str, Any], base_url: str) -> Answer:
        label = wire_members.required_string(params, "Label")
        self._engine.remove_permission(self._queue_of(params), label)
        return None

    async def list_dead_letter_source_queues(
        self, params: Mapping[str, Any], base_url: str
    ) -> Answer:
        limit = wire_members.integer(params, "MaxResults")
        if limit is not None and not 1 <= limit <= 1000:
            raise wire_members.invalid("MaxResults", "Reason: must be between 1 and 1000.")
        names = self._engine.dead_letter_source_queues(self._queue_of(params))
        after = wire_members.string(params, "NextToken")
        if after:
            names = [name for name in names if name > after]
        page = names[: limit or 1000]
        answer: dict[str, Any] = {"queueUrls": [self._url(base_url, name) for name in page]}
        if limit is not None and len(names) > limit:
            answer["NextToken"] = page[-1]
        return answer

    async def start_message_move_task(self, params: Mapping[str, Any], base_url: str) -> Answer:
        source = _queue_in_arn(wire_members.required_string(params, "SourceArn"))
        destination = wire_members.string(params, "DestinationArn")
        with _missing_queue_is_not_found():
            handle = self._engine.start_message_move_task(
                source,
                None if destination is None else _queue_in_arn(destination),
                wire_members.integer(params, "MaxNumberOfMessagesPerSecond"),
            )
        return {"TaskHandle": handle}

    async def list_message_move_tasks(self, params: Mapping[str, Any], base_url: str) -> Answer:
        source = _queue_in_arn(wire_members.required_string(params, "SourceArn"))
        most = wire_members.integer(params, "MaxResults")
        with _missing_queue_is_not_found():
            tasks = self._engine.list_message_move_tasks(source, 1 if most is None else most)
        return {"Results": [self._task_to_wire(task) for task in tasks]}

    async def cancel_message_move_task(self, params: Mapping[str, Any], base_url: str) -> Answer:
        handle = wire_members.required_string(params, "TaskHandle")
        return {"ApproximateNumberOfMessagesMoved": self._engine.cancel_message_move_task(handle)}

    def _task_to_wire(self, task: MessageMoveTask) -> dict[str, Any]:
        wire: dict[str, Any] = {
            "Status": task.status.value,
            "SourceArn": self._arn(task.source),
            "ApproximateNumberOfMessagesMoved": task.moved,
            "ApproximateNumberOfMessagesToMove": task.to_move,
            "StartedTimestamp": task.started_timestamp_ms,
        }
        if task.status is MoveStatus.RUNNING:
            wire["TaskHandle"] = task.task_handle
        if task.destination is not None:
            wire["DestinationArn"] = self._arn(task.destination)
        if task.max_per_second is not None:
            wire["MaxNumberOfMessagesPerSecond"] = task.max_per_second
        if task.failure_reason is not None:
            wire["FailureReason"] = task.failure_reason
        return wire


def create_queue_tags(params: Mapping[str, Any]) -> dict[str, str]:
    """CreateQueue's tags: `tags` in SQS's model (`Tags` from the query protocol's `Tag.n`)."""
    return _tags(params, "tags" if "tags" in params else "Tags")


def _tags(params: Mapping[str, Any], member: str) -> dict[str, str]:
    tags = wire_members.mapping(params, member)
    if not all(isinstance(value, str) for value in tags.values()):
        raise wire_members.invalid(member, "Reason: tag values are strings.")
    return tags


def _queue_in_arn(arn: str) -> str:
    if not arn.startswith(_ARN_PREFIX) or arn.count(":") != 5:
        raise SqsError("ResourceNotFoundException", "The ARN names no queue here.")
    return queue_name_in_arn(arn)


@contextmanager
def _missing_queue_is_not_found() -> Iterator[None]:
    """SQS answers a move-task call on a queue that does not exist with
    ResourceNotFoundException, not QueueDoesNotExist."""
    try:
        yield
    except QueueNotFound:
        raise SqsError("ResourceNotFoundException", "The queue does not exist.") from None
