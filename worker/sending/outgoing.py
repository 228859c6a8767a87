"""Turning what a caller wants to send into checked `OutgoingMessage` values: pure, no I/O.

Every message of a call is checked before the first request goes out, so a bad one in
position 500 raises `MessageRejected` having sent nothing. The checks are SQS's own:
a body (and its attributes) over the size limit, a FIFO queue without a group id, a
per-message delay on a FIFO queue or outside 0-900 s, more than 10 attributes, an
attribute of a type with no SQS data type.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from types import MappingProxyType
from typing import Any, TypeAlias

from worker.envelope.codecs import PayloadError, encode
from worker.errors import MessageRejected
from worker.rules import queue_name
from worker.types import MessageAttribute, OutgoingMessage

__all__ = ["AttributeValue", "Outgoing", "batches", "prepare", "size_of"]

AttributeValue: TypeAlias = str | int | float | Decimal | bytes | MessageAttribute

MAX_ATTRIBUTES = 10
MAX_DELAY_S = 900


@dataclass(frozen=True, slots=True, kw_only=True)
class Outgoing:
    """One message for `Producer.send_many`: a body (encoded like typed handlers decode it:
    str as is, bytes as base64, dataclasses and pydantic models and the rest as JSON)."""

    body: Any
    #: Seconds before it can be received (standard queues only); None: the queue's delay.
    delay_s: int | None = None
    attributes: Mapping[str, AttributeValue] = field(default_factory=lambda: MappingProxyType({}))
    #: FIFO queues: required. Standard queues: optional, the tenant of an SQS fair queue.
    group_id: str | None = None
    #: FIFO queues: None leaves it to the queue's content-based deduplication, unless the
    #: producer computes it (`content_deduplication=True`).
    deduplication_id: str | None = None


def prepare(
    queue: str,
    index: int,
    item: Outgoing,
    *,
    max_bytes: int,
    content_deduplication: bool,
    extra: Mapping[str, MessageAttribute] = MappingProxyType({}),
    reserved_attributes: int = 0,
    trace_header: str | None = None,
) -> OutgoingMessage:
    """The checked wire value of `item`; raises `MessageRejected` naming its index."""
    try:
        body = encode(item.body)
    except PayloadError as error:
        raise MessageRejected(index, error.reason) from None
    if not body:
        raise MessageRejected(index, "an empty body: SQS requires one")
    attributes = {name: _attribute(index, name, value) for name, value in item.attributes.items()}
    attributes.update(extra)
    if len(attributes) > MAX_ATTRIBUTES - reserved_attributes:
        raise MessageRejected(
            index,
            f"{len(attributes)} message attributes, "
            f"{MAX_ATTRIBUTES - reserved_attributes} allowed here",
        )
    fifo = queue_name(queue).endswith(".fifo")
    dedup = item.deduplication_id
    if fifo:
        if not item.group_id:
            raise MessageRejected(index, f"{queue!r} is a FIFO queue: a group_id is required")
        if item.delay_s:
            raise MessageRejected(index, "FIFO queues take no per-message delay_s")
        if dedup is None and content_deduplication:
            dedup = hashlib.sha256(body.encode()).hexdigest()
    elif dedup is not None:  # (a group id on a standard queue names a fair-queue tenant)
        raise MessageRejected(index, "deduplication_id is for FIFO queues")
    if item.delay_s is not None and not 0 <= item.delay_s <= MAX_DELAY_S:
        raise MessageRejected(index, f"delay_s={item.delay_s!r}: must be 0-{MAX_DELAY_S}")
    message = OutgoingMessage(
        body=body,
        delay_s=item.delay_s,
        message_attributes=MappingProxyType(attributes),
        group_id=item.group_id,
        deduplication_id=dedup,
        trace_header=trace_header,
    )
    size = size_of(message)
    if size > max_bytes:
        raise MessageRejected(
            index, f"{size} bytes with its attributes, over the limit of {max_bytes}"
        )
    return message


def size_of(message: OutgoingMessage) -> int:
    """Bytes SQS counts against its limit: the body and every attribute's name, type, value."""
    size = len(message.body.encode("utf-8", "surrogatepass"))
    for name, attribute in message.message_attributes.items():
        size += len(name.encode()) + len(attribute.data_type.encode())
        size += len((attribute.string_value or "").encode()) + len(attribute.binary_value or b"")
    return size


def batches(
    messages: Sequence[OutgoingMessage], *, max_entries: int, max_bytes: int
) -> list[list[int]]:
    """Indexes of `messages` in send calls: full batches, each within the byte limit."""
    chunks: list[list[int]] = []
    current: list[int] = []
    current_bytes = 0
    for index, message in enumerate(messages):
        size = size_of(message)
        if current and (len(current) == max_entries or current_bytes + size > max_bytes):
            chunks.append(current)
            current, current_bytes = [], 0
        current.append(index)
        current_bytes += size
    if current:
        chunks.append(current)
    return chunks


def _attribute(index: int, name: str, value: object) -> MessageAttribute:
    if isinstance(value, MessageAttribute):
        return value
    if isinstance(value, str):
        return MessageAttribute("String", string_value=value)
    if isinstance(value, bytes):
        return MessageAttribute("Binary", binary_value=value)
    if isinstance(value, int | float | Decimal) and not isinstance(value, bool):
        if isinstance(value, float) and not math.isfinite(value):
            raise MessageRejected(index, f"attribute {name!r}: {value!r} is not a finite number")
        return MessageAttribute("Number", string_value=str(value))
    raise MessageRejected(
        index,
        f"attribute {name!r}: a {type(value).__name__} has no SQS data type "
        "(str, int, float, Decimal, bytes or MessageAttribute)",
    )
