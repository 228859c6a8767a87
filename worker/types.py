"""Plain values that cross the boundary between the runtime and a queue backend.

Everything here is immutable and free of I/O. A backend turns its wire format into these
values and back; the runtime never sees a botocore dict or an XML tree.

Partial failure is a value: a batch call answers with a `BatchResult` that names which
entries succeeded and which failed (with the service's error code), never an exception for
a single entry. Whole-call failures are exceptions from `worker.errors`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass, field
from types import MappingProxyType

__all__ = [
    "BatchResult",
    "Deletion",
    "EntryFailure",
    "MessageAttribute",
    "MoveTask",
    "OutgoingMessage",
    "QueueInfo",
    "QueueSpec",
    "ReceivedMessage",
    "RedrivePolicy",
    "VisibilityChange",
]

_EMPTY: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class MessageAttribute:
    """A user-defined message attribute, as SQS models them (`String`, `Number`, `Binary`)."""

    data_type: str
    string_value: str | None = None
    binary_value: bytes | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ReceivedMessage:
    """One message as a backend received it. `receipt_handle` is valid for this receive only."""

    queue: str
    message_id: str
    receipt_handle: str
    body: str
    receive_count: int
    #: System attributes as the service spells them (`SentTimestamp`, `MessageGroupId`, ...).
    attributes: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    message_attributes: Mapping[str, MessageAttribute] = field(
        default_factory=lambda: MappingProxyType({})
    )

    @property
    def group_id(self) -> str | None:
        """The FIFO message group, or None on a standard queue."""
        return self.attributes.get("MessageGroupId")


@dataclass(frozen=True, slots=True, kw_only=True)
class OutgoingMessage:
    """A message to send. `entry_id` must be unique within one batch."""

    body: str
    entry_id: str = "0"
    #: Seconds before the message can be received; None: the queue's own delay.
    delay_s: int | None = None
    message_attributes: Mapping[str, MessageAttribute] = field(
        default_factory=lambda: MappingProxyType({})
    )
    group_id: str | None = None
    deduplication_id: str | None = None
    #: The `AWSTraceHeader` system attribute (X-Ray's `Root=...;Parent=...;Sampled=...`).
    trace_header: str | None = None


@dataclass(frozen=True, slots=True)
class VisibilityChange:
    """One entry of a ChangeMessageVisibilityBatch call: extend or release a lease."""

    entry_id: str
    receipt_handle: str
    visibility_s: int


@dataclass(frozen=True, slots=True)
class Deletion:
    """One entry of a DeleteMessageBatch call."""

    entry_id: str
    receipt_handle: str


@dataclass(frozen=True, slots=True)
class EntryFailure:
    """One failed entry of a batch call, with the service's error code."""

    entry_id: str
    code: str
    message: str = ""
    sender_fault: bool = True


@dataclass(frozen=True, slots=True)
class BatchResult:
    """The answer to a batch call: which entries succeeded, which failed and why.

    `new_handles` maps an entry id to the receipt handle that replaces the old one, for
    services whose visibility change hands out a new handle (Alibaba Cloud SMQ). SQS leaves
    it empty.
    """

    succeeded: tuple[str, ...] = ()
    failed: tuple[EntryFailure, ...] = ()
    new_handles: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    #: Message ids assigned by the service, by entry id (send calls only).
    message_ids: Mapping[str, str] = field(default_factory=lambda: _EMPTY)

    def failure(self, entry_id: str) -> EntryFailure | None:
        for failure in self.failed:
            if failure.entry_id == entry_id:
                return failure
        return None


@dataclass(frozen=True, slots=True)
class RedrivePolicy:
    """Where a message goes after too many receives."""

    dead_letter_queue: str
    max_receive_count: int


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueInfo:
    """What the runtime needs to know about a queue at start-up."""

    name: str
    url: str
    visibility_timeout_s: int
    fifo: bool = False
    delay_s: int = 0
    redrive: RedrivePolicy | None = None
    approximate_visible: int = 0
    approximate_in_flight: int = 0
    approximate_delayed: int = 0
    #: Seconds since the oldest message still in the queue was sent, where the service
    #: tells (the engine does; SQS publishes it only to CloudWatch).
    oldest_message_age_s: float | None = None
    #: The service's limit of messages in flight for this queue (SQS: 120,000 for both
    #: standard and FIFO queues), where known.
    in_flight_limit: int | None = None


@dataclass(frozen=True, slots=True)
class QueueSpec:
    """A queue to create: its name (a `.fifo` suffix makes a FIFO queue) and attributes.

    ::

        await backend.create_queue(QueueSpec("orders", visibility_timeout_s=60))
    """

    name: str
    _: KW_ONLY
    #: Seconds a received message stays invisible unless its lease is extended.
    visibility_timeout_s: int = 30
    #: Seconds a sent message waits before it can be received.
    delay_s: int = 0
    #: Seconds a message is kept, counted from its send (SQS: 60 to 1,209,600).
    retention_s: int = 345_600
    redrive: RedrivePolicy | None = None
    #: FIFO only: the body's SHA-256 is the deduplication id when none is given.
    content_based_deduplication: bool = False

    @property
    def fifo(self) -> bool:
        return self.name.endswith(".fifo")


@dataclass(frozen=True, slots=True, kw_only=True)
class MoveTask:
    """A message move task (SQS's StartMessageMoveTask): messages moved from a dead-letter
    queue back to their source queue, or to another queue, at a bounded rate."""

    #: Given while the task runs (the handle CancelMessageMoveTask takes); None after.
    handle: str | None
    #: RUNNING, COMPLETED, CANCELLING, CANCELLED or FAILED.
    status: str
    source: str
    #: None: each message goes back to the queue it was dead-lettered from.
    destination: str | None
    max_per_second: int | None
    moved: int
    #: How many the task found to move at its start (None when the service does not say).
    to_move: int | None
    failure_reason: str | None
    #: Epoch milliseconds.
    started_at_ms: int
