"""`SmqBackend`: the runtime's `Backend` (and the dead-letter tools' peek) on Alibaba Cloud
SMQ, through `SmqClient`.

Rules:
- receive: BatchReceiveMessage (1-16, `waitseconds` 0-30); SMQ's 404 `MessageNotExist` for
  an empty poll is an empty answer. SMQ's receive takes no visibility: the queue's
  VisibilityTimeout applies. When the runtime asks for more than that, each message is
  extended at once to what it asked (one call each), and answered with the new handle; when
  it asks for less, the runtime's deadline is simply earlier than SMQ's (safe).
- extend / release: ChangeMessageVisibility, one handle a call (SMQ has no batch), the
  entries of one request concurrently; each success reports its new handle in
  `BatchResult.new_handles`. A release asks for at least 1 s (SMQ's shortest).
- delete: BatchDeleteMessage (1-16); the `<Errors>` answer is per-entry failures.
- send: BatchSendMessage (1-16); bodies are sent as given (not base64, unlike the SDK's
  default).
- DequeueCount is the receive count, EnqueueTime the SentTimestamp, FirstDequeueTime the
  ApproximateFirstReceiveTimestamp.
- Error codes become the runtime's (`backends.smq.wire`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from types import MappingProxyType

import anyio

from backends.smq import wire
from backends.smq.client import SmqClient, quote
from backends.smq.settings import SmqSettings
from worker.backend import Limits
from worker.errors import QueueNotFound, UnsupportedOperation
from worker.rules import SMQ_LIMITS
from worker.types import (
    BatchResult,
    Deletion,
    EntryFailure,
    MoveTask,
    OutgoingMessage,
    QueueInfo,
    ReceivedMessage,
    RedrivePolicy,
    VisibilityChange,
)

__all__ = ["SMQ_LIMITS", "SmqBackend"]


class SmqBackend:
    """A `Backend` on SMQ. Open with `await SmqBackend.connect(settings)`."""

    def __init__(self, settings: SmqSettings) -> None:
        self._client = SmqClient(settings)
        self._endpoint = settings.endpoint
        self._visibility: dict[str, int] = {}

    @classmethod
    async def connect(cls, settings: SmqSettings) -> SmqBackend:
        return cls(settings)

    @property
    def limits(self) -> Limits:
        return SMQ_LIMITS

    @property
    def endpoint(self) -> str:
        return self._endpoint

    @property
    def calls(self) -> int:
        """HTTP calls made so far (for benchmarks)."""
        return self._client.calls

    async def queue_info(self, queue: str) -> QueueInfo:
        op = "GetQueueAttributes"
        status, raw = await self._client.call("GET", f"/queues/{queue}", operation=op, queue=queue)
        if status != 200:
            raise wire.call_error(status, raw, op, queue)
        root = wire.parse(raw)
        found = wire.fields(root)
        policy = next((c for c in root if c.tag.endswith("DlqPolicy")), None)
        redrive = None
        if policy is not None:
            dlq = wire.fields(policy)
            if dlq.get("Enabled", "true").lower() == "true":
                redrive = RedrivePolicy(dlq["DeadLetterTargetQueue"], int(dlq["MaxReceiveCount"]))
        visibility = int(found["VisibilityTimeout"])
        self._visibility[queue] = visibility
        return QueueInfo(
            name=queue,
            url=f"{self._endpoint}/queues/{queue}",
            visibility_timeout_s=visibility,
            delay_s=int(found.get("DelaySeconds", "0")),
            redrive=redrive,
            approximate_visible=int(found.get("ActiveMessages", "0")),
            approximate_in_flight=int(found.get("InactiveMessages", "0")),
            approximate_delayed=int(found.get("DelayMessages", "0")),
        )

    async def receive(
        self, queue: str, *, max_messages: int, wait_s: float, visibility_s: int | None = None
    ) -> Sequence[ReceivedMessage]:
        wait = int(wait_s)
        resource = f"/queues/{queue}/messages?numOfMessages={max_messages}&waitseconds={wait}"
        got = await self._read(queue, resource, wait, "ReceiveMessage")
        if visibility_s is None or not got:
            return got
        queue_visibility = self._visibility.get(queue)
        if queue_visibility is None:
            queue_visibility = (await self.queue_info(queue)).visibility_timeout_s
        if visibility_s <= queue_visibility:
            return got
        return await self._extended(queue, got, visibility_s)

    async def _extended(
        self, queue: str, got: Sequence[ReceivedMessage], visibility_s: int
    ) -> list[ReceivedMessage]:
        changes = [
            VisibilityChange(str(i), m.receipt_handle, visibility_s) for i, m in enumerate(got)
        ]
        result = await self.extend(queue, changes)
        kept = []
        for i, message in enumerate(got):
            new = result.new_handles.get(str(i))
            if new is not None:  # else its lease is SMQ's default; the runtime sees it lapse
                message = _with_handle(message, new)
            kept.append(message)
        return kept

    async def peek(self, queue: str, max_messages: int) -> Sequence[ReceivedMessage]:
        resource = f"/queues/{queue}/messages?peekonly=true&numOfMessages={max_messages}"
        return await self._read(queue, resource, 0, "PeekMessage")

    async def _read(self, queue: str, resource: str, wait: int, op: str) -> list[ReceivedMessage]:
        status, raw = await self._client.call(
            "GET", resource, wait_s=wait, operation=op, queue=queue
        )
        if status == 404 and b"MessageNotExist" in raw:
            return []
        if status != 200:
            raise wire.call_error(status, raw, op, queue)
        return [_message(queue, row) for row in wire.items(wire.parse(raw))]

    async def extend(self, queue: str, entries: Sequence[VisibilityChange]) -> BatchResult:
        return await self._change(queue, entries, floor=1)

    async def release(self, queue: str, entries: Sequence[VisibilityChange]) -> BatchResult:
        return await self._change(queue, entries, floor=SMQ_LIMITS.min_release_visibility_s)

    async def _change(
        self, queue: str, entries: Sequence[VisibilityChange], *, floor: int
    ) -> BatchResult:
        answers: dict[str, str | EntryFailure] = {}

        async def one(entry: VisibilityChange) -> None:
            answers[entry.entry_id] = await self._change_one(queue, entry, floor)

        async with anyio.create_task_group() as tg:
            for entry in entries:
                tg.start_soon(one, entry)
        new = {k: v for k, v in answers.items() if isinstance(v, str)}
        return BatchResult(
            succeeded=tuple(e.entry_id for e in entries if e.entry_id in new),
            failed=tuple(v for v in answers.values() if isinstance(v, EntryFailure)),
            new_handles=MappingProxyType(new),
        )

    async def _change_one(
        self, queue: str, entry: VisibilityChange, floor: int
    ) -> str | EntryFailure:
        op = "ChangeMessageVisibility"
        visibility = max(floor, entry.visibility_s)
        resource = (
            f"/queues/{queue}/messages?ReceiptHandle={quote(entry.receipt_handle)}"
            f"&VisibilityTimeout={visibility}"
        )
        status, raw = await self._client.call("PUT", resource, operation=op, queue=queue)
        if status == 200:
            return wire.fields(wire.parse(raw))["ReceiptHandle"]
        error = wire.call_error(status, raw, op, queue)
        if error.code in wire.ENTRY_CODES:
            return EntryFailure(entry.entry_id, wire.ENTRY_CODES[error.code], str(error))
        raise error

    async def delete(self, queue: str, entries: Sequence[Deletion]) -> BatchResult:
        op = "BatchDeleteMessage"
        status, raw = await self._client.call(
            "DELETE", f"/queues/{queue}/messages", body=_handles(entries), operation=op, queue=queue
        )
        ids = [e.entry_id for e in entries]
        if status == 204:
            return BatchResult(succeeded=tuple(ids))
        root = wire.parse(raw)
        if not root.tag.endswith("Errors"):
            raise wire.call_error(status, raw, op, queue)
        by_handle = {e.receipt_handle: e.entry_id for e in entries}
        failed = []
        for row in wire.items(root):
            code = wire.ENTRY_CODES.get(row.get("ErrorCode", ""), row.get("ErrorCode", "?"))
            failed.append(
                EntryFailure(
                    by_handle.get(row.get("ReceiptHandle", ""), "?"),
                    code,
                    row.get("ErrorMessage", ""),
                )
            )
        refused = {f.entry_id for f in failed}
        return BatchResult(
            succeeded=tuple(i for i in ids if i not in refused), failed=tuple(failed)
        )

    async def send(self, queue: str, messages: Sequence[OutgoingMessage]) -> BatchResult:
        op = "BatchSendMessage"
        rows = [{"MessageBody": m.body, "DelaySeconds": m.delay_s} for m in messages]
        body = wire.render("Messages", "Message", rows)
        status, raw = await self._client.call(
            "POST", f"/queues/{queue}/messages", body=body, operation=op, queue=queue
        )
        if status not in (201, 400, 500) or not raw.lstrip().startswith(b"<?xml"):
            raise wire.call_error(status, raw, op, queue)
        root = wire.parse(raw)
        if not root.tag.endswith("Messages"):
            raise wire.call_error(status, raw, op, queue)
        ids: dict[str, str] = {}
        failed = []
        for message, row in zip(messages, wire.items(root), strict=True):
            if "MessageId" in row:
                ids[message.entry_id] = row["MessageId"]
            else:
                code = wire.ENTRY_CODES.get(row.get("ErrorCode", ""), row.get("ErrorCode", "?"))
                failed.append(EntryFailure(message.entry_id, code, row.get("ErrorMessage", "")))
        return BatchResult(
            succeeded=tuple(ids), failed=tuple(failed), message_ids=MappingProxyType(ids)
        )

    # -- the dead-letter tools ------------------------------------------------------------

    async def list_queues(self, prefix: str = "") -> list[str]:
        op = "ListQueue"
        headers = {"x-mns-prefix": prefix} if prefix else {}
        status, raw = await self._client.call(
            "GET", "/queues", headers=headers, operation=op, queue=prefix
        )
        if status != 200:
            raise wire.call_error(status, raw, op, prefix)
        urls = [
            row.get("QueueURL", "") for row in wire.items(wire.parse(raw)) if row.get("QueueURL")
        ]
        return sorted(url.rstrip("/").rpartition("/")[2] for url in urls)

    async def dead_letter_source_queues(self, queue: str) -> list[str]:
        sources = []
        for name in await self.list_queues():
            try:
                info = await self.queue_info(name)
            except QueueNotFound:
                continue  # deleted meanwhile
            if info.redrive is not None and info.redrive.dead_letter_queue == queue:
                sources.append(name)
        return sources

    async def start_message_move_task(
        self, source: str, *, destination: str | None = None, max_per_second: int | None = None
    ) -> str:
        raise _no_moves("StartMessageMoveTask", source)

    async def list_message_move_tasks(
        self, source: str, *, max_results: int = 10
    ) -> list[MoveTask]:
        raise _no_moves("ListMessageMoveTasks", source)

    async def cancel_message_move_task(self, task_handle: str) -> int:
        raise _no_moves("CancelMessageMoveTask", "")

    async def aclose(self) -> None:
        await self._client.aclose()


def _no_moves(operation: str, queue: str) -> UnsupportedOperation:
    return UnsupportedOperation(
        f"{operation}: SMQ has no message move tasks",
        operation=operation,
        queue=queue,
        code="UnsupportedOperation",
    )


def _handles(entries: Sequence[Deletion]) -> bytes:
    return wire.render(
        "ReceiptHandles", None, [{"ReceiptHandle": e.receipt_handle} for e in entries]
    )


def _message(queue: str, row: Mapping[str, str]) -> ReceivedMessage:
    attributes = {
        "SentTimestamp": row.get("EnqueueTime", "0"),
        "ApproximateReceiveCount": row.get("DequeueCount", "0"),
        "ApproximateFirstReceiveTimestamp": row.get("FirstDequeueTime", "0"),
    }
    if "NextVisibleTime" in row:
        attributes["NextVisibleTime"] = row["NextVisibleTime"]
    return ReceivedMessage(
        queue=queue,
        message_id=row["MessageId"],
        receipt_handle=row.get("ReceiptHandle", ""),
        body=row.get("MessageBody", ""),
        receive_count=int(row.get("DequeueCount", "0")),
        attributes=MappingProxyType(attributes),
    )


def _with_handle(message: ReceivedMessage, handle: str) -> ReceivedMessage:
    return replace(message, receipt_handle=handle)
