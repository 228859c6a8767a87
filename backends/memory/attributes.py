"""`SystemAttributes`: a received message's system attributes, spelled as SQS spells them,
each written out only when read.

A receive hands every message a mapping of four to eight attributes that most handlers never
read. Kept as a dict of strings behind a `MappingProxyType`, that is about 460 bytes per
message held; kept as the stored message they are read from, 56, at up to 100,000 messages
in flight. It is read-only, like the proxy it replaces, and equal to the dict it stands for.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Protocol, overload

__all__ = ["SystemAttributes"]

_SENDER_ID = "000000000000"


class _Sent(Protocol):
    """What the attributes are read from: the engine's stored message (`Message`). Its
    fields below never change once the message has been received; its receive count does,
    so that is copied."""

    @property
    def sent_timestamp_ms(self) -> int: ...
    @property
    def first_receive_ms(self) -> int | None: ...
    @property
    def group_id(self) -> str | None: ...
    @property
    def deduplication_id(self) -> str | None: ...
    @property
    def sequence_number(self) -> str | None: ...
    @property
    def trace_header(self) -> str | None: ...
    @property
    def dead_letter_source_arn(self) -> str | None: ...


class SystemAttributes(Mapping[str, str]):
    """`SenderId`, `SentTimestamp`, `ApproximateReceiveCount` and
    `ApproximateFirstReceiveTimestamp` always; `MessageGroupId` for a group; on a FIFO queue
    `MessageDeduplicationId` and `SequenceNumber`; `AWSTraceHeader` and
    `DeadLetterQueueSourceArn` when the message has them.

    Three fields, not one per attribute: the stored message (what it holds for the others
    is fixed from its first receive on), the receive count as of this receive, and whether
    the queue is FIFO.
    """

    __slots__ = ("_fifo", "_message", "_receive_count")

    def __init__(self, message: _Sent, *, receive_count: int, fifo: bool = False) -> None:
        self._message = message
        self._receive_count = receive_count
        self._fifo = fifo

    def _value(self, key: str) -> str | None:
        """The attribute's value, None when this message has no such attribute."""
        message = self._message
        if key == "MessageGroupId":  # read for every message: first
            return message.group_id
        if key == "SentTimestamp":
            return str(message.sent_timestamp_ms)
        if key == "ApproximateReceiveCount":
            return str(self._receive_count)
        if key == "ApproximateFirstReceiveTimestamp":
            return str(message.first_receive_ms)
        if key == "SenderId":
            return _SENDER_ID
        if key == "MessageDeduplicationId":
            return str(message.deduplication_id) if self._fifo else None
        if key == "SequenceNumber":
            return str(message.sequence_number) if self._fifo else None
        if key == "AWSTraceHeader":
            return message.trace_header
        if key == "DeadLetterQueueSourceArn":
            return message.dead_letter_source_arn
        return None

    def __getitem__(self, key: str) -> str:
        value = self._value(key)
        if value is None:
            raise KeyError(key)
        return value

    @overload
    def get(self, key: str, /) -> str | None: ...
    @overload
    def get(self, key: str, /, default: str) -> str: ...
    @overload
    def get(self, key: str, /, default: Any) -> Any: ...
    def get(self, key: str, /, default: Any = None) -> Any:
        value = self._value(key)
        return default if value is None else value

    def _keys(self) -> list[str]:
        message = self._message
        keys = ["SenderId", "SentTimestamp", "ApproximateReceiveCount"]
        keys.append("ApproximateFirstReceiveTimestamp")
        if message.group_id is not None:
            keys.append("MessageGroupId")
        if self._fifo:
            keys += ["MessageDeduplicationId", "SequenceNumber"]
        if message.trace_header is not None:
            keys.append("AWSTraceHeader")
        if message.dead_letter_source_arn is not None:
            keys.append("DeadLetterQueueSourceArn")
        return keys

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys())

    def __len__(self) -> int:
        return len(self._keys())

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self._value(key) is not None

    def __repr__(self) -> str:
        return repr(dict(self))
