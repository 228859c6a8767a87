"""A pure, synchronous model of Amazon SQS, driven by an injected clock.

The rules, as SQS keeps them and as this engine enforces them (strict where SQS is strict):

Queues
- A name is 1-80 characters of `[A-Za-z0-9_-]`, a `.fifo` suffix making a FIFO queue. Every
  call takes a queue by name or by its URL, `http://memory.invalid/000000000000/<name>`.
  An unknown queue raises `QueueNotFound`.
- Creating an existing queue with the same attributes returns its URL; with other attributes
  it fails (`QueueAlreadyExists`). A name cannot be reused for 60 s after its deletion
  (`AWS.SimpleQueueService.QueueDeletedRecently`); a queue can be purged once per 60 s
  (`AWS.SimpleQueueService.PurgeQueueInProgress`).
- A redrive policy names an existing queue of the same kind; maxReceiveCount is 1-1,000.
- Attributes can be changed on an existing queue (`set_queue_attributes`), checked as at
  creation, and a queue cannot become its own DLQ. A new visibility timeout or delay applies
  to later receives and sends; a new retention period to every stored message at once
  (counted from its send, so shortening it may expire messages at the next call); a new
  redrive policy to later receives.

Messages
- A sent message is delayed by its own delay (standard queues only; 0 overrides the queue's),
  else (None) by the queue's, then visible. A receive makes it invisible for the visibility timeout
  and hands out a new receipt handle; only the latest handle is valid. Retention counts from
  the send; expired messages vanish lazily, at the next call.
- A message whose receive count would exceed maxReceiveCount on a receive moves to the DLQ
  instead (so it lands there on receive maxReceiveCount + 1). It keeps its MessageId, body,
  attributes and receive count (the DLQ's consumer sees how often it was tried). Moved from a
  standard queue it keeps its send time, so retention runs on (as on SQS); a FIFO DLQ
  restarts retention. If the DLQ is gone, the message is delivered as if there were no policy.
- Visibility is 0-43,200 s, and a message may not stay invisible past its receive plus
  43,200 s (`InvalidParameterValue`, per entry). Visibility 0 makes it visible at once; only
  a receive moves a message to its DLQ.
- A visibility change needs the latest handle (`ReceiptHandleIsInvalid` otherwise) of a
  message in flight (`MessageNotInflight` otherwise). A delete needs the latest handle, in
  flight or not; a stale or repeated delete is `ReceiptHandleIsInvalid` (stricter than SQS).
- FIFO: MessageGroupId is required (`MissingParameter`), a per-message delay is refused, a
  deduplication id (explicit, or the body's SHA-256 with ContentBasedDeduplication) is
  required; a duplicate within 5 minutes of the first send succeeds, returns the first
  MessageId and stores nothing. Standard queues refuse a deduplication id but keep a group id
  (SQS fair queues do) without ordering by it.
- A body is 1 or more characters SQS accepts (`InvalidMessageContents` otherwise); a batch
  of more than 1 MiB in all fails whole (`AWS.SimpleQueueService.BatchRequestTooLong`).
- At `max_in_flight` messages in flight, a short poll raises `OverLimit`; a long poll (the
  adapter's) gets fewer or none.

Batches
- Send, change-visibility and delete take 1-10 entries with distinct ids of 1-80
  `[A-Za-z0-9_-]` characters, else the whole call fails (`FatalBackendError`, SQS's code). A
  failed entry is an `EntryFailure` value (`sender_fault=True`). A receive takes 1-10.

Only the SQS dialect is implemented. `Dialect` holds the numbers that differ between services
and the engine reads every one of them; a later Alibaba Cloud SMQ dialect (batches of 16,
minimum visibility 1, a new receipt handle from every visibility change, no FIFO, its own error
codes) needs new fields and code for those behaviours, not just other numbers.
"""

from __future__ import annotations

import hashlib
import itertools
import re
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from types import MappingProxyType
from typing import Literal, NoReturn, TypeVar

from backends._memory_queue import (
    Message,
    MessageSnapshot,
    MessageState,
    Queue,
    QueueConfig,
    QueueCounts,
    received_message,
)
from worker.clock import Clock
from worker.errors import FatalBackendError, OverLimit, QueueNotFound
from worker.types import (
    BatchResult,
    Deletion,
    EntryFailure,
    OutgoingMessage,
    QueueInfo,
    ReceivedMessage,
    RedrivePolicy,
    VisibilityChange,
)

__all__ = [
    "QUEUE_URL_PREFIX",
    "SQS_DIALECT",
    "UNCHANGED",
    "Dialect",
    "MemoryEngine",
    "MessageSnapshot",
    "MessageState",
    "QueueConfig",
    "QueueCounts",
    "QueueDescription",
    "Unchanged",
]

QUEUE_URL_PREFIX = "http://memory.invalid/000000000000/"
_SQS = "AWS.SimpleQueueService."
_QUEUE_NAME = re.compile(r"(?=.{1,80}\Z)[A-Za-z0-9_-]+(\.fifo)?\Z")
_ENTRY_ID = re.compile(r"[A-Za-z0-9_-]{1,80}\Z")
_FIFO_ID = re.compile(r"[!-~]{1,128}\Z")
# The characters SQS accepts in a body (XML 1.0's), negated.
_BAD_BODY = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_RECREATE_AFTER_S = 60.0
_T = TypeVar("_T")
_PURGE_EVERY_S = 60.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Dialect:
    """The numbers in which services differ. Only `SQS_DIALECT` is modelled (see above)."""

    name: str
    max_batch_entries: int
    max_receive: int
    min_visibility_s: int
    max_visibility_s: int
    #: How long a message may stay invisible counted from its receive.
    max_lease_s: int
    max_delay_s: int
    max_message_bytes: int


SQS_DIALECT = Dialect(
    name="sqs",
    max_batch_entries=10,
    max_receive=10,
    min_visibility_s=0,
    max_visibility_s=43_200,
    max_lease_s=43_200,
    max_delay_s=900,
    max_message_bytes=1_048_576,
)


class _Unchanged(Enum):
    UNCHANGED = "unchanged"


Unchanged = Literal[_Unchanged.UNCHANGED]
#: `set_queue_attributes(redrive=UNCHANGED)` keeps the redrive policy (None removes it).
UNCHANGED: Unchanged = _Unchanged.UNCHANGED


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueDescription:
    """Everything GetQueueAttributes reports of one queue (counts are exact here)."""

    config: QueueConfig
    counts: QueueCounts
    #: Seconds since the Unix epoch, as SQS's CreatedTimestamp and LastModifiedTimestamp.
    created_timestamp: int
    last_modified_timestamp: int


class MemoryEngine:
    """An SQS model in memory. Synchronous and never sleeps: it reads `clock.now()` per call.

    `max_in_flight` is the in-flight quota of each queue (SQS: 120,000); tests set it low.
    Listeners registered with `subscribe` hear the name of each queue whose receivable
    messages may have changed, so an async adapter can long-poll without polling.
    """

    def __init__(
        self, clock: Clock, *, dialect: Dialect = SQS_DIALECT, max_in_flight: int = 120_000
    ) -> None:
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1, got {max_in_flight}")
        self.clock = clock
        self.dialect = dialect
        self.max_in_flight = max_in_flight
        self._queues: dict[str, Queue] = {}
        self._deleted_at: dict[str, float] = {}
        self._listeners: list[Callable[[str], None]] = []
        # Ids need only be unique and opaque: a random prefix and a counter are both, and
        # much cheaper than a uuid4 each at 100,000 messages.
        self._id_prefix = secrets.token_hex(6)
        self._ids = itertools.count(1)

    # -- queues -------------------------------------------------------------------------

    @staticmethod
    def queue_name(queue: str) -> str:
        """The name in `queue` (a name or this engine's URL); does not check it exists."""
        return queue.removeprefix(QUEUE_URL_PREFIX)

    def queue_url(self, queue: str) -> str:
        return self._queue(queue, "GetQueueUrl").config.url

    def list_queues(self, prefix: str = "") -> list[str]:
        """Names of the queues, sorted; only those starting with `prefix` if given."""
        return sorted(name for name in self._queues if name.startswith(prefix))

    def create_queue(
        self,
        name: str,
        *,
        visibility_timeout_s: int = 30,
        delay_s: int = 0,
        retention_s: int = 345_600,
        redrive: RedrivePolicy | None = None,
        content_based_deduplication: bool = False,
    ) -> str:
        """Create `name` (FIFO when it ends in `.fifo`) and return its URL. Idempotent."""
        if not _QUEUE_NAME.match(name):
            _fail("CreateQueue", name, "InvalidParameterValue", "invalid queue name")
        config = QueueConfig(
            name=name,
            url=QUEUE_URL_PREFIX + name,
            fifo=name.endswith(".fifo"),
            visibility_timeout_s=visibility_timeout_s,
            delay_s=delay_s,
            retention_s=retention_s,
            redrive=redrive,
            content_based_deduplication=content_based_deduplication,
        )
        self._check_new_queue(config)
        existing = self._queues.get(name)
        if existing is not None:
            if existing.config != config:
                _fail("CreateQueue", name, "QueueAlreadyExists", "other attributes")
            return existing.config.url
        self._queues[name] = Queue(config, created_at=self.clock.now())
        return config.url

    def _check_new_queue(self, config: QueueConfig) -> None:
        _check_attributes(config, self.dialect)
        deleted_at = self._deleted_at.get(config.name)
        if deleted_at is not None and self.clock.now() - deleted_at < _RECREATE_AFTER_S:
            _fail("CreateQueue", config.name, _SQS + "QueueDeletedRecently", "wait 60 s")
        if config.redrive is not None:
            self._check_dead_letter_queue(config, "CreateQueue")

    def _check_dead_letter_queue(self, config: QueueConfig, operation: str) -> None:
        assert config.redrive is not None
        target = self._queues.get(self.queue_name(config.redrive.dead_letter_queue))
        if target is None:
            _fail(operation, config.name, "InvalidParameterValue", "no such DLQ")
        if target.config.fifo != config.fifo:
            _fail(operation, config.name, "InvalidParameterValue", "DLQ of another type")

    def set_queue_attributes(
        self,
        queue: str,
        *,
        visibility_timeout_s: int | None = None,
        delay_s: int | None = None,
        retention_s: int | None = None,
        redrive: RedrivePolicy | Unchanged | None = UNCHANGED,
        content_based_deduplication: bool | None = None,
    ) -> None:
        """Change attributes of an existing queue; None (or UNCHANGED) keeps one as it is."""
        op = "SetQueueAttributes"
        state = self._settled(queue, op)
        old = state.config
        config = replace(
            old,
            visibility_timeout_s=_given(visibility_timeout_s, old.visibility_timeout_s),
            delay_s=_given(delay_s, old.delay_s),
            retention_s=_given(retention_s, old.retention_s),
            redrive=old.redrive if redrive is UNCHANGED else redrive,
            content_based_deduplication=_given(
                content_based_deduplication, old.content_based_deduplication
            ),
        )
        _check_attributes(config, self.dialect, op)
        if config.redrive is not None:
            target = self.queue_name(config.redrive.dead_letter_queue)
            if target == config.name:
                _fail(op, config.name, "InvalidParameterValue", "a queue cannot be its own DLQ")
            self._check_dead_letter_queue(config, op)
        state.config = config
        state.modified_at = self.clock.now()
        if config.retention_s != old.retention_s:
            state.set_retention(config.retention_s)
            state.settle(self.clock.now())
        if config.redrive != old.redrive:
            # A message held back only by the old policy's DLQ may be receivable now.
            self._notify(config.name)

    def describe_queue(self, queue: str) -> QueueDescription:
        state = self._settled(queue, "GetQueueAttributes")
        return QueueDescription(
            config=state.config,
            counts=state.counts(),
            created_timestamp=self._wall_ms(state.created_at) // 1000,
            last_modified_timestamp=self._wall_ms(state.modified_at) // 1000,
        )

    def delete_queue(self, queue: str) -> None:
        name = self._queue(queue, "DeleteQueue").config.name
        del self._queues[name]
        self._deleted_at[name] = self.clock.now()
        self._notify(name)

    def purge(self, queue: str) -> None:
        """Drop every message at once (SQS may take up to 60 s; this model takes none)."""
        state = self._queue(queue, "PurgeQueue")
        now = self.clock.now()
        if state.last_purge_at is not None and now - state.last_purge_at < _PURGE_EVERY_S:
            _fail("PurgeQueue", state.config.name, _SQS + "PurgeQueueInProgress", "wait 60 s")
        state.purge(now)
        self._notify(state.config.name)

    def queue_info(self, queue: str) -> QueueInfo:
        state = self._settled(queue, "GetQueueAttributes")
        config = state.config
        return QueueInfo(
            name=config.name,
            url=config.url,
            visibility_timeout_s=config.visibility_timeout_s,
            fifo=config.fifo,
            delay_s=config.delay_s,
            redrive=config.redrive,
            approximate_visible=len(state.visible),
            approximate_in_flight=len(state.in_flight),
            approximate_delayed=len(state.delayed),
        )

    # -- messages -----------------------------------------------------------------------

    def send(self, queue: str, messages: Sequence[OutgoingMessage]) -> BatchResult:
        op = "SendMessageBatch"
        state = self._settled(queue, op)
        _check_batch(op, state.config.name, [m.entry_id for m in messages], self.dialect)
        if sum(_size(m) for m in messages) > self.dialect.max_message_bytes:
            _fail(op, state.config.name, _SQS + "BatchRequestTooLong", "batch too large")
        succeeded: list[str] = []
        failed: list[EntryFailure] = []
        ids: dict[str, str] = {}
        for message in messages:
            problem = _send_problem(state.config, message, self.dialect)
            if problem is None:
                ids[message.entry_id] = self._send_one(state, message)
                succeeded.append(message.entry_id)
            else:
                failed.append(EntryFailure(message.entry_id, *problem))
        if succeeded:
            self._notify(state.config.name)
        return BatchResult(
            succeeded=tuple(succeeded), failed=tuple(failed), message_ids=MappingProxyType(ids)
        )

    def _send_one(self, state: Queue, outgoing: OutgoingMessage) -> str:
        now = self.clock.now()
        dedup_id = outgoing.deduplication_id
        if state.config.fifo and dedup_id is None:
            dedup_id = hashlib.sha256(outgoing.body.encode()).hexdigest()
        if dedup_id is not None:
            original = state.deduplication.duplicate_of(dedup_id, now)
            if original is not None:
                return original
        message = Message(
            message_id=self._new_id(),
            body=outgoing.body,
            message_attributes=outgoing.message_attributes,
            sent_at=now,
            sent_timestamp_ms=self._wall_ms(now),
            group_id=outgoing.group_id,
            deduplication_id=dedup_id,
            visible_at=now
            + (state.config.delay_s if outgoing.delay_s is None else outgoing.delay_s),
        )
        state.add(message, now, expires_at=now + state.config.retention_s)
        if dedup_id is not None:
            state.deduplication.remember(dedup_id, message.message_id, now)
        return message.message_id

    def check_batch(self, operation: str, queue: str, entry_ids: Sequence[str]) -> None:
        """The whole-call checks of a batch (count, ids), as `send` and the others make them;
        for a front end that refuses some entries itself before calling the engine."""
        _check_batch(operation, self.queue_name(queue), entry_ids, self.dialect)

    def sequence_number(self, queue: str, message_id: str) -> str | None:
        """The FIFO sequence number of a stored message; None on a standard queue or once the
        message is gone."""
        message = self._queue(queue, "SendMessage").messages.get(message_id)
        return None if message is None else message.sequence_number

    def receive(
        self,
        queue: str,
        max_messages: int = 1,
        *,
        visibility_s: int | None = None,
        long_poll: bool = False,
    ) -> list[ReceivedMessage]:
        """Take up to `max_messages` receivable messages now; never waits.

        `long_poll` only changes what happens at the in-flight quota: a short poll raises
        `OverLimit`, a long poll gets fewer or no messages (its adapter does the waiting).
        """
        op = "ReceiveMessage"
        state = self._settled(queue, op)
        name = state.config.name
        if not 1 <= max_messages <= self.dialect.max_receive:
            _fail(op, name, "InvalidParameterValue", f"MaxNumberOfMessages={max_messages}")
        if visibility_s is None:
            visibility_s = state.config.visibility_timeout_s
        if not self.dialect.min_visibility_s <= visibility_s <= self.dialect.max_visibility_s:
            _fail(op, name, "InvalidParameterValue", f"VisibilityTimeout={visibility_s}")
        room = self.max_in_flight - len(state.in_flight)
        if room <= 0 and not long_poll:
            raise OverLimit(
                f"{name}: too many messages in flight", operation=op, queue=name, code="OverLimit"
            )
        taken = state.take(
            max_messages,
            room=max(room, 0),
            deliver=self._deliverer(visibility_s),
            redrive=self._redriver(state),
        )
        if taken.redriven:
            self._store_redriven(state, taken.redriven)
        return [received_message(state.config, message) for message in taken.delivered]

    def change_visibility(self, queue: str, entries: Sequence[VisibilityChange]) -> BatchResult:
        """Extend or release leases; visibility 0 makes a message visible at once."""
        op = "ChangeMessageVisibilityBatch"
        state = self._settled(queue, op)
        _check_batch(op, state.config.name, [e.entry_id for e in entries], self.dialect)
        now = self.clock.now()
        low, high = self.dialect.min_visibility_s, self.dialect.max_visibility_s
        succeeded: list[str] = []
        failed: list[EntryFailure] = []
        for entry in entries:
            if not low <= entry.visibility_s <= high:
                problem: tuple[str, str] | None = (
                    "InvalidParameterValue",
                    f"visibility {entry.visibility_s} not in {low}-{high}",
                )
            else:
                problem = state.change_visibility(
                    entry.receipt_handle,
                    entry.visibility_s,
                    now,
                    max_lease_s=self.dialect.max_lease_s,
                )
            if problem is None:
                succeeded.append(entry.entry_id)
            else:
                failed.append(EntryFailure(entry.entry_id, *problem))
        if succeeded:
            self._notify(state.config.name)
        return BatchResult(succeeded=tuple(succeeded), failed=tuple(failed))

    def delete(self, queue: str, entries: Sequence[Deletion]) -> BatchResult:
        op = "DeleteMessageBatch"
        state = self._settled(queue, op)
        _check_batch(op, state.config.name, [e.entry_id for e in entries], self.dialect)
        succeeded: list[str] = []
        failed: list[EntryFailure] = []
        for entry in entries:
            if state.delete(entry.receipt_handle):
                succeeded.append(entry.entry_id)
            else:
                failed.append(
                    EntryFailure(
                        entry.entry_id,
                        "ReceiptHandleIsInvalid",
                        "not the latest receipt handle of a stored message",
                    )
                )
        if succeeded:
            # Fewer in flight may unblock a FIFO group or a long poll held at the quota.
            self._notify(state.config.name)
        return BatchResult(succeeded=tuple(succeeded), failed=tuple(failed))

    # -- for the async adapter ----------------------------------------------------------

    def next_wakeup(self, queue: str) -> float | None:
        """The earliest future time at which a message of `queue` may become receivable.

        That is a delay or a visibility timeout ending; None when nothing is pending. It may
        be early (a message behind a blocked FIFO group), never late: a waiter re-checks.
        """
        return self._settled(queue, "ReceiveMessage").next_timer()

    def subscribe(self, listener: Callable[[str], None]) -> Callable[[], None]:
        """Call `listener(queue_name)` after each change that may let a waiting receive on
        that queue get messages (send, release, delete, purge, redrive, `expire`, queue
        deletion). Returns the unsubscribe function. Listeners must not call the engine."""
        self._listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return unsubscribe

    # -- test hooks (not part of SQS) ---------------------------------------------------

    def counts(self, queue: str) -> QueueCounts:
        """Test hook: exact visible / in-flight / delayed counts of `queue`."""
        return self._settled(queue, "GetQueueAttributes").counts()

    def peek(self, queue: str, message_id: str) -> MessageSnapshot | None:
        """Test hook: one message's state, without receiving it; None once it is gone."""
        return self._settled(queue, "GetQueueAttributes").snapshot(message_id)

    def expire(self, queue: str, message_id: str) -> None:
        """Test hook: end an in-flight message's visibility now, as if its lease lapsed.

        Its latest handle then gets `MessageNotInflight` from visibility changes, and
        `ReceiptHandleIsInvalid` once the message is received again. `ValueError` if the
        message is not in flight.
        """
        state = self._settled(queue, "ChangeMessageVisibility")
        message = state.messages.get(message_id)
        if message is None or message.state is not MessageState.IN_FLIGHT:
            raise ValueError(f"message {message_id} is not in flight on {state.config.name}")
        now = self.clock.now()
        state.set_visible_at(message, now, now)
        self._notify(state.config.name)

    # -- internals ----------------------------------------------------------------------

    def _queue(self, queue: str, operation: str) -> Queue:
        name = self.queue_name(queue)
        state = self._queues.get(name)
        if state is None:
            raise QueueNotFound(
                f"queue {name!r} does not exist",
                operation=operation,
                queue=name,
                code=_SQS + "NonExistentQueue",
            )
        return state

    def _settled(self, queue: str, operation: str) -> Queue:
        state = self._queue(queue, operation)
        state.settle(self.clock.now())
        return state

    def _notify(self, name: str) -> None:
        for listener in list(self._listeners):
            listener(name)

    def _new_id(self) -> str:
        prefix = self._id_prefix
        return f"{prefix[:8]}-{prefix[8:]}-4000-8000-{next(self._ids):012x}"

    def _wall_ms(self, now: float) -> int:
        return int((now + self.clock.wall_offset_s()) * 1000)

    def _deliverer(self, visibility_s: int) -> Callable[[Message], None]:
        now = self.clock.now()
        wall_ms = self._wall_ms(now)

        def deliver(message: Message) -> None:
            message.receive_count += 1
            if message.first_receive_ms is None:
                message.first_receive_ms = wall_ms
            message.received_at = now
            message.visible_at = now + visibility_s
            message.receipt_handle = f"{self._id_prefix}{next(self._ids):x}.{message.message_id}"

        return deliver

    def _redriver(self, state: Queue) -> Callable[[Message], bool]:
        redrive = state.config.redrive
        if redrive is None or self.queue_name(redrive.dead_letter_queue) not in self._queues:
            return lambda message: False
        most = redrive.max_receive_count
        return lambda message: message.receive_count + 1 > most

    def _store_redriven(self, source: Queue, messages: list[Message]) -> None:
        assert source.config.redrive is not None
        target = self._queues[self.queue_name(source.config.redrive.dead_letter_queue)]
        now = self.clock.now()
        for message in messages:
            moved = replace(
                message,
                state=MessageState.DELAYED,
                visible_at=now,
                receipt_handle=None,
                sent_at=now if target.config.fifo else message.sent_at,
            )
            target.add(moved, now, expires_at=moved.sent_at + target.config.retention_s)
        self._notify(target.config.name)


# -- request validation ---------------------------------------------------------------------


def _fail(operation: str, queue: str, code: str, reason: str) -> NoReturn:
    raise FatalBackendError(
        f"{operation} on {queue!r}: {code}: {reason}", operation=operation, queue=queue, code=code
    )


def _check_batch(operation: str, queue: str, ids: Sequence[str], dialect: Dialect) -> None:
    """Whole-call checks of a batch, in the order SQS makes them."""
    if not ids:
        _fail(operation, queue, _SQS + "EmptyBatchRequest", "no entries")
    if len(ids) > dialect.max_batch_entries:
        _fail(
            operation,
            queue,
            _SQS + "TooManyEntriesInBatchRequest",
            f"{len(ids)} entries, at most {dialect.max_batch_entries}",
        )
    if not all(_ENTRY_ID.match(entry_id) for entry_id in ids):
        _fail(operation, queue, _SQS + "InvalidBatchEntryId", "ids are 1-80 of [A-Za-z0-9_-]")
    if len(set(ids)) != len(ids):
        _fail(operation, queue, _SQS + "BatchEntryIdsNotDistinct", "entry ids repeat")


def _given(value: _T | None, default: _T) -> _T:
    return default if value is None else value


def _check_attributes(
    config: QueueConfig, dialect: Dialect, operation: str = "CreateQueue"
) -> None:
    ranges = [
        ("VisibilityTimeout", config.visibility_timeout_s, 0, dialect.max_visibility_s),
        ("DelaySeconds", config.delay_s, 0, dialect.max_delay_s),
        ("MessageRetentionPeriod", config.retention_s, 60, 1_209_600),
    ]
    if config.redrive is not None:
        ranges.append(("maxReceiveCount", config.redrive.max_receive_count, 1, 1_000))
    for attribute, value, low, high in ranges:
        if not low <= value <= high:
            _fail(
                operation,
                config.name,
                "InvalidAttributeValue",
                f"{attribute}={value} is not in {low}-{high}",
            )
    if config.content_based_deduplication and not config.fifo:
        _fail(
            operation,
            config.name,
            "InvalidAttributeName",
            "ContentBasedDeduplication is for FIFO queues",
        )


def _send_problem(
    config: QueueConfig, message: OutgoingMessage, dialect: Dialect
) -> tuple[str, str] | None:
    """Why SQS would refuse this entry of a send batch: (code, reason), or None."""
    if not message.body:
        return "MissingParameter", "MessageBody is required"
    if _BAD_BODY.search(message.body):
        return "InvalidMessageContents", "the body holds characters SQS does not accept"
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
