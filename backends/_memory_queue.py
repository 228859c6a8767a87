"""One queue of the in-memory engine: its messages, their states and the indexes over them.

Rules this module keeps (the engine above it validates requests and speaks the protocol):

- A message is in exactly one state: DELAYED (sent, not yet receivable), VISIBLE
  (receivable) or IN_FLIGHT (received, invisible until `visible_at`). A message leaves
  the queue by deletion, by retention expiry, by a purge or by redrive to its DLQ.
- DELAYED and IN_FLIGHT become VISIBLE when `now >= visible_at`. That transition happens
  lazily, in `settle(now)`, which every engine call runs first: nothing here watches time.
- Timers are a heap of `(visible_at, tiebreak, generation, message_id)`. Changing a
  message's visibility bumps its generation and pushes a new entry; the old entry is left
  behind and skipped when popped (lazy deletion), so no call scans all messages.
- Retention is a second heap, `(expires_at, tiebreak, message_id)`; an entry whose message
  is already gone is skipped.
- Only the receipt handle of the latest receive is in `handles`; older ones are forgotten,
  which is what makes them invalid.
- Standard queues hand out VISIBLE messages in the order they became visible.
- FIFO queues group messages by MessageGroupId. A group is *ready* when its first message
  is VISIBLE and none of its messages is IN_FLIGHT; only ready groups are served, from the
  first message on, in send order, stopping at the first message that is not VISIBLE.
- Deduplication ids are remembered for a fixed window from the first send.
"""

from __future__ import annotations

import heapq
import itertools
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

from worker.types import MessageAttribute, ReceivedMessage, RedrivePolicy

__all__ = [
    "Message",
    "MessageSnapshot",
    "MessageState",
    "Queue",
    "QueueConfig",
    "QueueCounts",
    "Taken",
    "received_message",
]

DEDUPLICATION_WINDOW_S = 300.0


class MessageState(StrEnum):
    DELAYED = "delayed"
    VISIBLE = "visible"
    IN_FLIGHT = "in_flight"


@dataclass(slots=True, eq=False, kw_only=True)
class Message:
    """One stored message. Mutable: the queue that holds it updates it in place."""

    message_id: str
    body: str
    message_attributes: Mapping[str, MessageAttribute]
    #: Monotonic time of the (original) send; retention counts from here.
    sent_at: float
    sent_timestamp_ms: int
    group_id: str | None = None
    deduplication_id: str | None = None
    sequence_number: str | None = None
    state: MessageState = MessageState.DELAYED
    visible_at: float = 0.0
    receive_count: int = 0
    first_receive_ms: int | None = None
    #: Monotonic time of the latest receive; the 12 h cap counts from here.
    received_at: float = 0.0
    receipt_handle: str | None = None
    generation: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueConfig:
    name: str
    url: str
    fifo: bool
    visibility_timeout_s: int
    delay_s: int
    retention_s: int
    redrive: RedrivePolicy | None
    content_based_deduplication: bool


@dataclass(frozen=True, slots=True)
class QueueCounts:
    """Test hook: exact counts of one queue (SQS's are approximate)."""

    visible: int
    in_flight: int
    delayed: int


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageSnapshot:
    """Test hook: the state of one message, as `MemoryEngine.peek` sees it."""

    message_id: str
    body: str
    state: MessageState
    receive_count: int
    visible_at: float
    received_at: float | None
    receipt_handle: str | None
    group_id: str | None


@dataclass(slots=True, eq=False)
class _Group:
    ids: OrderedDict[str, None] = field(default_factory=OrderedDict)
    in_flight: int = 0


@dataclass(slots=True)
class Taken:
    """What one receive took from a queue: messages to deliver and messages to redrive."""

    delivered: list[Message] = field(default_factory=list)
    redriven: list[Message] = field(default_factory=list)


class Queue:
    """The state of one queue. Every method takes `now`; none reads a clock."""

    def __init__(self, config: QueueConfig, *, created_at: float = 0.0) -> None:
        self.config = config
        #: Monotonic times of the creation and of the latest attribute change.
        self.created_at = created_at
        self.modified_at = created_at
        self.last_purge_at: float | None = None
        self.messages: dict[str, Message] = {}
        self.visible: OrderedDict[str, None] = OrderedDict()
        self.in_flight: set[str] = set()
        self.delayed: set[str] = set()
        self.handles: dict[str, str] = {}
        self._groups: dict[str, _Group] = {}
        self._ready_groups: OrderedDict[str, None] = OrderedDict()
        self._timers: list[tuple[float, int, int, str]] = []
        self._expiries: list[tuple[float, int, str]] = []
        self._dedup: dict[str, tuple[float, str]] = {}
        self._dedup_expiries: list[tuple[float, str]] = []
        self._tiebreak = itertools.count()
        self._sequence = itertools.count(1)

    # -- time ---------------------------------------------------------------------------

    def settle(self, now: float) -> None:
        """Apply every transition due at `now`: expiries, then visibility ends."""
        while self._expiries and self._expiries[0][0] <= now:
            _, _, message_id = heapq.heappop(self._expiries)
            message = self.messages.get(message_id)
            if message is not None:
                self.remove(message)
        while self._timers and self._timers[0][0] <= now:
            _, _, generation, message_id = heapq.heappop(self._timers)
            if self._is_live(generation, message_id):
                self._make_visible(self.messages[message_id])
        while self._dedup_expiries and self._dedup_expiries[0][0] <= now:
            expires_at, dedup_id = heapq.heappop(self._dedup_expiries)
            if self._dedup.get(dedup_id, (None, ""))[0] == expires_at:
                del self._dedup[dedup_id]

    def next_timer(self) -> float | None:
        """When the next DELAYED or IN_FLIGHT message turns VISIBLE (call after `settle`)."""
        while self._timers:
            visible_at, _, generation, message_id = self._timers[0]
            if self._is_live(generation, message_id):
                return visible_at
            heapq.heappop(self._timers)
        return None

    # -- adding and removing ------------------------------------------------------------

    def add(self, message: Message, now: float, *, expires_at: float) -> None:
        """Store a new message; it is VISIBLE at once unless `visible_at` is later than now."""
        self.messages[message.message_id] = message
        if self.config.fifo:
            message.sequence_number = f"{next(self._sequence):020d}"
        if message.group_id is not None and self.config.fifo:
            self._groups.setdefault(message.group_id, _Group()).ids[message.message_id] = None
        heapq.heappush(self._expiries, (expires_at, next(self._tiebreak), message.message_id))
        if len(self._expiries) > 2 * len(self.messages) + 64:
            # Deleted messages leave their entries for days of retention; prune them.
            self._expiries = [e for e in self._expiries if e[2] in self.messages]
            heapq.heapify(self._expiries)
        if message.visible_at > now:
            message.state = MessageState.DELAYED
            self.delayed.add(message.message_id)
            self._push_timer(message)
        else:
            self._make_visible(message)

    def remove(self, message: Message) -> None:
        """Forget a message, wherever it is (deletion, expiry, redrive)."""
        message_id = message.message_id
        del self.messages[message_id]
        self.visible.pop(message_id, None)
        self.in_flight.discard(message_id)
        self.delayed.discard(message_id)
        if message.receipt_handle is not None:
            self.handles.pop(message.receipt_handle, None)
        if message.group_id is not None and self.config.fifo:
            group = self._groups[message.group_id]
            del group.ids[message_id]
            if message.state is MessageState.IN_FLIGHT:
                group.in_flight -= 1
            self._refresh_group(message.group_id)

    def purge(self, now: float) -> None:
        """Drop every message; deduplication ids stay remembered, as on SQS."""
        self.messages.clear()
        self.visible.clear()
        self.in_flight.clear()
        self.delayed.clear()
        self.handles.clear()
        self._groups.clear()
        self._ready_groups.clear()
        self._timers.clear()
        self._expiries.clear()
        self.last_purge_at = now

    def set_retention(self, retention_s: int) -> None:
        """Apply a new retention period to every stored message, counted from its send."""
        self._expiries = [
            (message.sent_at + retention_s, next(self._tiebreak), message_id)
            for message_id, message in self.messages.items()
        ]
        heapq.heapify(self._expiries)

    # -- visibility ---------------------------------------------------------------------

    def set_visible_at(self, message: Message, visible_at: float, now: float) -> None:
        """Move an IN_FLIGHT message's visibility end (to now at the earliest)."""
        message.visible_at = visible_at
        message.generation += 1
        self._push_timer(message)
        if visible_at <= now:
            self.settle(now)

    def change_visibility(
        self, handle: str, visibility_s: int, now: float, *, max_lease_s: int
    ) -> tuple[str, str] | None:
        """Apply one visibility change; returns the failure's (code, reason) if refused."""
        message_id = self.handles.get(handle)
        if message_id is None:
            return "ReceiptHandleIsInvalid", "not the latest receipt handle of a stored message"
        message = self.messages[message_id]
        if message.state is not MessageState.IN_FLIGHT:
            return "MessageNotInflight", "the message is not in flight"
        visible_at = now + visibility_s
        if visible_at > message.received_at + max_lease_s:
            return "InvalidParameterValue", f"invisible past {max_lease_s} s from its receive"
        self.set_visible_at(message, visible_at, now)
        return None

    def delete(self, handle: str) -> bool:
        """Delete by the latest receipt handle, in flight or not; False if it is not one."""
        message_id = self.handles.get(handle)
        if message_id is None:
            return False
        self.remove(self.messages[message_id])
        return True

    def take(
        self,
        count: int,
        *,
        room: int,
        deliver: Callable[[Message], None],
        redrive: Callable[[Message], bool],
    ) -> Taken:
        """Take up to `count` receivable messages, never more than `room` put in flight.

        `redrive(message)` says whether a message goes to the DLQ instead; such messages
        are removed and returned for the engine to store elsewhere. `deliver(message)`
        updates the message for this receive (count, handle, visibility end) before the
        queue marks it IN_FLIGHT.
        """
        taken = Taken()
        limit = len(self.in_flight) + room
        if self.config.fifo:
            self._take_fifo(taken, count, limit, deliver, redrive)
        else:
            self._take_standard(taken, count, limit, deliver, redrive)
        return taken

    def _take_standard(
        self,
        taken: Taken,
        count: int,
        limit: int,
        deliver: Callable[[Message], None],
        redrive: Callable[[Message], bool],
    ) -> None:
        while len(taken.delivered) < count and self.visible and len(self.in_flight) < limit:
            message = self.messages[next(iter(self.visible))]
            if redrive(message):
                self.remove(message)
                taken.redriven.append(message)
            else:
                self._mark_in_flight(message, deliver)
                taken.delivered.append(message)

    def _take_fifo(
        self,
        taken: Taken,
        count: int,
        limit: int,
        deliver: Callable[[Message], None],
        redrive: Callable[[Message], bool],
    ) -> None:
        while len(taken.delivered) < count and self._ready_groups and len(self.in_flight) < limit:
            group_id, _ = self._ready_groups.popitem(last=False)
            moved: list[Message] = []
            for message_id in self._groups[group_id].ids:
                message = self.messages[message_id]
                full = len(taken.delivered) >= count or len(self.in_flight) >= limit
                if full or message.state is not MessageState.VISIBLE:
                    break
                if redrive(message):
                    moved.append(message)
                else:
                    self._mark_in_flight(message, deliver)
                    taken.delivered.append(message)
            # Removing changes the group's ordered ids, so it waits until the walk is over.
            for message in moved:
                self.remove(message)
            taken.redriven.extend(moved)
            self._refresh_group(group_id)

    # -- deduplication ------------------------------------------------------------------

    def duplicate_of(self, dedup_id: str, now: float) -> str | None:
        """The message id first sent with `dedup_id` inside the window, if any."""
        entry = self._dedup.get(dedup_id)
        if entry is None or entry[0] <= now:
            return None
        return entry[1]

    def remember(self, dedup_id: str, message_id: str, now: float) -> None:
        expires_at = now + DEDUPLICATION_WINDOW_S
        self._dedup[dedup_id] = (expires_at, message_id)
        heapq.heappush(self._dedup_expiries, (expires_at, dedup_id))

    # -- test hooks ---------------------------------------------------------------------

    def counts(self) -> QueueCounts:
        return QueueCounts(len(self.visible), len(self.in_flight), len(self.delayed))

    def snapshot(self, message_id: str) -> MessageSnapshot | None:
        message = self.messages.get(message_id)
        if message is None:
            return None
        return MessageSnapshot(
            message_id=message.message_id,
            body=message.body,
            state=message.state,
            receive_count=message.receive_count,
            visible_at=message.visible_at,
            received_at=message.received_at if message.receive_count else None,
            receipt_handle=message.receipt_handle,
            group_id=message.group_id,
        )

    # -- internals ----------------------------------------------------------------------

    def _push_timer(self, message: Message) -> None:
        entry = (message.visible_at, next(self._tiebreak), message.generation, message.message_id)
        heapq.heappush(self._timers, entry)
        # Each extension leaves a stale entry that is only dropped when it comes due; with
        # long visibilities extended often they would pile up, so prune now and then
        # (amortized O(1): the heap at least halves each time).
        if len(self._timers) > 2 * len(self.messages) + 64:
            self._timers = [t for t in self._timers if self._is_live(t[2], t[3])]
            heapq.heapify(self._timers)

    def _is_live(self, generation: int, message_id: str) -> bool:
        message = self.messages.get(message_id)
        return message is not None and message.generation == generation

    def _make_visible(self, message: Message) -> None:
        message_id = message.message_id
        if message.state is MessageState.IN_FLIGHT:
            self.in_flight.discard(message_id)
            if message.group_id is not None and self.config.fifo:
                self._groups[message.group_id].in_flight -= 1
        else:
            self.delayed.discard(message_id)
        message.state = MessageState.VISIBLE
        self.visible[message_id] = None
        if message.group_id is not None and self.config.fifo:
            self._refresh_group(message.group_id)

    def _mark_in_flight(self, message: Message, deliver: Callable[[Message], None]) -> None:
        old_handle = message.receipt_handle
        deliver(message)
        if old_handle is not None:
            del self.handles[old_handle]
        assert message.receipt_handle is not None, "deliver() must set a receipt handle"
        self.handles[message.receipt_handle] = message.message_id
        del self.visible[message.message_id]
        self.in_flight.add(message.message_id)
        message.state = MessageState.IN_FLIGHT
        message.generation += 1
        self._push_timer(message)
        if message.group_id is not None and self.config.fifo:
            self._groups[message.group_id].in_flight += 1

    def _refresh_group(self, group_id: str) -> None:
        """Keep `_ready_groups` true to the rule: head VISIBLE and nothing IN_FLIGHT."""
        group = self._groups.get(group_id)
        if group is None:
            return
        if not group.ids:
            del self._groups[group_id]
            self._ready_groups.pop(group_id, None)
            return
        head = self.messages[next(iter(group.ids))]
        if group.in_flight == 0 and head.state is MessageState.VISIBLE:
            self._ready_groups.setdefault(group_id, None)
        else:
            self._ready_groups.pop(group_id, None)


def received_message(config: QueueConfig, message: Message) -> ReceivedMessage:
    """The message as a receive returns it, system attributes spelled as SQS spells them."""
    attributes = {
        "SenderId": "000000000000",
        "SentTimestamp": str(message.sent_timestamp_ms),
        "ApproximateReceiveCount": str(message.receive_count),
        "ApproximateFirstReceiveTimestamp": str(message.first_receive_ms),
    }
    if message.group_id is not None:
        attributes["MessageGroupId"] = message.group_id
    if config.fifo:
        attributes["MessageDeduplicationId"] = str(message.deduplication_id)
        attributes["SequenceNumber"] = str(message.sequence_number)
    assert message.receipt_handle is not None, "only a received message is returned"
    return ReceivedMessage(
        queue=config.name,
        message_id=message.message_id,
        receipt_handle=message.receipt_handle,
        body=message.body,
        receive_count=message.receive_count,
        attributes=MappingProxyType(attributes),
        message_attributes=message.message_attributes,
    )
