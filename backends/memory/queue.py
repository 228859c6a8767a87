"""One queue of the in-memory engine: its messages, their states and the indexes over them.

Rules this module keeps (above it, `backends.memory.rules` checks requests and the engine
speaks the protocol):

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
- Standard queues hand out VISIBLE messages in the order they became visible, but for SQS
  fair queues: once a message with a MessageGroupId arrives, its group is a tenant, and
  while one tenant is noisy, quiet tenants' messages go first (`backends.memory.fairness`).
- FIFO queues serve only ready groups (`backends.memory.groups`), from the first message
  on, in send order, stopping at the first message that is not VISIBLE.
"""

from __future__ import annotations

import heapq
import itertools
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from backends.memory.attempts import ReceiveAttempts
from backends.memory.config import QueueConfig
from backends.memory.dedup import DeduplicationWindow
from backends.memory.fairness import FairCounts, Tenants
from backends.memory.groups import MessageGroups
from backends.memory.message import (
    Message,
    MessageSnapshot,
    MessageState,
    received_message,
    snapshot,
)
from backends.memory.tags import Permission

__all__ = [
    "FairCounts",
    "Message",
    "MessageSnapshot",
    "MessageState",
    "Queue",
    "QueueCounts",
    "Taken",
    "received_message",
]


@dataclass(frozen=True, slots=True)
class QueueCounts:
    """Test hook: exact counts of one queue (SQS's are approximate)."""

    visible: int
    in_flight: int
    delayed: int


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
        self._groups = MessageGroups(self.messages, fifo=config.fifo)
        #: Fair-queue tenants (standard queues), from the first message with a group id on.
        self._tenants: Tenants | None = None
        self._timers: list[tuple[float, int, int, str]] = []
        self._expiries: list[tuple[float, int, str]] = []
        self.deduplication = DeduplicationWindow()
        self.attempts = ReceiveAttempts()
        self.tags: dict[str, str] = {}
        #: Attributes a front end keeps for a queue without the engine modelling them.
        self.kept_attributes: dict[str, str] = {}
        #: AddPermission grants by label.
        self.permissions: dict[str, Permission] = {}
        self._tiebreak = itertools.count()
        #: The next FIFO sequence number (a plain int, so a snapshot can carry it on).
        self.next_sequence = 1

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
        self.deduplication.settle(now)

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
            message.sequence_number = f"{self.next_sequence:020d}"
            self.next_sequence += 1
        self._groups.add(message)
        self._track_tenant(message)
        heapq.heappush(self._expiries, (expires_at, next(self._tiebreak), message.message_id))
        if len(self._expiries) > 2 * len(self.messages) + 64:
            # Deleted messages leave their entries for days of retention; prune them.
            self._expiries = [e for e in self._expiries if e[2] in self.messages]
            heapq.heapify(self._expiries)
        if message.visible_at > now:
            message.state = MessageState.DELAYED
            self.delayed.add(message.message_id)
            self._push_timer(message)
            if self._tenants is not None:
                self._tenants.entered(message)
        else:
            self._make_visible(message)

    def restore(self, message: Message, *, expires_at: float) -> None:
        """Put back a saved message in its saved state, handle and all
        (`backends.memory.snapshot`); call `settle` once all are back."""
        self.messages[message.message_id] = message
        self._groups.add(message)
        self._track_tenant(message)
        heapq.heappush(self._expiries, (expires_at, next(self._tiebreak), message.message_id))
        if message.state is MessageState.IN_FLIGHT:
            assert message.receipt_handle is not None, "a message in flight has a handle"
            self.handles[message.receipt_handle] = message.message_id
            self.in_flight.add(message.message_id)
            self._push_timer(message)
            self._groups.took_flight(message)
        elif message.state is MessageState.DELAYED:
            self.delayed.add(message.message_id)
            self._push_timer(message)
        else:
            if message.receipt_handle is not None:
                self.handles[message.receipt_handle] = message.message_id
            self._make_visible(message)
        if self._tenants is not None and message.state is not MessageState.VISIBLE:
            self._tenants.entered(message)

    # -- FIFO receive attempts (`backends.memory.attempts`) --------------------------------

    def remember_attempt(self, attempt_id: str, taken: list[Message], expires_at: float) -> None:
        self.attempts.remember(attempt_id, _taken(taken), expires_at)

    def retry_attempt(self, attempt_id: str, visibility_s: int, now: float) -> list[Message] | None:
        """The messages of an earlier receive with `attempt_id`, their visibility timeout
        started again; None when there was none, or one of them was modified since."""
        attempt = self.attempts.recall(attempt_id, now)
        if attempt is None:
            return None
        kept: list[Message] = []
        for message_id, handle, generation in attempt.taken:
            message = self.messages.get(message_id)
            if (
                message is None
                or message.state is not MessageState.IN_FLIGHT
                or message.receipt_handle != handle
                or message.generation != generation
            ):
                return None
            kept.append(message)
        for message in kept:
            self.set_visible_at(message, now + visibility_s, now)
        self.remember_attempt(attempt_id, kept, attempt.expires_at)
        return kept

    def remove(self, message: Message) -> None:
        """Forget a message, wherever it is (deletion, expiry, redrive)."""
        message_id = message.message_id
        del self.messages[message_id]
        self.visible.pop(message_id, None)
        self.in_flight.discard(message_id)
        self.delayed.discard(message_id)
        if message.receipt_handle is not None:
            self.handles.pop(message.receipt_handle, None)
        self._groups.remove(message)
        if self._tenants is not None:
            self._tenants.left(message)

    def purge(self, now: float) -> None:
        """Drop every message; deduplication ids stay remembered, as on SQS."""
        self.messages.clear()
        self.visible.clear()
        self.in_flight.clear()
        self.delayed.clear()
        self.handles.clear()
        self._groups.clear()
        self._tenants = None
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

    def rehandle(self, handle: str, new_handle: str) -> None:
        """Retire `handle` (the latest of a stored message) for `new_handle` (SMQ's visibility
        change): from now on only the new one is valid."""
        message_id = self.handles.pop(handle)
        self.handles[new_handle] = message_id
        self.messages[message_id].receipt_handle = new_handle

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
            fair = None if self._tenants is None else self._tenants.pick()
            message = self.messages[next(iter(self.visible)) if fair is None else fair]
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
        while len(taken.delivered) < count and len(self.in_flight) < limit:
            group_id = self._groups.pop_ready()
            if group_id is None:
                break
            moved: list[Message] = []
            for message_id in self._groups.message_ids(group_id):
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
            self._groups.refresh(group_id)

    # -- test hooks ---------------------------------------------------------------------

    def counts(self) -> QueueCounts:
        return QueueCounts(len(self.visible), len(self.in_flight), len(self.delayed))

    def fair_counts(self) -> FairCounts:
        """The counts with noisy tenants' messages left out, as SQS's fair-queue metrics."""
        visible, in_flight, delayed = len(self.visible), len(self.in_flight), len(self.delayed)
        if self._tenants is None:
            return FairCounts(0, visible, in_flight, delayed)
        return self._tenants.counts(visible, in_flight, delayed)

    def snapshot(self, message_id: str) -> MessageSnapshot | None:
        message = self.messages.get(message_id)
        return None if message is None else snapshot(message)

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
        was_in_flight = message.state is MessageState.IN_FLIGHT
        tenants, was = self._tenants, None
        if tenants is not None and (was_in_flight or message_id in self.delayed):
            was = message.state  # (a message new or restored VISIBLE was in neither set)
        if was_in_flight:
            self.in_flight.discard(message_id)
        else:
            self.delayed.discard(message_id)
        message.state = MessageState.VISIBLE
        self.visible[message_id] = None
        self._groups.became_visible(message, was_in_flight=was_in_flight)
        if tenants is not None:
            tenants.shown(message, was)

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
        self._groups.took_flight(message)
        if self._tenants is not None:
            self._tenants.taken(message)

    def _track_tenant(self, message: Message) -> None:
        """Start keeping fair-queue tenants at a standard queue's first grouped message."""
        if self._tenants is None and message.group_id is not None and not self.config.fifo:
            self._tenants = Tenants(self.visible, self.in_flight)


def _taken(messages: list[Message]) -> tuple[tuple[str, str, int], ...]:
    return tuple((m.message_id, str(m.receipt_handle), m.generation) for m in messages)
