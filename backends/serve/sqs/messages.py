"""Messages in SQS's JSON protocol: a send's entries in, received messages out, and the
attributes and MD5s of both.

Part of the operations (`backends.serve.sqs.service`), in the JSON protocol's spelling
(the query protocol's is mapped to it by `backends.serve.sqs.query`); the rules kept:

- MD5s are SQS's: `MD5OfBody` is the hex MD5 of the body's UTF-8. `MD5OfMessageAttributes`
  (and of system attributes) digests the attributes sorted by name, each as its name and its
  data type (each a 4-byte big-endian length, then UTF-8), one transport byte (1 for String
  and Number, 2 for Binary), then its value (length, then bytes).
- Message attributes: at most 10, names of `[A-Za-z0-9_.-]` (no `AWS.`/`Amazon.` prefix, no
  leading, trailing or doubled dot), data type String, Number or Binary with an optional
  `.label`, a value of the matching kind; list values are `UnsupportedOperation`.
"""

from __future__ import annotations

import base64
import binascii
import decimal
import hashlib
import re
import struct
from collections.abc import Collection, Mapping
from types import MappingProxyType
from typing import Any, Literal

from backends.serve.sqs.errors import SqsError
from backends.serve.sqs.members import integer, invalid, mapping, missing, string, string_list
from worker.rules import is_message_text
from worker.types import MessageAttribute, OutgoingMessage, ReceivedMessage

__all__ = [
    "AttributeFilter",
    "md5_of_body",
    "md5_of_message_attributes",
    "message_attribute_filter",
    "message_attributes_from_wire",
    "message_to_wire",
    "outgoing_message",
    "sent_to_wire",
    "system_attribute_filter",
    "system_attributes",
]

_ATTRIBUTE_NAME = re.compile(r"(?!\.)(?!.*\.\.)(?!.*\.\Z)[A-Za-z0-9_.-]{1,256}\Z")
_RESERVED_PREFIX = re.compile(r"(aws|amazon)\.", re.IGNORECASE)
_DATA_TYPE = re.compile(r"(String|Number|Binary)(\..{1,250})?\Z", re.DOTALL)
_MAX_ATTRIBUTES = 10


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
    if not isinstance(text, str) or not text or not is_message_text(text):
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


def system_attributes(params: Mapping[str, Any]) -> tuple[str, str] | None:
    """(AWSTraceHeader, MD5OfMessageSystemAttributes) of a send entry, None without one."""
    raw = mapping(params, "MessageSystemAttributes")
    if not raw:
        return None
    if set(raw) != {"AWSTraceHeader"}:
        raise invalid("MessageSystemAttributes", "Reason: only AWSTraceHeader is allowed.")
    attributes = message_attributes_from_wire(raw, "MessageSystemAttributes")
    trace = attributes["AWSTraceHeader"]
    if trace.data_type != "String" or trace.string_value is None:
        raise invalid("MessageSystemAttributes", "Reason: AWSTraceHeader is a String.")
    return trace.string_value, md5_of_message_attributes(attributes)


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
