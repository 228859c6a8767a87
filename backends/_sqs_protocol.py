"""SQS's JSON protocol, as pure functions: request members in, engine values out, and back.

No HTTP and no engine calls here (`backends.sqs_endpoint` does both); the rules kept:

- Members are read as SQS names them; a wrong JSON type is `InvalidParameterValue`, a missing
  required member `MissingParameter`.
- Errors keep the engine's codes (`worker.errors` carry SQS's legacy spelling, e.g.
  `AWS.SimpleQueueService.NonExistentQueue`). `render_error` gives SQS's JSON error:
  `{"__type": "com.amazonaws.sqs#<Shape>", "message": ...}`, the
  `x-amzn-query-error: <legacy code>;Sender|Receiver` header from which SDKs take the legacy
  code, and the status SQS's model gives the shape (400; 403 for OverLimit and
  PurgeQueueInProgress; 404 for ReceiptHandleIsInvalid and InvalidAddress; 500 for faults of
  this server).
- MD5s are SQS's: `MD5OfBody` is the hex MD5 of the body's UTF-8. `MD5OfMessageAttributes`
  (and of system attributes) digests the attributes sorted by name, each as its name and its
  data type (each a 4-byte big-endian length, then UTF-8), one transport byte (1 for String
  and Number, 2 for Binary), then its value (length, then bytes).
- Message attributes: at most 10, names of `[A-Za-z0-9_.-]` (no `AWS.`/`Amazon.` prefix, no
  leading, trailing or doubled dot), data type String, Number or Binary with an optional
  `.label`, a value of the matching kind; list values are `UnsupportedOperation`.
- Queue attributes the engine does not model (`ReceiveMessageWaitTimeSeconds`, which sets
  the default long poll, `MaximumMessageSize`, `Policy`, KMS and SSE settings) are kept as
  strings and reported back; unknown attribute names are `InvalidAttributeName`.
"""

from __future__ import annotations

import base64
import binascii
import decimal
import hashlib
import json
import re
import struct
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from backends._memory_engine import UNCHANGED, QueueDescription, Unchanged
from worker.errors import BackendError, FatalBackendError, OverLimit
from worker.types import EntryFailure, MessageAttribute, OutgoingMessage, ReceivedMessage
from worker.types import RedrivePolicy as Redrive

__all__ = [
    "QUEUE_ATTRIBUTE_NAMES",
    "AttributeFilter",
    "QueueSettings",
    "SqsError",
    "entries",
    "entry_failure_to_wire",
    "entry_id",
    "integer",
    "invalid",
    "mapping",
    "md5_of_body",
    "md5_of_message_attributes",
    "message_attribute_filter",
    "message_attributes_from_wire",
    "message_to_wire",
    "missing",
    "outgoing_message",
    "queue_attributes_to_wire",
    "queue_settings",
    "render_error",
    "required_string",
    "sent_to_wire",
    "string",
    "string_list",
    "system_attribute_filter",
    "system_attributes_md5",
]

_SQS = "AWS.SimpleQueueService."
#: Legacy code without prefix -> (shape of SQS's model, legacy code, HTTP status).
_ERRORS: Mapping[str, tuple[str, str, int]] = {
    "NonExistentQueue": ("QueueDoesNotExist", _SQS + "NonExistentQueue", 400),
    "QueueDoesNotExist": ("QueueDoesNotExist", _SQS + "NonExistentQueue", 400),
    "QueueAlreadyExists": ("QueueNameExists", "QueueAlreadyExists", 400),
    "QueueDeletedRecently": ("QueueDeletedRecently", _SQS + "QueueDeletedRecently", 400),
    "PurgeQueueInProgress": ("PurgeQueueInProgress", _SQS + "PurgeQueueInProgress", 403),
    "OverLimit": ("OverLimit", "OverLimit", 403),
    "ReceiptHandleIsInvalid": ("ReceiptHandleIsInvalid", "ReceiptHandleIsInvalid", 404),
    "MessageNotInflight": ("MessageNotInflight", _SQS + "MessageNotInflight", 400),
    "EmptyBatchRequest": ("EmptyBatchRequest", _SQS + "EmptyBatchRequest", 400),
    "InvalidBatchEntryId": ("InvalidBatchEntryId", _SQS + "InvalidBatchEntryId", 400),
    "BatchRequestTooLong": ("BatchRequestTooLong", _SQS + "BatchRequestTooLong", 400),
    "BatchEntryIdsNotDistinct": (
        "BatchEntryIdsNotDistinct",
        _SQS + "BatchEntryIdsNotDistinct",
        400,
    ),
    "TooManyEntriesInBatchRequest": (
        "TooManyEntriesInBatchRequest",
        _SQS + "TooManyEntriesInBatchRequest",
        400,
    ),
    "UnsupportedOperation": ("UnsupportedOperation", _SQS + "UnsupportedOperation", 400),
    "InvalidAddress": ("InvalidAddress", "InvalidAddress", 404),
    "InternalError": ("InternalError", "InternalError", 500),
}

_ATTRIBUTE_NAME = re.compile(r"(?!\.)(?!.*\.\.)(?!.*\.\Z)[A-Za-z0-9_.-]{1,256}\Z")
_RESERVED_PREFIX = re.compile(r"(aws|amazon)\.", re.IGNORECASE)
_DATA_TYPE = re.compile(r"(String|Number|Binary)(\..{1,250})?\Z", re.DOTALL)
# The characters SQS accepts in bodies and attribute values (XML 1.0's), negated.
_BAD_TEXT = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_MAX_ATTRIBUTES = 10

#: Every name GetQueueAttributes accepts (SQS's `QueueAttributeName`).
QUEUE_ATTRIBUTE_NAMES = frozenset(
    {
        "All", "Policy", "VisibilityTimeout", "MaximumMessageSize", "MessageRetentionPeriod",
        "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible",
        "CreatedTimestamp", "LastModifiedTimestamp", "QueueArn",
        "ApproximateNumberOfMessagesDelayed", "DelaySeconds", "ReceiveMessageWaitTimeSeconds",
        "RedrivePolicy", "FifoQueue", "ContentBasedDeduplication", "KmsMasterKeyId",
        "KmsDataKeyReusePeriodSeconds", "DeduplicationScope", "FifoThroughputLimit",
        "RedriveAllowPolicy", "SqsManagedSseEnabled",
    }
)  # fmt: skip
_MODELLED = frozenset(
    {
        "VisibilityTimeout", "DelaySeconds", "MessageRetentionPeriod", "RedrivePolicy",
        "FifoQueue", "ContentBasedDeduplication",
    }
)  # fmt: skip
_KEPT = frozenset(
    {
        "Policy", "MaximumMessageSize", "ReceiveMessageWaitTimeSeconds", "KmsMasterKeyId",
        "KmsDataKeyReusePeriodSeconds", "DeduplicationScope", "FifoThroughputLimit",
        "RedriveAllowPolicy", "SqsManagedSseEnabled",
    }
)  # fmt: skip
_KEPT_RANGES = {"ReceiveMessageWaitTimeSeconds": (0, 20), "MaximumMessageSize": (1024, 1048576)}


class SqsError(Exception):
    """A whole call refused: `code` in SQS's legacy spelling, `sender_fault` for 4xx."""

    def __init__(self, code: str, message: str, *, sender_fault: bool = True) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.sender_fault = sender_fault

    @classmethod
    def from_backend(cls, error: BackendError) -> SqsError:
        sender = isinstance(error, FatalBackendError | OverLimit)
        return cls(error.code or "InternalError", str(error), sender_fault=sender)


def render_error(error: SqsError) -> tuple[int, str, dict[str, str]]:
    """(HTTP status, `x-amzn-query-error` header, JSON body) for `error`."""
    bare = error.code.removeprefix(_SQS)
    shape, legacy, status = _ERRORS.get(
        bare, (bare, error.code, 400 if error.sender_fault else 500)
    )
    fault = "Sender" if status < 500 else "Receiver"
    return (
        status,
        f"{legacy};{fault}",
        {"__type": f"com.amazonaws.sqs#{shape}", "message": error.message},
    )


# -- reading members ------------------------------------------------------------------------


def invalid(member: str, reason: str) -> SqsError:
    return SqsError("InvalidParameterValue", f"Value for parameter {member} is invalid. {reason}")


def missing(member: str) -> SqsError:
    return SqsError("MissingParameter", f"The request must contain the parameter {member}.")


def string(params: Mapping[str, Any], member: str) -> str | None:
    value = params.get(member)
    if value is None or isinstance(value, str):
        return value
    raise invalid(member, "Reason: expected a string.")


def required_string(params: Mapping[str, Any], member: str) -> str:
    value = string(params, member)
    if value is None:
        raise missing(member)
    return value


def integer(params: Mapping[str, Any], member: str) -> int | None:
    value = params.get(member)
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise invalid(member, "Reason: expected an integer.")


def string_list(params: Mapping[str, Any], member: str) -> list[str]:
    value = params.get(member)
    if value is None:
        return []
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return value
    raise invalid(member, "Reason: expected a list of strings.")


def mapping(params: Mapping[str, Any], member: str) -> dict[str, Any]:
    value = params.get(member)
    if value is None:
        return {}
    if isinstance(value, dict):
        return value
    raise invalid(member, "Reason: expected a map.")


def entries(params: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    value = params.get("Entries")
    if value is None:
        return []
    if isinstance(value, list) and all(isinstance(item, dict) for item in value):
        return value
    raise invalid("Entries", "Reason: expected a list of entries.")


def entry_id(entry: Mapping[str, Any]) -> str:
    # A missing or odd id is left for the engine's batch check (InvalidBatchEntryId).
    value = entry.get("Id")
    return value if isinstance(value, str) else ""


def entry_failure_to_wire(failure: EntryFailure) -> dict[str, Any]:
    return {
        "Id": failure.entry_id,
        "SenderFault": failure.sender_fault,
        "Code": failure.code,
        "Message": failure.message,
    }


# -- message attributes and MD5s ------------------------------------------------------------


def md5_of_body(body: str) -> str:
    return hashlib.md5(body.encode(), usedforsecurity=False).hexdigest()


def md5_of_message_attributes(attributes: Mapping[str, MessageAttribute]) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    for name in sorted(attributes):
        attribute = attributes[name]
        for text in (name, attribute.data_type):
            raw = text.encode()
            digest.update(struct.pack(">I", len(raw)) + raw)
        if attribute.data_type.startswith("Binary"):
            value = attribute.binary_value or b""
            digest.update(b"\x02" + struct.pack(">I", len(value)) + value)
        else:
            raw = (attribute.string_value or "").encode()
            digest.update(b"\x01" + struct.pack(">I", len(raw)) + raw)
    return digest.hexdigest()


def message_attributes_from_wire(
    raw: Mapping[str, Any], member: str = "MessageAttributes"
) -> Mapping[str, MessageAttribute]:
    if len(raw) > _MAX_ATTRIBUTES:
        raise invalid(member, f"Reason: at most {_MAX_ATTRIBUTES} attributes.")
    attributes: dict[str, MessageAttribute] = {}
    for name, value in raw.items():
        if not _ATTRIBUTE_NAME.match(name) or _RESERVED_PREFIX.match(name):
            raise invalid(member, f"Reason: attribute name {name!r} is not allowed.")
        if not isinstance(value, dict):
            raise invalid(member, f"Reason: attribute {name!r} must be a map.")
        attributes[name] = _attribute_from_wire(name, value)
    return MappingProxyType(attributes)


def _attribute_from_wire(name: str, raw: Mapping[str, Any]) -> MessageAttribute:
    member = f"MessageAttribute {name!r}"
    if raw.get("StringListValues") or raw.get("BinaryListValues"):
        raise SqsError("UnsupportedOperation", "Message attribute list values are not supported.")
    data_type = raw.get("DataType")
    if not isinstance(data_type, str) or not _DATA_TYPE.match(data_type):
        raise invalid(member, "Reason: DataType must be String, Number or Binary[.label].")
    if data_type.startswith("Binary"):
        encoded = raw.get("BinaryValue")
        if not isinstance(encoded, str) or not encoded:
            raise invalid(member, "Reason: a Binary attribute needs a BinaryValue.")
        try:
            value = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            raise invalid(member, "Reason: BinaryValue is not base64.") from None
        return MessageAttribute(data_type, binary_value=value)
    text = raw.get("StringValue")
    if not isinstance(text, str) or not text or _BAD_TEXT.search(text):
        raise invalid(member, "Reason: a String or Number attribute needs a valid StringValue.")
    if data_type.startswith("Number") and not _is_number(text):
        raise invalid(member, "Reason: StringValue is not a number.")
    return MessageAttribute(data_type, string_value=text)


def _is_number(text: str) -> bool:
    try:
        return decimal.Decimal(text).is_finite()
    except decimal.InvalidOperation:
        return False


def _attribute_to_wire(attribute: MessageAttribute) -> dict[str, Any]:
    if attribute.binary_value is not None:
        encoded = base64.b64encode(attribute.binary_value).decode()
        return {"DataType": attribute.data_type, "BinaryValue": encoded}
    return {"DataType": attribute.data_type, "StringValue": attribute.string_value}


def system_attributes_md5(params: Mapping[str, Any]) -> str | None:
    """MD5OfMessageSystemAttributes of a send entry (AWSTraceHeader is checked, not kept)."""
    raw = mapping(params, "MessageSystemAttributes")
    if not raw:
        return None
    if set(raw) != {"AWSTraceHeader"}:
        raise invalid("MessageSystemAttributes", "Reason: only AWSTraceHeader is allowed.")
    attributes = message_attributes_from_wire(raw, "MessageSystemAttributes")
    return md5_of_message_attributes(attributes)


# -- messages -------------------------------------------------------------------------------


def outgoing_message(params: Mapping[str, Any], entry: str = "0") -> OutgoingMessage:
    """The engine's message for a SendMessage request or one SendMessageBatch entry."""
    body = params.get("MessageBody")
    if not isinstance(body, str):
        raise missing("MessageBody") if body is None else invalid("MessageBody", "")
    attributes = message_attributes_from_wire(mapping(params, "MessageAttributes"))
    return OutgoingMessage(
        body=body,
        entry_id=entry,
        delay_s=integer(params, "DelaySeconds"),
        message_attributes=attributes,
        group_id=string(params, "MessageGroupId"),
        deduplication_id=string(params, "MessageDeduplicationId"),
    )


def sent_to_wire(
    message: OutgoingMessage, message_id: str, sequence_number: str | None
) -> dict[str, Any]:
    wire: dict[str, Any] = {"MessageId": message_id, "MD5OfMessageBody": md5_of_body(message.body)}
    if message.message_attributes:
        wire["MD5OfMessageAttributes"] = md5_of_message_attributes(message.message_attributes)
    if sequence_number is not None:
        wire["SequenceNumber"] = sequence_number
    return wire


AttributeFilter = Literal["all"] | Collection[str]


def system_attribute_filter(params: Mapping[str, Any]) -> AttributeFilter:
    names = string_list(params, "MessageSystemAttributeNames") + string_list(
        params, "AttributeNames"
    )
    return "all" if "All" in names else frozenset(names)


def message_attribute_filter(params: Mapping[str, Any]) -> AttributeFilter:
    names = string_list(params, "MessageAttributeNames")
    return "all" if "All" in names or ".*" in names else frozenset(names)


def message_to_wire(
    message: ReceivedMessage, system: AttributeFilter, user: AttributeFilter
) -> dict[str, Any]:
    wire: dict[str, Any] = {
        "MessageId": message.message_id,
        "ReceiptHandle": message.receipt_handle,
        "MD5OfBody": md5_of_body(message.body),
        "Body": message.body,
    }
    if system:
        chosen = (
            dict(message.attributes)
            if system == "all"
            else {name: value for name, value in message.attributes.items() if name in system}
        )
        if chosen:
            wire["Attributes"] = chosen
    if user and message.message_attributes:
        picked = _pick_attributes(message.message_attributes, user)
        if picked:
            wire["MD5OfMessageAttributes"] = md5_of_message_attributes(picked)
            wire["MessageAttributes"] = {k: _attribute_to_wire(v) for k, v in picked.items()}
    return wire


def _pick_attributes(
    attributes: Mapping[str, MessageAttribute], names: AttributeFilter
) -> Mapping[str, MessageAttribute]:
    if names == "all":
        return attributes
    prefixes = tuple(name[:-1] for name in names if name.endswith(".*"))
    return {
        name: value
        for name, value in attributes.items()
        if name in names or (prefixes and name.startswith(prefixes))
    }


# -- queue attributes -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueSettings:
    """Queue attributes of a CreateQueue or SetQueueAttributes request; None: not given."""

    visibility_timeout_s: int | None = None
    delay_s: int | None = None
    retention_s: int | None = None
    #: UNCHANGED: not given; None: removed (an empty RedrivePolicy).
    redrive: Redrive | Unchanged | None = UNCHANGED
    fifo: bool | None = None
    content_based_deduplication: bool | None = None
    #: Attributes kept but not modelled, as given.
    kept: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))


def queue_settings(attributes: Mapping[str, Any]) -> QueueSettings:
    for name, value in attributes.items():
        if name not in _MODELLED and name not in _KEPT:
            raise SqsError("InvalidAttributeName", f"Unknown Attribute {name}.")
        if not isinstance(value, str):
            raise SqsError("InvalidAttributeValue", f"Invalid value for the parameter {name}.")
    for name, (low, high) in _KEPT_RANGES.items():
        if name in attributes and not low <= _attribute_int(attributes, name) <= high:
            raise SqsError("InvalidAttributeValue", f"Invalid value for the parameter {name}.")
    redrive: Redrive | Unchanged | None = UNCHANGED
    if "RedrivePolicy" in attributes:
        redrive = _redrive_from_wire(attributes["RedrivePolicy"])
    return QueueSettings(
        visibility_timeout_s=_optional_int(attributes, "VisibilityTimeout"),
        delay_s=_optional_int(attributes, "DelaySeconds"),
        retention_s=_optional_int(attributes, "MessageRetentionPeriod"),
        redrive=redrive,
        fifo=_optional_bool(attributes, "FifoQueue"),
        content_based_deduplication=_optional_bool(attributes, "ContentBasedDeduplication"),
        kept=MappingProxyType({k: v for k, v in attributes.items() if k in _KEPT}),
    )


def _attribute_int(attributes: Mapping[str, str], name: str) -> int:
    try:
        return int(attributes[name])
    except ValueError:
        raise SqsError(
            "InvalidAttributeValue", f"Invalid value for the parameter {name}."
        ) from None


def _optional_int(attributes: Mapping[str, str], name: str) -> int | None:
    return _attribute_int(attributes, name) if name in attributes else None


def _optional_bool(attributes: Mapping[str, str], name: str) -> bool | None:
    value = attributes.get(name)
    if value is None:
        return None
    if value.lower() not in ("true", "false"):
        raise SqsError("InvalidAttributeValue", f"Invalid value for the parameter {name}.")
    return value.lower() == "true"


def _redrive_from_wire(raw: str) -> Redrive | None:
    if not raw:
        return None
    reason = "Invalid value for the parameter RedrivePolicy. Reason: "
    try:
        policy = json.loads(raw)
        target = policy["deadLetterTargetArn"]
        count = int(policy["maxReceiveCount"])
    except (ValueError, TypeError, KeyError):
        raise SqsError(
            "InvalidParameterValue", reason + "deadLetterTargetArn and maxReceiveCount needed."
        ) from None
    if not isinstance(target, str) or not target.startswith("arn:"):
        raise SqsError("InvalidParameterValue", reason + "deadLetterTargetArn is not an ARN.")
    return Redrive(dead_letter_queue=target.rsplit(":", 1)[-1], max_receive_count=count)


def queue_attributes_to_wire(
    description: QueueDescription,
    kept: Mapping[str, str],
    arn: Callable[[str], str],
    max_message_bytes: int,
) -> dict[str, str]:
    """Every attribute GetQueueAttributes(All) reports for this queue."""
    config, counts = description.config, description.counts
    attributes = {
        "QueueArn": arn(config.name),
        "ApproximateNumberOfMessages": str(counts.visible),
        "ApproximateNumberOfMessagesNotVisible": str(counts.in_flight),
        "ApproximateNumberOfMessagesDelayed": str(counts.delayed),
        "CreatedTimestamp": str(description.created_timestamp),
        "LastModifiedTimestamp": str(description.last_modified_timestamp),
        "VisibilityTimeout": str(config.visibility_timeout_s),
        "MaximumMessageSize": str(max_message_bytes),
        "MessageRetentionPeriod": str(config.retention_s),
        "DelaySeconds": str(config.delay_s),
        "ReceiveMessageWaitTimeSeconds": "0",
        "SqsManagedSseEnabled": "false",
    }
    if config.redrive is not None:
        policy = {
            "deadLetterTargetArn": arn(config.redrive.dead_letter_queue),
            "maxReceiveCount": config.redrive.max_receive_count,
        }
        attributes["RedrivePolicy"] = json.dumps(policy, separators=(",", ":"))
    if config.fifo:
        attributes["FifoQueue"] = "true"
        attributes["ContentBasedDeduplication"] = str(config.content_based_deduplication).lower()
        attributes["DeduplicationScope"] = "queue"
        attributes["FifoThroughputLimit"] = "perQueue"
    attributes.update(kept)
    return attributes
