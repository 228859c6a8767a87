"""One stored message of the in-memory engine, and the two views of it that leave the engine:
`MessageSnapshot` (a test hook) and `received_message` (what a receive returns).

The queue that holds a `Message` (`backends.memory.queue`) keeps the rules of its states.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from backends.memory.attributes import SystemAttributes
from backends.memory.config import QueueConfig
from worker.types import MessageAttribute, ReceivedMessage

__all__ = ["Message", "MessageSnapshot", "MessageState", "received_message", "snapshot"]


class MessageState(StrEnum):
    DELAYED = "delayed"
    VISIBLE = "visible"
    IN_FLIGHT = "in_flight"


@dataclass(slots=True, eq=False, kw_only=True)
class Message:
    """One stored message. Mutable: the queue that holds it updates it in place."""

    message_id: str
    body: str
    message_attributes: Mapping[str, MessageAttribute]
    #: Monotonic time of the (original) send; retention counts from here.
    sent_at: float
    sent_timestamp_ms: int
    group_id: str | None = None
    deduplication_id: str | None = None
    sequence_number: str | None = None
    state: MessageState = MessageState.DELAYED
    visible_at: float = 0.0
    receive_count: int = 0
    first_receive_ms: int | None = None
    #: Monotonic time of the latest receive; the 12 h cap counts from here.
    received_at: float = 0.0
    receipt_handle: str | None = None
    generation: int = 0
    #: The AWSTraceHeader system attribute given at the send.
    trace_header: str | None = None
    #: ARN of the queue this message was dead-lettered from (DeadLetterQueueSourceArn).
    dead_letter_source_arn: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageSnapshot:
    """Test hook: the state of one message, as `MemoryEngine.peek` sees it."""

    message_id: str
    body: str
    state: MessageState
    receive_count: int
    visible_at: float
    received_at: float | None
    receipt_handle: str | None
    group_id: str | None


def snapshot(message: Message) -> MessageSnapshot:
    return MessageSnapshot(
        message_id=message.message_id,
        body=message.body,
        state=message.state,
        receive_count=message.receive_count,
        visible_at=message.visible_at,
        received_at=message.received_at if message.receive_count else None,
        receipt_handle=message.receipt_handle,
        group_id=message.group_id,
    )


def received_message(config: QueueConfig, message: Message) -> ReceivedMessage:
    """The message as a receive returns it, system attributes spelled as SQS spells them."""
    attributes = SystemAttributes(message, receive_count=message.receive_count, fifo=config.fifo)
    assert message.receipt_handle is not None, "only a received message is returned"
    return ReceivedMessage(
        queue=config.name,
        message_id=message.message_id,
        receipt_handle=message.receipt_handle,
        body=message.body,
        receive_count=message.receive_count,
        attributes=attributes,
        message_attributes=message.message_attributes,
    )
