"""Amazon SQS's shapes as aiobotocore takes and gives them, to and from `worker.types`.

Pure conversions: no client and no I/O here (`backends.sqs` makes the calls). Rules this
module keeps:
- A batch call's per-entry failures come back as `EntryFailure` values.
- A queue's name in an ARN is read by `worker.rules`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from worker.rules import SQS_IN_FLIGHT_LIMIT, queue_name_in_arn
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

__all__ = [
    "batch_result",
    "change_entries",
    "delete_entries",
    "message_from_wire",
    "queue_info_from_wire",
    "redrive_to_wire",
    "send_entry",
]


def batch_result(response: Mapping[str, Any], *, with_ids: bool = False) -> BatchResult:
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


def message_from_wire(queue: str, raw: Mapping[str, Any]) -> ReceivedMessage:
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


def send_entry(message: OutgoingMessage) -> dict[str, Any]:
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
    if message.trace_header is not None:
        entry["MessageSystemAttributes"] = {
            "AWSTraceHeader": {"DataType": "String", "StringValue": message.trace_header}
        }
    return entry


def _redrive_from_wire(raw: str | None) -> RedrivePolicy | None:
    if not raw:
        return None
    policy = json.loads(raw)
    return RedrivePolicy(
        dead_letter_queue=queue_name_in_arn(str(policy["deadLetterTargetArn"])),
        max_receive_count=int(policy["maxReceiveCount"]),
    )


def queue_info_from_wire(name: str, url: str, attributes: Mapping[str, str]) -> QueueInfo:
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
        in_flight_limit=SQS_IN_FLIGHT_LIMIT,
    )


def redrive_to_wire(redrive: RedrivePolicy, dead_letter_queue_arn: str) -> str:
    return json.dumps(
        {"deadLetterTargetArn": dead_letter_queue_arn, "maxReceiveCount": redrive.max_receive_count}
    )


def change_entries(entries: Sequence[VisibilityChange]) -> list[dict[str, Any]]:
    return [
        {
            "Id": entry.entry_id,
            "ReceiptHandle": entry.receipt_handle,
            "VisibilityTimeout": entry.visibility_s,
        }
        for entry in entries
    ]


def delete_entries(entries: Sequence[Deletion]) -> list[dict[str, Any]]:
    return [{"Id": entry.entry_id, "ReceiptHandle": entry.receipt_handle} for entry in entries]
