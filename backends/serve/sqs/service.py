"""The SQS operations of the embedded endpoint, on one `MemoryBackend`: decoded request
members in, an answer (or `SqsError`) out. The HTTP around them is `backends.serve.sqs.endpoint`.

Rules this module keeps:
- Queue URLs are `<base>/<account>/<name>`, `<base>` being the server's `http://<host>:<port>`
  (`backends.serve.sqs.endpoint`), so SDKs that send to the queue URL keep talking to this server;
  a request's `QueueUrl` is read by its last path segment. ARNs are
  `arn:aws:sqs:<region>:<account>:<name>`.
- All engine calls go through one `MemoryBackend`: a ReceiveMessage with WaitTimeSeconds
  wakes as soon as a message is receivable, and a cancelled poll takes no message.
- CreateQueue: a name ending in `.fifo` needs `FifoQueue=true` and the other way round.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from backends.memory import MemoryBackend
from backends.memory.rules import attempt_id_problem
from backends.serve.sqs import errors as wire_errors
from backends.serve.sqs import members as wire_members
from backends.serve.sqs import messages as wire_messages
from backends.serve.sqs import queue_attributes as wire_queues
from backends.serve.sqs.admin import AdminOperations, create_queue_tags
from backends.serve.sqs.errors import SqsError
from worker.errors import BackendError, QueueNotFound
from worker.rules import is_url, queue_name, queue_name_in_arn
from worker.types import (
    BatchResult,
    Deletion,
    EntryFailure,
    OutgoingMessage,
    QueueSpec,
    VisibilityChange,
)

__all__ = ["Answer", "SqsService"]

Answer = dict[str, Any] | None
_Operation = Callable[[Mapping[str, Any], str], Awaitable[Answer]]


class SqsService:
    """The SQS operations on one `MemoryBackend`: decoded request members in, answer out."""

    def __init__(
        self, backend: MemoryBackend, *, region: str = "us-east-1", account: str = "000000000000"
    ) -> None:
        self._backend = backend
        self._engine = backend.engine
        self._region = region
        self._account = account
        #: Requests served, by operation (known operations only): `GET /_stats` shows them.
        self.requests: Counter[str] = Counter()
        self._operations: dict[str, _Operation] = {
            "CreateQueue": self.create_queue,
            "GetQueueUrl": self.get_queue_url,
            "GetQueueAttributes": self.get_queue_attributes,
            "SetQueueAttributes": self.set_queue_attributes,
            "ListQueues": self.list_queues,
            "DeleteQueue": self.delete_queue,
            "PurgeQueue": self.purge_queue,
            "SendMessage": self.send_message,
            "SendMessageBatch": self.send_message_batch,
            "ReceiveMessage": self.receive_message,
            "DeleteMessage": self.delete_message,
            "DeleteMessageBatch": self.delete_message_batch,
            "ChangeMessageVisibility": self.change_message_visibility,
            "ChangeMessageVisibilityBatch": self.change_message_visibility_batch,
        }
        admin = AdminOperations(self._engine, queue_of=self._queue, arn=self.arn, url=self._url)
        self._operations.update(admin.operations())

    async def call(self, operation: str, params: Mapping[str, Any], base_url: str) -> Answer:
        """Run `operation`; `base_url` (`http://host:port`) prefixes the queue URLs."""
        handler = self._operations.get(operation)
        if handler is None:
            raise SqsError("UnknownOperationException", f"{operation} is not an SQS operation.")
        self.requests[operation] += 1
        try:
            return await handler(params, base_url)
        except BackendError as error:
            raise SqsError.from_backend(error) from None

    def arn(self, name: str) -> str:
        return f"arn:aws:sqs:{self._region}:{self._account}:{name}"

    def _url(self, base_url: str, name: str) -> str:
        return f"{base_url}/{self._account}/{name}"

    def _queue(self, params: Mapping[str, Any]) -> str:
        url = wire_members.required_string(params, "QueueUrl")
        if not is_url(url):
            raise SqsError("InvalidAddress", f"The address {url} is not valid for this endpoint.")
        return queue_name(url)

    # -- queues -------------------------------------------------------------------------

    async def create_queue(self, params: Mapping[str, Any], base_url: str) -> Answer:
        name = wire_members.required_string(params, "QueueName")
        settings = wire_queues.queue_settings(wire_members.mapping(params, "Attributes"))
        if QueueSpec(name).fifo != bool(settings.fifo):
            raise SqsError(
                "InvalidParameterValue",
                "A FIFO queue's name ends in .fifo and it has FifoQueue=true; others neither.",
            )
        try:
            current = self._engine.describe_queue(name)
        except QueueNotFound:
            spec = wire_queues.queue_spec(name, settings)
            self._engine.create_queue(
                spec,
                max_message_bytes=settings.max_message_bytes,
                tags=create_queue_tags(params),
            )
            self._engine.keep_attributes(name, settings.kept)
        else:
            kept = self._engine.kept_attributes(current.config.name)
            wire_queues.check_same(current, settings, kept)
        return {"QueueUrl": self._url(base_url, name)}

    async def get_queue_url(self, params: Mapping[str, Any], base_url: str) -> Answer:
        name = wire_members.required_string(params, "QueueName")
        self._engine.queue_url(name)
        return {"QueueUrl": self._url(base_url, name)}

    async def get_queue_attributes(self, params: Mapping[str, Any], base_url: str) -> Answer:
        name = self._queue(params)
        names = wire_members.string_list(params, "AttributeNames")
        unknown = [n for n in names if n not in wire_queues.QUEUE_ATTRIBUTE_NAMES]
        if unknown:
            raise SqsError("InvalidAttributeName", f"Unknown Attribute {unknown[0]}.")
        description = self._engine.describe_queue(name)
        if not names:
            return {}
        every = wire_queues.queue_attributes_to_wire(
            description, self._engine.kept_attributes(name), self.arn
        )
        if "All" not in names:
            every = {k: v for k, v in every.items() if k in names}
        return {"Attributes": every}

    async def set_queue_attributes(self, params: Mapping[str, Any], base_url: str) -> Answer:
        name = self._queue(params)
        settings = wire_queues.queue_settings(wire_members.mapping(params, "Attributes"))
        if settings.fifo is not None:
            raise SqsError("InvalidAttributeName", "FifoQueue cannot be changed.")
        self._engine.set_queue_attributes(
            name,
            visibility_timeout_s=settings.visibility_timeout_s,
            delay_s=settings.delay_s,
            retention_s=settings.retention_s,
            redrive=settings.redrive,
            content_based_deduplication=settings.content_based_deduplication,
            max_message_bytes=settings.max_message_bytes,
        )
        self._engine.keep_attributes(name, settings.kept)
        return None

    async def list_queues(self, params: Mapping[str, Any], base_url: str) -> Answer:
        limit = wire_members.integer(params, "MaxResults")
        if limit is not None and not 1 <= limit <= 1000:
            raise wire_members.invalid("MaxResults", "Reason: must be between 1 and 1000.")
        names = self._engine.list_queues(wire_members.string(params, "QueueNamePrefix") or "")
        after = wire_members.string(params, "NextToken")
        if after:
            names = [name for name in names if name > after]
        page = names[: limit or 1000]
        answer: dict[str, Any] = {}
        if page:
            answer["QueueUrls"] = [self._url(base_url, name) for name in page]
        if limit is not None and len(names) > limit:
            answer["NextToken"] = page[-1]
        return answer

    async def delete_queue(self, params: Mapping[str, Any], base_url: str) -> Answer:
        name = self._queue(params)
        await self._backend.delete_queue(name)
        return None

    async def purge_queue(self, params: Mapping[str, Any], base_url: str) -> Answer:
        await self._backend.purge(self._queue(params))
        return None

    # -- messages -----------------------------------------------------------------------

    async def send_message(self, params: Mapping[str, Any], base_url: str) -> Answer:
        name = self._queue(params)
        message = wire_messages.outgoing_message(params)
        system = wire_messages.system_attributes(params)
        problem = self._engine.send_problem(name, message)
        if problem is not None:
            raise SqsError(*problem)
        traces = None if system is None else {message.entry_id: system[0]}
        result = self._engine.send(name, [message], trace_headers=traces)
        if result.failed:
            failure = result.failed[0]
            raise SqsError(failure.code, failure.message)
        answer = self._sent(name, message, result.message_ids[message.entry_id])
        if system is not None:
            answer["MD5OfMessageSystemAttributes"] = system[1]
        return answer

    def _sent(self, name: str, message: OutgoingMessage, message_id: str) -> dict[str, Any]:
        sequence = self._engine.sequence_number(name, message_id)
        return wire_messages.sent_to_wire(message, message_id, sequence)

    async def send_message_batch(self, params: Mapping[str, Any], base_url: str) -> Answer:
        name = self._queue(params)
        raw = wire_members.entries(params)
        self._engine.queue_url(name)
        self._engine.check_batch("SendMessageBatch", name, [wire_members.entry_id(e) for e in raw])
        messages: list[OutgoingMessage] = []
        system: dict[str, tuple[str, str]] = {}  # entry id -> (AWSTraceHeader, its MD5)
        failed: list[EntryFailure] = []
        for entry in raw:
            entry_id = wire_members.entry_id(entry)
            try:
                message = wire_messages.outgoing_message(entry, entry_id)
                trace = wire_messages.system_attributes(entry)
            except SqsError as error:
                failed.append(EntryFailure(entry_id, error.code, error.message))
                continue
            messages.append(message)
            if trace is not None:
                system[entry_id] = trace
        successful: list[dict[str, Any]] = []
        if messages:
            traces = {entry_id: trace for entry_id, (trace, _) in system.items()}
            result = self._engine.send(name, messages, trace_headers=traces)
            failed.extend(result.failed)
            for message in messages:
                message_id = result.message_ids.get(message.entry_id)
                if message_id is not None:
                    item = {"Id": message.entry_id, **self._sent(name, message, message_id)}
                    if message.entry_id in system:
                        item["MD5OfMessageSystemAttributes"] = system[message.entry_id][1]
                    successful.append(item)
        return {
            "Successful": successful,
            "Failed": [wire_errors.entry_failure_to_wire(f) for f in failed],
        }

    async def receive_message(self, params: Mapping[str, Any], base_url: str) -> Answer:
        name = self._queue(params)
        wait_s = wire_members.integer(params, "WaitTimeSeconds")
        if wait_s is None:
            kept = self._engine.kept_attributes(name)
            wait_s = int(kept.get("ReceiveMessageWaitTimeSeconds", 0))
        most = wire_members.integer(params, "MaxNumberOfMessages")
        attempt_id = wire_members.string(params, "ReceiveRequestAttemptId")
        if attempt_id is not None and QueueSpec(name).fifo:
            problem = attempt_id_problem(attempt_id)
            if problem is not None:
                raise SqsError(*problem)
        system = wire_messages.system_attribute_filter(params)
        user = wire_messages.message_attribute_filter(params)
        messages = await self._backend.receive_attempt(
            name,
            max_messages=1 if most is None else most,
            wait_s=wait_s,
            visibility_s=wire_members.integer(params, "VisibilityTimeout"),
            attempt_id=attempt_id,
        )
        if not messages:
            return {}
        wire = [wire_messages.message_to_wire(m, system, user) for m in messages]
        for item in wire:
            source = item.get("Attributes", {}).get("DeadLetterQueueSourceArn")
            if source is not None:  # the engine's ARN, in this server's region and account
                item["Attributes"]["DeadLetterQueueSourceArn"] = self.arn(queue_name_in_arn(source))
        return {"Messages": wire}

    async def delete_message(self, params: Mapping[str, Any], base_url: str) -> Answer:
        name = self._queue(params)
        handle = wire_members.required_string(params, "ReceiptHandle")
        result = await self._backend.delete(name, [Deletion("0", handle)])
        _raise_first(result.failed)
        return None

    async def delete_message_batch(self, params: Mapping[str, Any], base_url: str) -> Answer:
        name = self._queue(params)
        deletions = [
            Deletion(wire_members.entry_id(e), wire_members.required_string(e, "ReceiptHandle"))
            for e in wire_members.entries(params)
        ]
        return _batch_answer(await self._backend.delete(name, deletions))

    async def change_message_visibility(self, params: Mapping[str, Any], base_url: str) -> Answer:
        name = self._queue(params)
        change = _visibility_change(params, "0")
        result = await self._backend.extend(name, [change])
        _raise_first(result.failed)
        return None

    async def change_message_visibility_batch(
        self, params: Mapping[str, Any], base_url: str
    ) -> Answer:
        name = self._queue(params)
        changes = [
            _visibility_change(e, wire_members.entry_id(e)) for e in wire_members.entries(params)
        ]
        return _batch_answer(await self._backend.extend(name, changes))


def _visibility_change(params: Mapping[str, Any], entry_id: str) -> VisibilityChange:
    handle = wire_members.required_string(params, "ReceiptHandle")
    visibility = wire_members.integer(params, "VisibilityTimeout")
    if visibility is None:
        raise wire_members.missing("VisibilityTimeout")
    return VisibilityChange(entry_id, handle, visibility)


def _raise_first(failed: tuple[EntryFailure, ...]) -> None:
    if failed:
        raise SqsError(failed[0].code, failed[0].message)


def _batch_answer(result: BatchResult) -> dict[str, Any]:
    return {
        "Successful": [{"Id": entry_id} for entry_id in result.succeeded],
        "Failed": [wire_errors.entry_failure_to_wire(failure) for failure in result.failed],
    }
