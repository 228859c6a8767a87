"""SMQ's message operations over the engine's SMQ dialect: send, receive, peek, delete and
change visibility, each with SMQ's answers.

Rules:
- A receive takes the queue's VisibilityTimeout (SMQ's receive has no visibility of its
  own) and waits `waitseconds` (0-30), else the queue's PollingWaitSeconds. An empty answer
  is 404 `MessageNotExist`, SMQ's way of saying "nothing now".
- A visibility change answers a new ReceiptHandle and the NextVisibleTime; the old handle
  is refused from then on (the engine's SMQ dialect).
- Message properties (user and system) go in with a send and come back with every receive
  and peek (`backends.serve.smq.properties`).
- Engine codes become SMQ's: ReceiptHandleIsInvalid -> ReceiptHandleError,
  MessageNotInflight -> MessageNotExist, the rest of the refusals -> InvalidArgument.
"""

from __future__ import annotations

import hashlib
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence

from backends.memory import MemoryBackend
from backends.serve.echo import bounded
from backends.serve.smq import wire
from backends.serve.smq.properties import properties_from_wire, properties_to_wire
from backends.serve.smq.wire import SmqError
from worker.types import Deletion, OutgoingMessage, ReceivedMessage, VisibilityChange

__all__ = ["Answer", "MessageCalls", "smq_code"]

#: SMQ's default priority; the engine has none.
_PRIORITY = 8
_ENTRY_CODES = {
    "ReceiptHandleIsInvalid": "ReceiptHandleError",
    "MessageNotInflight": "MessageNotExist",
}

Answer = tuple[int, bytes, Mapping[str, str]]


def smq_code(engine_code: str) -> str:
    """SMQ's code for an engine (SQS-vocabulary) entry code."""
    return _ENTRY_CODES.get(engine_code, "InvalidArgument")


class MessageCalls:
    """The message half of the SMQ service; `backend` is a `MemoryBackend` on an engine
    with the SMQ dialect."""

    def __init__(self, backend: MemoryBackend) -> None:
        self._backend = backend
        self._engine = backend.engine

    def _wall_ms(self, at: float) -> int:
        return int((at + self._engine.clock.wall_offset_s()) * 1000)

    async def send(self, queue: str, raw: bytes) -> Answer:
        """SendMessage (a `<Message>`) or BatchSendMessage (`<Messages>`)."""
        root = wire.parse(raw, "Message", "Messages")
        batch = wire.local_name(root) == "Messages"
        items = wire.children(root, "Message") if batch else [root]
        outgoing = [_outgoing(str(i), item) for i, item in enumerate(items)]
        if not outgoing:
            raise SmqError("InvalidArgument", "A batch holds 1-16 messages.")
        result = await self._backend.send(queue, outgoing)
        failures = {f.entry_id: f for f in result.failed}
        rows: list[dict[str, object]] = []
        for message in outgoing:
            failure = failures.get(message.entry_id)
            if failure is None:
                md5 = _md5(message.body)
                rows.append(
                    {"MessageId": result.message_ids[message.entry_id], "MessageBodyMD5": md5}
                )
            else:
                code, text = smq_code(failure.code), bounded(failure.message)
                rows.append({"ErrorCode": code, "ErrorMessage": text})
        if not batch:
            if failures:
                raise SmqError(str(rows[0]["ErrorCode"]), str(rows[0]["ErrorMessage"]))
            return 201, wire.document("Message", rows[0]), {}
        return (400 if failures else 201), wire.list_document("Messages", "Message", rows), {}

    async def receive(self, queue: str, count: int | None, wait_s: float) -> Answer:
        got = await self._backend.receive(queue, max_messages=count or 1, wait_s=wait_s)
        if not got:
            raise SmqError("MessageNotExist", "Message not exist.")
        rows = [self._row(message, with_handle=True) for message in got]
        if count is None:
            return 200, wire.document("Message", rows[0]), {}
        return 200, wire.list_document("Messages", "Message", rows), {}

    async def peek(self, queue: str, count: int | None) -> Answer:
        got = await self._backend.peek(queue, count or 1)
        if not got:
            raise SmqError("MessageNotExist", "Message not exist.")
        rows = [self._row(message, with_handle=False) for message in got]
        if count is None:
            return 200, wire.document("Message", rows[0]), {}
        return 200, wire.list_document("Messages", "Message", rows), {}

    async def change_visibility(self, queue: str, handle: str, visibility_s: int) -> Answer:
        result = await self._backend.extend(queue, [VisibilityChange("0", handle, visibility_s)])
        if result.failed:
            failure = result.failed[0]
            raise SmqError(smq_code(failure.code), failure.message)
        next_visible = self._wall_ms(self._engine.clock.now() + visibility_s)
        fields = {"ReceiptHandle": result.new_handles["0"], "NextVisibleTime": next_visible}
        return 200, wire.document("ChangeVisibility", fields), {}

    async def delete(self, queue: str, handles: Sequence[str], *, single: bool) -> Answer:
        """DeleteMessage (`single`: one handle, in the query) or BatchDeleteMessage (1-16)."""
        entries = [Deletion(str(i), handle) for i, handle in enumerate(handles)]
        result = await self._backend.delete(queue, entries)
        if not result.failed:
            return 204, b"", {}
        if single:
            failure = result.failed[0]
            raise SmqError(smq_code(failure.code), failure.message)
        rows = [
            {
                "ErrorCode": smq_code(f.code),
                "ErrorMessage": bounded(f.message),
                "ReceiptHandle": bounded(handles[int(f.entry_id)]),
            }
            for f in result.failed
        ]
        return 404, wire.list_document("Errors", "Error", rows), {}

    def _row(self, message: ReceivedMessage, *, with_handle: bool) -> dict[str, object]:
        first = message.attributes.get("ApproximateFirstReceiveTimestamp", "None")
        row: dict[str, object] = {
            "MessageId": message.message_id,
            "ReceiptHandle": message.receipt_handle if with_handle else None,
            "MessageBodyMD5": _md5(message.body),
            "MessageBody": message.body,
            "EnqueueTime": message.attributes["SentTimestamp"],
            "FirstDequeueTime": "0" if first == "None" else first,
            "DequeueCount": message.receive_count,
            "Priority": _PRIORITY,
            **properties_to_wire(message.message_attributes),
        }
        if with_handle:
            snapshot = self._engine.peek(message.queue, message.message_id)
            visible_at = snapshot.visible_at if snapshot else self._engine.clock.now()
            row["NextVisibleTime"] = self._wall_ms(visible_at)
        return row


def _outgoing(entry_id: str, item: ET.Element) -> OutgoingMessage:
    body = wire.text(item, "MessageBody")
    if not body:
        raise SmqError("InvalidArgument", "MessageBody is required.")
    delay = wire.text(item, "DelaySeconds")
    return OutgoingMessage(
        body=body,
        delay_s=_int(delay, "DelaySeconds"),
        entry_id=entry_id,
        message_attributes=properties_from_wire(item),
    )


def _int(value: str | None, name: str) -> int | None:
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise SmqError("InvalidArgument", f"{name} is not an integer.") from None


def _md5(body: str) -> str:
    return hashlib.md5(body.encode(), usedforsecurity=False).hexdigest().upper()
