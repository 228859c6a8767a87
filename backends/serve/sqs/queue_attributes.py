"""Queue attributes in SQS's JSON protocol: a request's settings in, a queue's attributes out.

Part of the operations (`backends.serve.sqs.service`), in the JSON protocol's spelling
(the query protocol's is mapped to it by `backends.serve.sqs.query`); the rules kept:

- Queue attributes the engine does not model (`ReceiveMessageWaitTimeSeconds`, which sets
  the default long poll, `Policy`, KMS and SSE settings) are kept as strings and reported
  back; unknown attribute names are `InvalidAttributeName`. `MaximumMessageSize` is the
  engine's (it refuses larger sends).
- CreateQueue on an existing queue compares only the attributes given (as SQS does).
- SSE-SQS is on by default, as on every queue SQS has created since 2022:
  `SqsManagedSseEnabled` reports `true` unless it was set to `false` or the queue has a
  `KmsMasterKeyId` (SSE-KMS instead); it takes `true` or `false` (`InvalidAttributeValue`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from backends.memory.catalog import UNCHANGED, QueueDescription, Unchanged
from backends.memory.dialects import SQS_DIALECT
from backends.serve.sqs.errors import SqsError
from worker.rules import queue_name_in_arn
from worker.types import QueueSpec
from worker.types import RedrivePolicy as Redrive

__all__ = [
    "QUEUE_ATTRIBUTE_NAMES",
    "QueueSettings",
    "check_same",
    "queue_attributes_to_wire",
    "queue_settings",
    "queue_spec",
]

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
        "FifoQueue", "ContentBasedDeduplication", "MaximumMessageSize",
    }
)  # fmt: skip
_KEPT = frozenset(
    {
        "Policy", "ReceiveMessageWaitTimeSeconds", "KmsMasterKeyId",
        "KmsDataKeyReusePeriodSeconds", "DeduplicationScope", "FifoThroughputLimit",
        "RedriveAllowPolicy", "SqsManagedSseEnabled",
    }
)  # fmt: skip
_KEPT_RANGES = {
    "ReceiveMessageWaitTimeSeconds": (0, SQS_DIALECT.max_wait_s),
}
_KEPT_BOOLEANS = frozenset({"SqsManagedSseEnabled"})
_SSE = "SqsManagedSseEnabled"


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
    max_message_bytes: int | None = None
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
    kept = {k: v for k, v in attributes.items() if k in _KEPT}
    for name in _KEPT_BOOLEANS & kept.keys():
        kept[name] = str(_optional_bool(attributes, name)).lower()
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
        max_message_bytes=_optional_int(attributes, "MaximumMessageSize"),
        kept=MappingProxyType(kept),
    )


def queue_spec(name: str, settings: QueueSettings) -> QueueSpec:
    """The queue to create from CreateQueue's name and attributes."""
    fields: dict[str, Any] = {
        "visibility_timeout_s": settings.visibility_timeout_s,
        "delay_s": settings.delay_s,
        "retention_s": settings.retention_s,
        "content_based_deduplication": settings.content_based_deduplication,
    }
    if settings.redrive is not UNCHANGED:
        fields["redrive"] = settings.redrive
    return QueueSpec(name, **{key: value for key, value in fields.items() if value is not None})


def check_same(current: QueueDescription, settings: QueueSettings, kept: Mapping[str, str]) -> None:
    """Refuse `settings` that differ from the queue's (`kept`: its unmodelled attributes)."""
    config = current.config
    given: dict[str, tuple[object, object]] = {
        "VisibilityTimeout": (settings.visibility_timeout_s, config.visibility_timeout_s),
        "DelaySeconds": (settings.delay_s, config.delay_s),
        "MessageRetentionPeriod": (settings.retention_s, config.retention_s),
        "ContentBasedDeduplication": (
            settings.content_based_deduplication,
            config.content_based_deduplication,
        ),
        "RedrivePolicy": (
            config.redrive if settings.redrive is UNCHANGED else settings.redrive,
            config.redrive,
        ),
        "MaximumMessageSize": (settings.max_message_bytes, config.max_message_bytes),
    }
    effective = {_SSE: _sse_default(kept), **kept}
    given.update({k: (v, effective.get(k)) for k, v in settings.kept.items()})
    for attribute, (wanted, actual) in given.items():
        if wanted is not None and wanted != actual:
            raise SqsError(
                "QueueAlreadyExists",
                f"A queue already exists with the same name and a different value for "
                f"attribute {attribute}",
            )


def _sse_default(kept: Mapping[str, str]) -> str:
    """SSE-SQS unless the queue is encrypted with a KMS key (SSE-KMS)."""
    return "false" if kept.get("KmsMasterKeyId") else "true"


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
    return Redrive(dead_letter_queue=queue_name_in_arn(target), max_receive_count=count)


def queue_attributes_to_wire(
    description: QueueDescription,
    kept: Mapping[str, str],
    arn: Callable[[str], str],
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
        "MaximumMessageSize": str(config.max_message_bytes),
        "MessageRetentionPeriod": str(config.retention_s),
        "DelaySeconds": str(config.delay_s),
        "ReceiveMessageWaitTimeSeconds": "0",
        _SSE: _sse_default(kept),
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
