"""A pure, synchronous model of Amazon SQS, driven by an injected clock.

The engine is its queues (`backends.memory.catalog`: created, changed, purged, deleted),
the checks every request passes first (`backends.memory.rules`, with `Dialect`) and, here,
the messages. Their rules, as SQS keeps them and as this engine enforces them (strict where
SQS is strict):

- A sent message is delayed by its own delay (standard queues only; 0 overrides the queue's),
  else (None) by the queue's, then visible. A receive makes it invisible for the visibility timeout
  and hands out a new receipt handle; only the latest handle is valid. Retention counts from
  the send; expired messages vanish lazily, at the next call.
- A message whose receive count would exceed maxReceiveCount on a receive moves to the DLQ
  instead (so it lands there on receive maxReceiveCount + 1). It keeps its MessageId, body,
  attributes and receive count (the DLQ's consumer sees how often it was tried). Moved from a
  standard queue it keeps its send time, so retention runs on (as on SQS); a FIFO DLQ
  restarts retention. If the DLQ is gone, the message is delivered as if there were no policy.
- A message may not stay invisible past its receive plus 43,200 s (`InvalidParameterValue`,
  per entry). Visibility 0 makes it visible at once; only a receive moves a message to its DLQ.
- A visibility change needs the latest handle (`ReceiptHandleIsInvalid` otherwise) of a
  message in flight (`MessageNotInflight` otherwise). A delete with the latest handle deletes
  the message (on a FIFO queue only while it is in flight); a stale or repeated delete
  follows `HandleRules` (`backends.memory.handles`): refused by default (`STRICT`), or as SQS
  documents it (`SQS`: success on standard queues, refused on FIFO queues).
- SMQ dialect (`backends.memory.dialects`): a visibility change also retires the handle and
  answers a new one (`BatchResult.new_handles`); a stale delete is always refused, and so is
  a delete once the message's visibility has ended.
- FIFO: without an explicit deduplication id, ContentBasedDeduplication makes it the body's
  SHA-256; a duplicate within 5 minutes of the first send succeeds, returns the first
  MessageId and stores nothing. On standard queues a group id names a fair-queue tenant:
  while one is noisy, quiet tenants' messages are received first (`backends.memory.fairness`).
- At `max_in_flight` messages in flight, a short poll raises `OverLimit`; a long poll (the
  adapter's) gets fewer or none.
- A failed entry of a batch is an `EntryFailure` value (`sender_fault=True`).
"""

from __future__ import annotations

import hashlib
import itertools
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from types import MappingProxyType

from backends.memory import rules
from backends.memory.attempts import ATTEMPT_WINDOW_S
from backends.memory.catalog import (
    ARN_PREFIX,
    QUEUE_URL_PREFIX,
    UNCHANGED,
    QueueDescription,
    Unchanged,
)
from backends.memory.changes import Changes
from backends.memory.config import QueueConfig
from backends.memory.dialects import SQS_DIALECT, Dialect
from backends.memory.handles import EXPIRED, HandleRules, stale_delete_problem
from backends.memory.message import Message, MessageSnapshot, MessageState, received_message
from backends.memory.moves import MessageMoveTask, MoveStatus
from backends.memory.queue import FairCounts, Queue, QueueCounts
from backends.memory.reported import ReportedMoves
from worker.clock import Clock
from worker.errors import OverLimit
from worker.rules import SQS_IN_FLIGHT_LIMIT
from worker.types import (
    BatchResult,
    Deletion,
    EntryFailure,
    OutgoingMessage,
    QueueInfo,
    ReceivedMessage,
    VisibilityChange,
)

__all__ = [
    "QUEUE_URL_PREFIX",
    "SQS_DIALECT",
    "UNCHANGED",
    "Dialect",
    "HandleRules",
    "MemoryEngine",
    "MessageMoveTask",
    "MessageSnapshot",
    "MessageState",
    "MoveStatus",
    "QueueConfig",
    "QueueCounts",
    "QueueDescription",
    "Unchanged",
]


class MemoryEngine(ReportedMoves):
    """An SQS model in memory. Synchronous and never sleeps: it reads `clock.now()` per call.

    `max_in_flight` is the in-flight quota of each queue (SQS: 120,000); tests set it low.
    `handle_rules` says how a delete with a stale handle is answered (`HandleRules`).
    Listeners registered with `subscribe` hear the name of each queue whose receivable
    messages may have changed, so an async adapter can long-poll without polling.
    `changes` (if given) hears every change requests make, for a journal. Handles and ids
    carry the engine's own random epoch, kept when a snapshot is restored into it: handles
    never repeat across a restart; `epochs` (its predecessors' too) tells stale from never
    issued.
    """

    def __init__(
        self,
        clock: Clock,
        *,
        dialect: Dialect = SQS_DIALECT,
        max_in_flight: int = SQS_IN_FLIGHT_LIMIT,
        handle_rules: HandleRules = HandleRules.STRICT,
        changes: Changes | None = None,
        epoch: str | None = None,
    ) -> None:
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1, got {max_in_flight}")
        super().__init__(clock, dialect=dialect)
        self.max_in_flight = max_in_flight
        self.handle_rules = HandleRules(handle_rules)
        # Ids need only be unique and opaque: a random prefix and a counter are both, and
        # much cheaper than a uuid4 each at 100,000 messages.
        # `epoch` (12 hex digits) fixes it, for a run that must repeat exactly (a simulation).
        self._id_prefix = secrets.token_hex(6) if epoch is None else _checked_epoch(epoch)
        self._ids = itertools.count(1)
        self.epochs: set[str] = {self._id_prefix}
        self.changes = changes
        self._moves = {}

    # -- messages -----------------------------------------------------------------------

    def queue_info(self, queue: str) -> QueueInfo:
        return replace(super().queue_info(queue), in_flight_limit=self.max_in_flight)

    def send(
        self,
        queue: str,
        messages: Sequence[OutgoingMessage],
        *,
        trace_headers: Mapping[str, str] | None = None,
    ) -> BatchResult:
        """Send a batch; `trace_headers` (by entry id) are the AWSTraceHeader attributes."""
        state = self._settled(queue, "SendMessageBatch")
        rules.check_send_batch(state.config.name, messages, self.dialect)
        succeeded: list[str] = []
        failed: list[EntryFailure] = []
        ids: dict[str, str] = {}
        for message in messages:
            problem = rules.send_problem(state.config, message, self.dialect)
            if problem is None:
                trace = None if trace_headers is None else trace_headers.get(message.entry_id)
                ids[message.entry_id] = self._send_one(state, message, trace)
                succeeded.append(message.entry_id)
            else:
                failed.append(EntryFailure(message.entry_id, *problem))
        if succeeded:
            self._notify(state.config.name)
        return BatchResult(
            succeeded=tuple(succeeded), failed=tuple(failed), message_ids=MappingProxyType(ids)
        )

    def _send_one(self, state: Queue, outgoing: OutgoingMessage, trace: str | None) -> str:
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
            trace_header=trace,
            visible_at=now
            + (state.config.delay_s if outgoing.delay_s is None else outgoing.delay_s),
        )
        state.add(message, now, expires_at=now + state.config.retention_s)
        if dedup_id is not None:
            state.deduplication.remember(dedup_id, message.message_id, now)
        if self.changes is not None:
            self.changes.message(state.config.name, message.message_id, new=True)
            if dedup_id is not None:
                self.changes.deduplication(state.config.name, dedup_id)
        return message.message_id

    def send_problem(self, queue: str, message: OutgoingMessage) -> tuple[str, str] | None:
        """Why SQS would refuse `message` sent alone (SendMessage): (code, reason), or None.
        `send` judges a batch whole first (BatchRequestTooLong), as SendMessageBatch does."""
        state = self._queue(queue, "SendMessage")
        return rules.send_problem(state.config, message, self.dialect)

    def check_batch(self, operation: str, queue: str, entry_ids: Sequence[str]) -> None:
        """The whole-call checks of a batch (count, ids), as `send` and the others make them;
        for a front end that refuses some entries itself before calling the engine."""
        rules.check_batch(operation, self.queue_name(queue), entry_ids, self.dialect)

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
        attempt_id: str | None = None,
    ) -> list[ReceivedMessage]:
        """Take up to `max_messages` receivable messages now; never waits.

        `long_poll` only changes what happens at the in-flight quota: a short poll raises
        `OverLimit`, a long poll gets fewer or no messages (its adapter does the waiting).
        `attempt_id` (FIFO queues): a retried receive gets the same messages
        (`backends.memory.attempts`).
        """
        op = "ReceiveMessage"
        state = self._settled(queue, op)
        name = state.config.name
        if visibility_s is None:
            visibility_s = state.config.visibility_timeout_s
        rules.check_receive(name, max_messages, visibility_s, self.dialect)
        if attempt_id is not None and state.config.fifo:
            retried = state.retry_attempt(attempt_id, visibility_s, self.clock.now())
            if retried is not None:
                self._changed(name, retried)
                return [received_message(state.config, message) for message in retried]
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
            self._changed(name, taken.redriven)
            self._store_redriven(state, taken.redriven)
        self._changed(name, taken.delivered)
        if attempt_id is not None and state.config.fifo and taken.delivered:
            now = self.clock.now()
            state.remember_attempt(attempt_id, taken.delivered, now + ATTEMPT_WINDOW_S)
        return [received_message(state.config, message) for message in taken.delivered]

    def change_visibility(self, queue: str, entries: Sequence[VisibilityChange]) -> BatchResult:
        """Extend or release leases; visibility 0 makes a message visible at once."""
        op = "ChangeMessageVisibilityBatch"
        state = self._settled(queue, op)
        rules.check_batch(op, state.config.name, [e.entry_id for e in entries], self.dialect)
        now = self.clock.now()
        succeeded: list[str] = []
        failed: list[EntryFailure] = []
        new_handles: dict[str, str] = {}
        for entry in entries:
            problem = rules.visibility_problem(entry.visibility_s, self.dialect)
            message_id = state.handles.get(entry.receipt_handle)
            if problem is None:
                problem = state.change_visibility(
                    entry.receipt_handle,
                    entry.visibility_s,
                    now,
                    max_lease_s=self.dialect.max_lease_s,
                )
            if problem is None:
                succeeded.append(entry.entry_id)
                if self.changes is not None and message_id is not None:
                    self.changes.message(state.config.name, message_id)
                if self.dialect.rotates_handles:
                    new_handles[entry.entry_id] = self._rotate(state, entry.receipt_handle)
            else:
                failed.append(EntryFailure(entry.entry_id, *problem))
        if succeeded:
            self._notify(state.config.name)
        return BatchResult(
            succeeded=tuple(succeeded),
            failed=tuple(failed),
            new_handles=MappingProxyType(new_handles),
        )

    def _rotate(self, state: Queue, handle: str) -> str:
        """SMQ: a visibility change retires `handle` and hands out a new one."""
        message_id = state.handles[handle]
        new = self._new_handle(message_id)
        state.rehandle(handle, new)
        return new

    def delete(self, queue: str, entries: Sequence[Deletion]) -> BatchResult:
        op = "DeleteMessageBatch"
        state = self._settled(queue, op)
        rules.check_batch(op, state.config.name, [e.entry_id for e in entries], self.dialect)
        succeeded: list[str] = []
        failed: list[EntryFailure] = []
        for entry in entries:
            problem = self._delete_one(state, entry.receipt_handle)
            if problem is None:
                succeeded.append(entry.entry_id)
            else:
                failed.append(EntryFailure(entry.entry_id, *problem))
        if succeeded:
            # Fewer in flight may unblock a FIFO group or a long poll held at the quota.
            self._notify(state.config.name)
        return BatchResult(succeeded=tuple(succeeded), failed=tuple(failed))

    def _delete_one(self, state: Queue, handle: str) -> tuple[str, str] | None:
        message_id = state.handles.get(handle)
        if message_id is not None:
            message = state.messages[message_id]
            if message.state is not MessageState.IN_FLIGHT:
                if state.config.fifo:
                    return EXPIRED
                if self.dialect.rotates_handles:
                    # SMQ: a handle is good until the message's NextVisibleTime only.
                    return "MessageNotInflight", "the receipt handle has expired"
            state.remove(message)
            self._changed(state.config.name, [message])
            return None
        # Handles are `<epoch><counter>.<message id>` (see `_new_handle`).
        issued = handle[: len(self._id_prefix)] in self.epochs and "." in handle
        return stale_delete_problem(
            # SMQ refuses every stale handle: it has no lenient mode.
            HandleRules.STRICT if self.dialect.rotates_handles else self.handle_rules,
            issued=issued,
            fifo=state.config.fifo,
            still_stored=handle.partition(".")[2] in state.messages,
        )

    # -- for the async adapter ----------------------------------------------------------

    def next_wakeup(self, queue: str) -> float | None:
        """The earliest future time at which a message of `queue` may become receivable.

        That is a delay or a visibility timeout ending; None when nothing is pending. It may
        be early (a message behind a blocked FIFO group), never late: a waiter re-checks.
        """
        timer = self._settled(queue, "ReceiveMessage").next_timer()
        move = self.next_move_due()
        return timer if move is None else move if timer is None else min(timer, move)

    def browse(self, queue: str, max_messages: int) -> list[ReceivedMessage]:
        """Up to `max_messages` visible messages, oldest first, as a receive would answer
        them but with no receipt handle, and nothing changed: no visibility, no receive
        count (a peek, for operators; SQS has none, SMQ has BatchPeekMessage)."""
        state = self._settled(queue, "PeekMessage")
        found = []
        for message_id in itertools.islice(state.visible, max_messages):
            message = state.messages[message_id]
            found.append(received_message(state.config, replace(message, receipt_handle="")))
        return found

    # -- test hooks (not part of SQS) ---------------------------------------------------

    def counts(self, queue: str) -> QueueCounts:
        """Test hook: exact visible / in-flight / delayed counts of `queue`."""
        return self._settled(queue, "GetQueueAttributes").counts()

    def fair_counts(self, queue: str) -> FairCounts:
        """Test hook: SQS's fair-queue metrics of `queue`, exact (`backends.memory.fairness`)."""
        return self._settled(queue, "GetQueueAttributes").fair_counts()

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
        self._changed(state.config.name, [message])
        self._notify(state.config.name)

    # -- internals ----------------------------------------------------------------------

    def _new_id(self) -> str:
        prefix = self._id_prefix
        return f"{prefix[:8]}-{prefix[8:]}-4000-8000-{next(self._ids):012x}"

    def _deliverer(self, visibility_s: int) -> Callable[[Message], None]:
        now = self.clock.now()
        wall_ms = self._wall_ms(now)
        visible_at = now + visibility_s  # one float for the whole batch, not one a message

        def deliver(message: Message) -> None:
            message.receive_count += 1
            if message.first_receive_ms is None:
                message.first_receive_ms = wall_ms
            message.received_at = now
            message.visible_at = visible_at
            message.receipt_handle = self._new_handle(message.message_id)

        return deliver

    def _new_handle(self, message_id: str) -> str:
        return f"{self._id_prefix}{next(self._ids):x}.{message_id}"

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
                dead_letter_source_arn=ARN_PREFIX + source.config.name,
            )
            target.add(moved, now, expires_at=moved.sent_at + target.config.retention_s)
            if self.changes is not None:
                self.changes.message(target.config.name, moved.message_id, new=True)
        self._notify(target.config.name)


def _checked_epoch(epoch: str) -> str:
    if len(epoch) != 12 or any(c not in "0123456789abcdef" for c in epoch):
        raise ValueError(f"epoch must be 12 lower-case hex digits, got {epoch!r}")
    return epoch
