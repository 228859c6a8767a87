"""A received message's system attributes, made on read, equal the dict SQS would send."""

from __future__ import annotations

import pytest

from backends.memory.attributes import SystemAttributes
from backends.memory.message import Message


def _stored(sent_ms: int, first_receive_ms: int, **fields: str) -> Message:
    return Message(
        message_id="m1",
        body="{}",
        message_attributes={},
        sent_at=0.0,
        sent_timestamp_ms=sent_ms,
        first_receive_ms=first_receive_ms,
        **fields,  # type: ignore[arg-type]
    )


def test_a_standard_queue_message() -> None:
    attributes = SystemAttributes(_stored(1_700_000_000_123, 1_700_000_000_456), receive_count=2)
    assert attributes == {
        "SenderId": "000000000000",
        "SentTimestamp": "1700000000123",
        "ApproximateReceiveCount": "2",
        "ApproximateFirstReceiveTimestamp": "1700000000456",
    }
    assert list(attributes) == [
        "SenderId",
        "SentTimestamp",
        "ApproximateReceiveCount",
        "ApproximateFirstReceiveTimestamp",
    ]
    assert len(attributes) == 4
    assert attributes.get("MessageGroupId") is None
    assert attributes.get("MessageGroupId", "none") == "none"
    assert "SequenceNumber" not in attributes
    with pytest.raises(KeyError, match="AWSTraceHeader"):
        attributes["AWSTraceHeader"]


def test_a_fifo_message_with_a_trace_from_a_dead_letter_queue() -> None:
    stored = _stored(
        5,
        6,
        group_id="g1",
        deduplication_id="d1",
        sequence_number="18",
        trace_header="Root=1-5759e988-bd862e3fe1be46a994272793",
        dead_letter_source_arn="arn:aws:sqs:us-east-1:000000000000:jobs",
    )
    attributes = SystemAttributes(stored, receive_count=1, fifo=True)
    assert dict(attributes) == {
        "SenderId": "000000000000",
        "SentTimestamp": "5",
        "ApproximateReceiveCount": "1",
        "ApproximateFirstReceiveTimestamp": "6",
        "MessageGroupId": "g1",
        "MessageDeduplicationId": "d1",
        "SequenceNumber": "18",
        "AWSTraceHeader": "Root=1-5759e988-bd862e3fe1be46a994272793",
        "DeadLetterQueueSourceArn": "arn:aws:sqs:us-east-1:000000000000:jobs",
    }
    assert attributes["MessageGroupId"] == "g1"
    assert repr(attributes).startswith("{'SenderId': '000000000000'")


def test_read_only() -> None:
    attributes = SystemAttributes(_stored(5, 6), receive_count=1)
    with pytest.raises(TypeError):
        attributes["SenderId"] = "x"  # type: ignore[index]
    with pytest.raises(AttributeError):
        attributes.extra = 1  # type: ignore[attr-defined]
