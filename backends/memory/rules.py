"""What a request to the in-memory engine must be, and `Dialect`, the numbers in which
services differ. Pure checks: no queue state, no clock.

The rules, as SQS keeps them and as these checks enforce them (strict where SQS is strict). A
refused call raises `FatalBackendError` with SQS's code; a refused entry is a (code, reason)
that the engine reports as an `EntryFailure`.

Queue names, entry ids, the characters of a body and the spelling of error codes follow
`worker.rules`, which the registry and the SQS client keep too.

Queues
- A name is a queue name by `worker.rules`, a `.fifo` suffix making a FIFO queue.
- A redrive policy's maxReceiveCount is 1-1,000.

Messages
- Visibility is 0-43,200 s (`InvalidParameterValue`): a receive fails whole, a visibility
  change per entry.
- FIFO: MessageGroupId is required (`MissingParameter`), a per-message delay is refused, a
  deduplication id (explicit, or by ContentBasedDeduplication) is required. Standard queues
  refuse a deduplication id.
- A body is 1 or more characters SQS accepts (`InvalidMessageContents` otherwise). A message
  (body and attributes) larger than its queue's MaximumMessageSize is refused
  (`InvalidParameterValue`, "Message must be shorter than N bytes", as SQS words it); a batch
  whose total passes the dialect's largest fails whole (`BatchRequestTooLong`), but a single
  SendMessage is judged as one entry (`MemoryEngine.send_problem`), as SQS judges it.

Receives
- A FIFO receive's ReceiveRequestAttemptId is 1-128 characters of ASCII letters, digits and
  punctuation (`InvalidParameterValue`), as SQS documents it; standard queues ignore it.

Batches
- Send, change-visibility and delete take 1-10 entries with distinct, valid ids, else the
  whole call fails (`FatalBackendError`, SQS's code). A receive takes 1-10.

`Dialect` (`backends.memory.dialects`) holds what differs between services (SQS, SMQ) and
these checks read every number from it: batch sizes, the visibility range (SMQ: 1-43,200 s,
for queues too), and whether FIFO queues exist (not on SMQ).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import NoReturn

from backends.memory.config import QueueConfig
from backends.memory.dialects import SQS_DIALECT, Dialect
from worker.errors import FatalBackendError
from worker.rules import (
    ENTRY_ID_RULE,
    QUEUE_NAME_RULE,
    is_entry_id,
    is_message_text,
    is_queue_name,
    legacy_code,
)
from worker.types import OutgoingMessage

__all__ = [
    "SQS_DIALECT",
    "Dialect",
    "attempt_id_problem",
    "check_attributes",
    "check_batch",
    "check_queue_name",
    "check_receive",
    "check_send_batch",
    "fail",
    "send_problem",
    "visibility_problem",
]

_FIFO_ID = re.compile(r"[!-~]{1,128}\Z")


def fail(operation: str, queue: str, code: str, reason: str) -> NoReturn:
    raise FatalBackendError(
        f"{operation} on {queue!r}: {code}: {reason}", operation=operation, queue=queue, code=code
    )


def check_queue_name(name: str) -> None:
    if not is_queue_name(name):
        fail("CreateQueue", name, "InvalidParameterValue", f"a queue name has {QUEUE_NAME_RULE}")


def check_attributes(config: QueueConfig, dialect: Dialect, operation: str = "CreateQueue") -> None:
    ranges = [
        (
            "VisibilityTimeout",
            config.visibility_timeout_s,
            dialect.min_visibility_s,
            dialect.max_visibility_s,
        ),
        ("DelaySeconds", config.delay_s, 0, dialect.max_delay_s),
        ("MessageRetentionPeriod", config.retention_s, 60, 1_209_600),
        ("MaximumMessageSize", config.max_message_bytes, 1_024, dialect.max_message_bytes),
    ]
    if config.redrive is not None:
        ranges.append(("maxReceiveCount", config.redrive.max_receive_count, 1, 1_000))
    for attribute, value, low, high in ranges:
        if not low <= value <= high:
            fail(
                operation,
                config.name,
                "InvalidAttributeValue",
                f"{attribute}={value} is not in {low}-{high}",
            )
    if config.fifo and not dialect.fifo_queues:
        fail(operation, config.name, "InvalidParameterValue", f"{dialect.name} has no FIFO queues")
    if config.content_based_deduplication and not config.fifo:
        fail(
            operation,
            config.name,
            "InvalidAttributeName",
            "ContentBasedDeduplication is for FIFO queues",
        )


def check_batch(operation: str, queue: str, ids: Sequence[str], dialect: Dialect) -> None:
    """Whole-call checks of a batch, in the order SQS makes them."""
    if not ids:
        fail(operation, queue, legacy_code("EmptyBatchRequest"), "no entries")
    if len(ids) > dialect.max_batch_entries:
        fail(
            operation,
            queue,
            legacy_code("TooManyEntriesInBatchRequest"),
            f"{len(ids)} entries, at most {dialect.max_batch_entries}",
        )
    if not all(is_entry_id(entry_id) for entry_id in ids):
        fail(operation, queue, legacy_code("InvalidBatchEntryId"), f"ids are {ENTRY_ID_RULE}")
    if len(set(ids)) != len(ids):
        fail(operation, queue, legacy_code("BatchEntryIdsNotDistinct"), "entry ids repeat")


def check_send_batch(queue: str, messages: Sequence[OutgoingMessage], dialect: Dialect) -> None:
    """Whole-call checks of a SendMessageBatch: those of every batch, then its size."""
    operation = "SendMessageBatch"
    check_batch(operation, queue, [m.entry_id for m in messages], dialect)
    if sum(_size(m) for m in messages) > dialect.max_message_bytes:
        fail(operation, queue, legacy_code("BatchRequestTooLong"), "batch too large")


def check_receive(queue: str, max_messages: int, visibility_s: int, dialect: Dialect) -> None:
    operation = "ReceiveMessage"
    if not 1 <= max_messages <= dialect.max_receive:
        fail(operation, queue, "InvalidParameterValue", f"MaxNumberOfMessages={max_messages}")
    if not dialect.min_visibility_s <= visibility_s <= dialect.max_visibility_s:
        fail(operation, queue, "InvalidParameterValue", f"VisibilityTimeout={visibility_s}")


def attempt_id_problem(attempt_id: str) -> tuple[str, str] | None:
    """Why SQS would refuse this ReceiveRequestAttemptId of a FIFO receive, or None."""
    if _FIFO_ID.match(attempt_id):
        return None
    return (
        "InvalidParameterValue",
        "Value for parameter ReceiveRequestAttemptId is invalid. Reason: it is 1-128 "
        "characters of letters, digits and punctuation.",
    )


def visibility_problem(visibility_s: int, dialect: Dialect) -> tuple[str, str] | None:
    """Why SQS would refuse this visibility in a change batch: (code, reason), or None."""
    low, high = dialect.min_visibility_s, dialect.max_visibility_s
    if low <= visibility_s <= high:
        return None
    return "InvalidParameterValue", f"visibility {visibility_s} not in {low}-{high}"


def send_problem(
    config: QueueConfig, message: OutgoingMessage, dialect: Dialect
) -> tuple[str, str] | None:
    """Why SQS would refuse this entry of a send batch: (code, reason), or None."""
    if not message.body:
        return "MissingParameter", "MessageBody is required"
    if not is_message_text(message.body):
        return "InvalidMessageContents", "the body holds characters SQS does not accept"
    if _size(message) > config.max_message_bytes:
        return (
            "InvalidParameterValue",
            "One or more parameters are invalid. Reason: Message must be shorter than "
            f"{config.max_message_bytes} bytes.",
        )
    if message.delay_s is not None and not 0 <= message.delay_s <= dialect.max_delay_s:
        return "InvalidParameterValue", f"DelaySeconds={message.delay_s}"
    for value in (message.group_id, message.deduplication_id):
        if value is not None and not _FIFO_ID.match(value):
            return "InvalidParameterValue", "ids are 1-128 printable ASCII characters"
    if not config.fifo:
        if message.deduplication_id is not None:
            return "InvalidParameterValue", "MessageDeduplicationId is for FIFO queues"
        return None
    if message.group_id is None:
        return "MissingParameter", "a FIFO queue needs MessageGroupId"
    if message.delay_s:
        return "InvalidParameterValue", "FIFO queues take no per-message DelaySeconds"
    if message.deduplication_id is None and not config.content_based_deduplication:
        return "InvalidParameterValue", "no MessageDeduplicationId, no content-based dedup"
    return None


def _size(message: OutgoingMessage) -> int:
    # surrogatepass: a body with lone surrogates is refused per entry, not with a crash here.
    size = len(message.body.encode("utf-8", "surrogatepass"))
    for name, attribute in message.message_attributes.items():
        size += len(name.encode()) + len(attribute.data_type.encode())
        size += len((attribute.string_value or "").encode()) + len(attribute.binary_value or b"")
    return size
