"""`SystemAttributes`: a received message's system attributes, spelled as SQS spells them,
each written out only when read.

A receive hands every message a mapping of four to eight attributes that most handlers never
read. Kept as a dict of strings behind a `MappingProxyType`, that is about 460 bytes per
message held; kept as the numbers they are made from, about 100, at up to 100,000 messages in
flight. It is read-only, like the proxy it replaces, and equal to the dict it stands for.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, overload

__all__ = ["SystemAttributes"]

_SENDER_ID = "000000000000"


class SystemAttributes(Mapping[str, str]):
    """`SenderId`, `SentTimestamp`, `ApproximateReceiveCount` and
    `ApproximateFirstReceiveTimestamp` always; `MessageGroupId` for a group; on a FIFO queue
    `MessageDeduplicationId` and `SequenceNumber`; `AWSTraceHeader` and
    `DeadLetterQueueSourceArn` when the message has them."""

    __slots__ = (
        "_dead_letter_source_arn",
        "_deduplication_id",
        "_fifo",
        "_first_receive_ms",
        "_group_id",
        "_receive_count",
        "_sent_ms",
        "_sequence_number",
        "_trace_header",
    )

    def __init__(
        self,
        *,
        sent_ms: int,
        receive_count: int,
        first_receive_ms: int | None,
        group_id: str | None = None,
        fifo: bool = False,
        deduplication_id: str | None = None,
        sequence_number: str | None = None,
        trace_header: str | None = None,
        dead_letter_source_arn: str | None = None,
    ) -> None:
        self._sent_ms = sent_ms
        self._receive_count = receive_count
        self._first_receive_ms = first_receive_ms
        self._group_id = group_id
        self._fifo = fifo
        self._deduplication_id = deduplication_id
        self._sequence_number = sequence_number
        self._trace_header = trace_header
        self._dead_letter_source_arn = dead_letter_source_arn

    def _value(self, key: str) -> str | None:
        """The attribute's value, None when this message has no such attribute."""
        if key == "MessageGroupId":  # read for every message: first
            return self._group_id
        if key == "SentTimestamp":
            return str(self._sent_ms)
        if key == "ApproximateReceiveCount":
            return str(self._receive_count)
        if key == "ApproximateFirstReceiveTimestamp":
            return str(self._first_receive_ms)
        if key == "SenderId":
            return _SENDER_ID
        if key == "MessageDeduplicationId":
            return str(self._deduplication_id) if self._fifo else None
        if key == "SequenceNumber":
            return str(self._sequence_number) if self._fifo else None
        if key == "AWSTraceHeader":
            return self._trace_header
        if key == "DeadLetterQueueSourceArn":
            return self._dead_letter_source_arn
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
        keys = ["SenderId", "SentTimestamp", "ApproximateReceiveCount"]
        keys.append("ApproximateFirstReceiveTimestamp")
        if self._group_id is not None:
            keys.append("MessageGroupId")
        if self._fifo:
            keys += ["MessageDeduplicationId", "SequenceNumber"]
        if self._trace_header is not None:
            keys.append("AWSTraceHeader")
        if self._dead_letter_source_arn is not None:
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
