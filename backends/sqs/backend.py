"""Amazon SQS through one long-lived aiobotocore client.

    async with SqsBackend.open(region="eu-west-1") as backend:
        messages = await backend.receive("jobs", max_messages=10, wait_s=20)

Rules this module keeps (how the client is set up is `backends.sqs.settings`, the shapes it
sends and reads `backends.sqs.wire`):
- One client per backend, entered once and closed by `aclose`.
- What is still failing after botocore's retries is raised once, mapped onto `worker.errors`
  by `backends.sqs.errors.map_error`.
- With `SqsSettings(client="lean")` (the default) the calls in `LEAN_OPERATIONS` go through
  `backends.sqs.lean` (same parameters, same answers, same errors); the rest through the
  client. `client="botocore"` sends them all through the client.
- A queue is named by its name or its URL; a name is resolved once (GetQueueUrl) and cached.
- Batch calls are checked before they leave (at most `limits` entries, distinct well-formed
  ids) with a `ValueError`.
- Message bodies and credentials are never logged nor put into an error message.
"""

from __future__ import annotations

import math
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

from aiobotocore.session import AioSession
from botocore import xform_name
from botocore.exceptions import NoRegionError

from backends.sqs import wire
from backends.sqs.botocore_internals import skip_user_agent_rebuild
from backends.sqs.dead_letters import DeadLetterCalls
from backends.sqs.errors import check_entry_ids, check_receive, check_visibility, map_error
from backends.sqs.lean import LEAN_OPERATIONS, LeanTransport
from backends.sqs.settings import (
    DEFAULT_SQS_CLIENT,
    DEFAULT_SYSTEM_ATTRIBUTES,
    SqsClientKind,
    SqsSettings,
)
from worker.backend import Limits
from worker.errors import ConfigError, QueueNotFound
from worker.rules import SQS_LIMITS, is_url, queue_name
from worker.types import (
    BatchResult,
    Deletion,
    OutgoingMessage,
    QueueInfo,
    QueueSpec,
    ReceivedMessage,
    VisibilityChange,
)

__all__ = ["SqsBackend"]


class SqsBackend(DeadLetterCalls):
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
        system_attributes: tuple[str, ...] = DEFAULT_SYSTEM_ATTRIBUTES,
        message_attributes: tuple[str, ...] = ("All",),
        lean: LeanTransport | None = None,
    ) -> None:
        self._client = client
        #: The lean path for the hot calls (closed by the exit stack); None: all on `client`.
        self._lean = lean
        self._system_attributes = list(system_attributes)
        self._message_attributes = list(message_attributes)
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
        # botocore reads AWS_DEFAULT_REGION and the profile, never AWS_REGION, which the
        # AWS SDKs and EKS pods set: it comes last.
        region = settings.region
        if region is None and session.get_config_variable("region") is None:
            region = os.environ.get("AWS_REGION") or None
        creator = session.create_client(
            "sqs",
            region_name=region,
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
        skip_user_agent_rebuild(client)
        lean = None
        if settings.client == "lean":
            try:
                lean = await LeanTransport.open(
                    client,
                    settings,
                    session=session,
                    ca_bundle=session.get_config_variable("ca_bundle"),
                )
            except BaseException:
                await stack.aclose()
                raise
            stack.push_async_callback(lean.aclose)
        return cls(
            client,
            exit_stack=stack,
            queue_urls=settings.queue_urls,
            system_attributes=settings.system_attributes,
            message_attributes=settings.message_attributes,
            lean=lean,
        )

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
        client: SqsClientKind = DEFAULT_SQS_CLIENT,
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
            client=client,
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
        try:
            response: dict[str, Any]
            if self._lean is not None and operation in LEAN_OPERATIONS:
                response = await self._lean.call(operation, params)
            else:
                response = await getattr(self._client, xform_name(operation))(**params)
        except Exception as exc:
            error = map_error(exc, operation=operation, queue=queue)
            if error is None:
                raise
            if isinstance(error, QueueNotFound):
                self._urls.pop(queue, None)
            raise error from exc
        return response

    async def _url(self, queue: str) -> str:
        if is_url(queue):
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
            "MessageSystemAttributeNames": self._system_attributes,
            "MessageAttributeNames": self._message_attributes,
        }
        if visibility_s is not None:
            check_visibility("ReceiveMessage", visibility_s, self.limits)
            params["VisibilityTimeout"] = visibility_s
        response = await self._call("ReceiveMessage", queue, **params)
        return [wire.message_from_wire(queue, raw) for raw in response.get("Messages") or []]

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
        raw = wire.change_entries(entries)
        url = await self._url(queue)
        return wire.batch_result(await self._call(operation, queue, QueueUrl=url, Entries=raw))

    async def delete(self, queue: str, entries: Sequence[Deletion]) -> BatchResult:
        operation = "DeleteMessageBatch"
        check_entry_ids(operation, [entry.entry_id for entry in entries], self.limits.delete_batch)
        if not entries:
            return BatchResult()
        raw = wire.delete_entries(entries)
        url = await self._url(queue)
        return wire.batch_result(await self._call(operation, queue, QueueUrl=url, Entries=raw))

    async def send(self, queue: str, messages: Sequence[OutgoingMessage]) -> BatchResult:
        operation = "SendMessageBatch"
        check_entry_ids(operation, [m.entry_id for m in messages], self.limits.send_batch)
        if not messages:
            return BatchResult()
        raw = [wire.send_entry(message) for message in messages]
        url = await self._url(queue)
        response = await self._call(operation, queue, QueueUrl=url, Entries=raw)
        return wire.batch_result(response, with_ids=True)

    async def queue_info(self, queue: str) -> QueueInfo:
        url = await self._url(queue)
        response = await self._call(
            "GetQueueAttributes", queue, QueueUrl=url, AttributeNames=["All"]
        )
        return wire.queue_info_from_wire(queue_name(url), url, response.get("Attributes") or {})

    async def _arn(self, queue: str) -> str:
        url = await self._url(queue)
        response = await self._call(
            "GetQueueAttributes", queue, QueueUrl=url, AttributeNames=["QueueArn"]
        )
        return str(response["Attributes"]["QueueArn"])

    async def create_queue(self, spec: QueueSpec) -> str:
        name, redrive = spec.name, spec.redrive
        attributes = {
            "VisibilityTimeout": str(spec.visibility_timeout_s),
            "DelaySeconds": str(spec.delay_s),
            "MessageRetentionPeriod": str(spec.retention_s),
        }
        if spec.fifo:
            attributes["FifoQueue"] = "true"
        if spec.content_based_deduplication:
            attributes["ContentBasedDeduplication"] = "true"
        if redrive is not None:
            dlq_arn = await self._arn(redrive.dead_letter_queue)
            attributes["RedrivePolicy"] = wire.redrive_to_wire(redrive, dlq_arn)
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
