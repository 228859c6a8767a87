"""Amazon SQS through one long-lived aiobotocore client.

    async with SqsBackend.open(region="eu-west-1") as backend:
        messages = await backend.receive("jobs", max_messages=10, wait_s=20)

Rules this module keeps:
- One client per backend, entered once and closed by `aclose`. Region, endpoint and
  credentials come from the standard AWS chain unless given explicitly.
- botocore retries in `standard` mode (`total_max_attempts` counts the first try); what is
  still failing after that is raised once, mapped onto `worker.errors` by `_sqs_errors`.
- A queue is named by its name or its URL; a name is resolved once (GetQueueUrl) and cached.
- Batch calls are checked before they leave (at most `limits` entries, distinct well-formed
  ids) with a `ValueError`; per-entry failures come back as `EntryFailure` values.
- Message bodies and credentials are never logged nor put into an error message.
"""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from aiobotocore.config import AioConfig
from aiobotocore.session import AioSession
from botocore import xform_name
from botocore.exceptions import NoRegionError

from backends._sqs_errors import check_entry_ids, check_receive, check_visibility, map_error
from worker.backend import SQS_LIMITS, Limits
from worker.errors import ConfigError, QueueNotFound
from worker.types import (
    BatchResult,
    Deletion,
    EntryFailure,
    MessageAttribute,
    OutgoingMessage,
    QueueInfo,
    ReceivedMessage,
    RedrivePolicy,
    VisibilityChange,
)

__all__ = ["SqsBackend", "SqsSettings"]

_LONGEST_POLL_S = 20


@dataclass(frozen=True, slots=True, kw_only=True)
class SqsSettings:
    """How to reach SQS. Unset fields fall back to the standard AWS chain (env, profile, role)."""

    #: AWS region; None: `AWS_REGION` / `AWS_DEFAULT_REGION` / the profile.
    region: str | None = None
    #: Another endpoint (moto, LocalStack, a VPC endpoint); None: the region's own.
    endpoint_url: str | None = None
    #: Explicit credentials; all None: the standard chain. A key id needs its secret.
    access_key_id: str | None = None
    secret_access_key: str | None = None
    session_token: str | None = None
    #: A named profile of the shared config files.
    profile: str | None = None
    #: Attempts per call including the first (botocore `standard` retry mode).
    max_attempts: int = 5
    connect_timeout_s: float = 5.0
    #: Must exceed the 20 s long poll, or every idle receive would time out.
    read_timeout_s: float = 30.0
    max_pool_connections: int = 20
    #: Known queue URLs by name, used instead of GetQueueUrl (another account's queues).
    queue_urls: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        object.__setattr__(self, "queue_urls", MappingProxyType(dict(self.queue_urls)))
        for name, url in self.queue_urls.items():
            if not _is_url(url):
                raise ConfigError(f"SqsSettings.queue_urls[{name!r}]={url!r}: not an http(s) URL")
        if (self.access_key_id is None) != (self.secret_access_key is None):
            raise ConfigError("SqsSettings: access_key_id and secret_access_key go together")
        rules = (
            ("max_attempts", self.max_attempts >= 1, ">= 1"),
            ("connect_timeout_s", self.connect_timeout_s > 0, "> 0"),
            ("read_timeout_s", self.read_timeout_s > _LONGEST_POLL_S, f"> {_LONGEST_POLL_S}"),
            ("max_pool_connections", self.max_pool_connections >= 1, ">= 1"),
        )
        for name, ok, rule in rules:
            if not ok:
                raise ConfigError(f"SqsSettings.{name}={getattr(self, name)!r}: must be {rule}")

    def client_config(self) -> AioConfig:
        return AioConfig(
            retries={"mode": "standard", "total_max_attempts": self.max_attempts},
            connect_timeout=self.connect_timeout_s,
            read_timeout=self.read_timeout_s,
            max_pool_connections=self.max_pool_connections,
            # Entries are built and checked here; botocore's validator would walk every call.
            parameter_validation=False,
        )


def _batch_result(response: Mapping[str, Any], *, with_ids: bool = False) -> BatchResult:
    successful = response.get("Successful") or []
    failed = tuple(
        EntryFailure(
            entry_id=str(item["Id"]),
            code=str(item.get("Code", "")),
            message=str(item.get("Message", "")),
            sender_fault=bool(item.get("SenderFault", True)),
        )
        for item in response.get("Failed") or []
    )
    ids: Mapping[str, str] = MappingProxyType(
        {str(item["Id"]): str(item["MessageId"]) for item in successful if with_ids}
    )
    return BatchResult(
        succeeded=tuple(str(item["Id"]) for item in successful), failed=failed, message_ids=ids
    )


def _attribute_from_wire(raw: Mapping[str, Any]) -> MessageAttribute:
    binary = raw.get("BinaryValue")
    return MessageAttribute(
        data_type=str(raw["DataType"]),
        string_value=raw.get("StringValue"),
        binary_value=bytes(binary) if binary is not None else None,
    )


def _attribute_to_wire(attribute: MessageAttribute) -> dict[str, Any]:
    wire: dict[str, Any] = {"DataType": attribute.data_type}
    if attribute.string_value is not None:
        wire["StringValue"] = attribute.string_value
    if attribute.binary_value is not None:
        wire["BinaryValue"] = attribute.binary_value
    return wire


def _message_from_wire(queue: str, raw: Mapping[str, Any]) -> ReceivedMessage:
    attributes = {str(k): str(v) for k, v in (raw.get("Attributes") or {}).items()}
    user_attributes = {
        str(name): _attribute_from_wire(value)
        for name, value in (raw.get("MessageAttributes") or {}).items()
    }
    return ReceivedMessage(
        queue=queue,
        message_id=str(raw["MessageId"]),
        receipt_handle=str(raw["ReceiptHandle"]),
        body=str(raw.get("Body", "")),
        receive_count=int(attributes.get("ApproximateReceiveCount", "1")),
        attributes=MappingProxyType(attributes),
        message_attributes=MappingProxyType(user_attributes),
    )


def _send_entry(message: OutgoingMessage) -> dict[str, Any]:
    entry: dict[str, Any] = {"Id": message.entry_id, "MessageBody": message.body}
    if message.delay_s is not None:
        entry["DelaySeconds"] = message.delay_s
    if message.message_attributes:
        entry["MessageAttributes"] = {
            name: _attribute_to_wire(value) for name, value in message.message_attributes.items()
        }
    if message.group_id is not None:
        entry["MessageGroupId"] = message.group_id
    if message.deduplication_id is not None:
        entry["MessageDeduplicationId"] = message.deduplication_id
    return entry


def _queue_name(queue: str) -> str:
    return queue.rstrip("/").rsplit("/", 1)[-1]


def _is_url(queue: str) -> bool:
    return queue.startswith(("https://", "http://"))


def _redrive_from_wire(raw: str | None) -> RedrivePolicy | None:
    if not raw:
        return None
    policy = json.loads(raw)
    return RedrivePolicy(
        dead_letter_queue=str(policy["deadLetterTargetArn"]).rsplit(":", 1)[-1],
        max_receive_count=int(policy["maxReceiveCount"]),
    )


def _queue_info_from_wire(name: str, url: str, attributes: Mapping[str, str]) -> QueueInfo:
    return QueueInfo(
        name=name,
        url=url,
        visibility_timeout_s=int(attributes.get("VisibilityTimeout", "30")),
        fifo=attributes.get("FifoQueue", "false").lower() == "true",
        delay_s=int(attributes.get("DelaySeconds", "0")),
        redrive=_redrive_from_wire(attributes.get("RedrivePolicy")),
        approximate_visible=int(attributes.get("ApproximateNumberOfMessages", "0")),
        approximate_in_flight=int(attributes.get("ApproximateNumberOfMessagesNotVisible", "0")),
        approximate_delayed=int(attributes.get("ApproximateNumberOfMessagesDelayed", "0")),
    )


class SqsBackend:
    """`worker.backend.Backend` and `QueueAdmin` on Amazon SQS.

    Make one with `SqsBackend.open(...)` (an async context manager) or `await
    SqsBackend.connect(settings)` (then `await backend.aclose()`). `SqsBackend(client)` wraps
    a client someone else owns and closes.
    """

    def __init__(
        self,
        client: Any,
        *,
        exit_stack: AsyncExitStack | None = None,
        queue_urls: Mapping[str, str] | None = None,
    ) -> None:
        self._client = client
        self._exit_stack = exit_stack
        #: Given by the user: never evicted. `_urls`: resolved here, evicted when gone.
        self._known: Mapping[str, str] = dict(queue_urls or {})
        self._urls: dict[str, str] = {}
        self._closed = False

    @classmethod
    async def connect(cls, settings: SqsSettings | None = None) -> SqsBackend:
        """Create the client and return an open backend; the caller must `aclose()` it."""
        settings = settings or SqsSettings()
        session = AioSession(profile=settings.profile)
        creator = session.create_client(
            "sqs",
            region_name=settings.region,
            endpoint_url=settings.endpoint_url,
            aws_access_key_id=settings.access_key_id,
            aws_secret_access_key=settings.secret_access_key,
            aws_session_token=settings.session_token,
            config=settings.client_config(),
        )
        # Nothing is entered if this raises, so there is nothing to unwind.
        stack = AsyncExitStack()
        try:
            client = await stack.enter_async_context(creator)
        except NoRegionError as exc:
            raise ConfigError(
                "SQS: no region (pass region= or set AWS_REGION / AWS_DEFAULT_REGION)"
            ) from exc
        return cls(client, exit_stack=stack, queue_urls=settings.queue_urls)

    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        *,
        region: str | None = None,
        endpoint_url: str | None = None,
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        session_token: str | None = None,
        profile: str | None = None,
        max_attempts: int = 5,
        read_timeout_s: float = 30.0,
    ) -> AsyncIterator[SqsBackend]:
        """`connect` with the usual settings as keywords; closes the client on exit."""
        settings = SqsSettings(
            region=region,
            endpoint_url=endpoint_url,
            access_key_id=access_key_id,
            secret_access_key=secret_access_key,
            session_token=session_token,
            profile=profile,
            max_attempts=max_attempts,
            read_timeout_s=read_timeout_s,
        )
        backend = await cls.connect(settings)
        try:
            yield backend
        finally:
            await backend.aclose()

    @property
    def limits(self) -> Limits:
        return SQS_LIMITS

    async def aclose(self) -> None:
        """Close the client (if this backend owns it). Idempotent."""
        self._closed = True
        stack, self._exit_stack = self._exit_stack, None
        if stack is not None:
            await stack.aclose()

    async def _call(self, operation: str, queue: str, **params: Any) -> dict[str, Any]:
        if self._closed:
            raise RuntimeError(f"{operation}: this SqsBackend is closed")
        method = getattr(self._client, xform_name(operation))
        try:
            response: dict[str, Any] = await method(**params)
        except Exception as exc:
            error = map_error(exc, operation=operation, queue=queue)
            if error is None:
                raise
            if isinstance(error, QueueNotFound):
                self._urls.pop(queue, None)
            raise error from exc
        return response

    async def _url(self, queue: str) -> str:
        if _is_url(queue):
            return queue
        url = self._known.get(queue) or self._urls.get(queue)
        if url is None:
            response = await self._call("GetQueueUrl", queue, QueueName=queue)
            url = self._urls[queue] = str(response["QueueUrl"])
        return url

    async def receive(
        self, queue: str, *, max_messages: int, wait_s: float, visibility_s: int | None = None
    ) -> Sequence[ReceivedMessage]:
        check_receive(self.limits, max_messages=max_messages, wait_s=wait_s)
        params: dict[str, Any] = {
            "QueueUrl": await self._url(queue),
            "MaxNumberOfMessages": max_messages,
            # SQS counts whole seconds; rounding down would turn 0.5 s into a short poll.
            "WaitTimeSeconds": math.ceil(wait_s),
            "MessageSystemAttributeNames": ["All"],
            "MessageAttributeNames": ["All"],
        }
        if visibility_s is not None:
            check_visibility("ReceiveMessage", visibility_s, self.limits)
            params["VisibilityTimeout"] = visibility_s
        response = await self._call("ReceiveMessage", queue, **params)
        return [_message_from_wire(queue, raw) for raw in response.get("Messages") or []]

    async def extend(self, queue: str, entries: Sequence[VisibilityChange]) -> BatchResult:
        return await self._change_visibility(queue, entries, self.limits.extend_batch)

    async def release(self, queue: str, entries: Sequence[VisibilityChange]) -> BatchResult:
        return await self._change_visibility(queue, entries, self.limits.release_batch)

    async def _change_visibility(
        self, queue: str, entries: Sequence[VisibilityChange], limit: int
    ) -> BatchResult:
        operation = "ChangeMessageVisibilityBatch"
        check_entry_ids(operation, [entry.entry_id for entry in entries], limit)
        for entry in entries:
            check_visibility(operation, entry.visibility_s, self.limits)
        if not entries:
            return BatchResult()
        wire = [
            {
                "Id": entry.entry_id,
                "ReceiptHandle": entry.receipt_handle,
                "VisibilityTimeout": entry.visibility_s,
            }
            for entry in entries
        ]
        url = await self._url(queue)
        return _batch_result(await self._call(operation, queue, QueueUrl=url, Entries=wire))

    async def delete(self, queue: str, entries: Sequence[Deletion]) -> BatchResult:
        operation = "DeleteMessageBatch"
        check_entry_ids(operation, [entry.entry_id for entry in entries], self.limits.delete_batch)
        if not entries:
            return BatchResult()
        wire = [{"Id": entry.entry_id, "ReceiptHandle": entry.receipt_handle} for entry in entries]
        url = await self._url(queue)
        return _batch_result(await self._call(operation, queue, QueueUrl=url, Entries=wire))

    async def send(self, queue: str, messages: Sequence[OutgoingMessage]) -> BatchResult:
        operation = "SendMessageBatch"
        check_entry_ids(operation, [m.entry_id for m in messages], self.limits.send_batch)
        if not messages:
            return BatchResult()
        wire = [_send_entry(message) for message in messages]
        url = await self._url(queue)
        response = await self._call(operation, queue, QueueUrl=url, Entries=wire)
        return _batch_result(response, with_ids=True)

    async def queue_info(self, queue: str) -> QueueInfo:
        url = await self._url(queue)
        response = await self._call(
            "GetQueueAttributes", queue, QueueUrl=url, AttributeNames=["All"]
        )
        return _queue_info_from_wire(_queue_name(url), url, response.get("Attributes") or {})

    async def _arn(self, queue: str) -> str:
        url = await self._url(queue)
        response = await self._call(
            "GetQueueAttributes", queue, QueueUrl=url, AttributeNames=["QueueArn"]
        )
        return str(response["Attributes"]["QueueArn"])

    async def create_queue(
        self,
        name: str,
        *,
        visibility_timeout_s: int = 30,
        delay_s: int = 0,
        retention_s: int = 345_600,
        redrive: RedrivePolicy | None = None,
        content_based_deduplication: bool = False,
    ) -> str:
        attributes = {
            "VisibilityTimeout": str(visibility_timeout_s),
            "DelaySeconds": str(delay_s),
            "MessageRetentionPeriod": str(retention_s),
        }
        if name.endswith(".fifo"):
            attributes["FifoQueue"] = "true"
        if content_based_deduplication:
            attributes["ContentBasedDeduplication"] = "true"
        if redrive is not None:
            dlq_arn = await self._arn(redrive.dead_letter_queue)
            attributes["RedrivePolicy"] = json.dumps(
                {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": redrive.max_receive_count}
            )
        response = await self._call("CreateQueue", name, QueueName=name, Attributes=attributes)
        url = self._urls[name] = str(response["QueueUrl"])
        return url

    async def delete_queue(self, queue: str) -> None:
        url = await self._url(queue)
        await self._call("DeleteQueue", queue, QueueUrl=url)
        self._urls.pop(queue, None)

    async def purge(self, queue: str) -> None:
        url = await self._url(queue)
        await self._call("PurgeQueue", queue, QueueUrl=url)
