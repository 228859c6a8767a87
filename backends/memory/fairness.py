"""The tenants of one standard queue of the in-memory engine, and which are noisy: SQS fair
queues.

Rules this module keeps, as the SQS developer guide describes fair queues ("How Amazon SQS
fair queues work"):

- On a standard queue a message's MessageGroupId names its tenant. A message without one is
  a tenant of its own, so it is never noisy.
- A tenant is *noisy* while it holds more than a tenth of the queue's in-flight messages and
  at least 30 of its own (SQS: "more than 10% of in-flight messages and at least 30").
- While some tenant is noisy, a receive hands out the oldest visible message of a quiet
  tenant ("older" meaning it turned visible earlier, the plain order of a standard queue).
  Only when no quiet tenant has one does it take a noisy tenant's, from the noisy tenant
  with the fewest messages in flight. With no tenant noisy, the plain order holds.
- Where the engine is simpler than SQS: SQS also calls a tenant noisy for more than 10% of
  recent consumer processing time, and keeps one noisy until its shares fall back, its
  backlog is drained or 5 minutes pass without a send; thresholds there are approximate.
  The engine has no notion of processing time and judges exactly, from the counts as they
  stand as each message is handed out, so tests can say what happens.

Cost: the queue reports each move of a message in O(1), and while no tenant is noisy
nothing else happens. A receive while one is noisy finds the oldest quiet message on a heap
of tenants (O(log tenants), amortized over the moves that made entries stale). The noisy
set is kept exact per move without scanning tenants: a tenant turns noisy only when its
own count moves or the in-flight total falls to one less than ten times its count, and
stops only when its own count moves or the total rises to ten times it; both are one
lookup by count. A queue that never saw a group id has no `Tenants` at all.
"""

from __future__ import annotations

import heapq
import itertools
from collections import OrderedDict
from collections.abc import Collection
from dataclasses import dataclass

from backends.memory.message import Message, MessageState

__all__ = ["NOISY_MIN_IN_FLIGHT", "NOISY_SHARE_ONE_IN", "FairCounts", "Tenants"]

#: A noisy tenant holds at least this many messages in flight...
NOISY_MIN_IN_FLIGHT = 30
#: ...and more than one in this many of the queue's in-flight messages (10%).
NOISY_SHARE_ONE_IN = 10

# Messages without a group id share one ordered stream: each is its own tenant, never noisy.
_Tenant = str | None


@dataclass(frozen=True, slots=True)
class FairCounts:
    """Test hook: what SQS's fair-queue CloudWatch metrics would read, exact here."""

    #: ApproximateNumberOfNoisyGroups.
    noisy_groups: int
    #: ApproximateNumberOfMessagesVisibleInQuietGroups.
    visible_in_quiet_groups: int
    #: ApproximateNumberOfMessagesNotVisibleInQuietGroups.
    in_flight_in_quiet_groups: int
    #: ApproximateNumberOfMessagesDelayedInQuietGroups.
    delayed_in_quiet_groups: int


class Tenants:
    """The tenants over a standard queue's `in_flight` ids (its own set, only counted here).

    The queue reports every move of a message, after its own sets are updated: `taken`
    (received), `shown` (turned visible), and otherwise `entered(message)` once the message
    has its state, `left(message)` while it still has the one it leaves. `visible` seeds the
    ungrouped stream, in order, when the queue's first grouped message arrives (so every
    message already there has no group).
    """

    def __init__(self, visible: Collection[str], in_flight: Collection[str]) -> None:
        self._visible_ids = visible
        self._in_flight_ids = in_flight
        self._seq = itertools.count()
        #: Each tenant's visible message ids, oldest first, with the order they turned visible.
        self._visible: dict[_Tenant, OrderedDict[str, int]] = {}
        #: One (sequence, tenant) a tenant: no later than its oldest visible message's
        #: sequence (that only grows), brought up to date when met in `pick`, so the plain
        #: path pushes nothing. `_queued` holds the sequence of each tenant's entry.
        self._heads: list[tuple[int, _Tenant]] = []
        self._queued: dict[_Tenant, int] = {}
        self._in_flight: dict[str, int] = {}
        self._delayed: dict[str, int] = {}
        #: Tenants with at least NOISY_MIN_IN_FLIGHT in flight, by their count.
        self._by_count: dict[int, set[str]] = {}
        self._noisy: set[str] = set()
        for message_id in visible:
            self._became_visible(message_id, None)

    # -- moves the queue reports --------------------------------------------------------

    def taken(self, message: Message) -> None:
        """`message` has just been received (VISIBLE to IN_FLIGHT)."""
        self._left_visible(message.message_id, message.group_id)
        self._took_flight(message.group_id)

    def shown(self, message: Message, was: MessageState | None) -> None:
        """`message` has just turned VISIBLE from `was` (None: it was in no state yet)."""
        if was is MessageState.IN_FLIGHT:
            self._left_flight(message.group_id)
        elif was is MessageState.DELAYED:
            self._count_delayed(message.group_id, -1)
        self._became_visible(message.message_id, message.group_id)

    def entered(self, message: Message) -> None:
        """`message` has just turned DELAYED, VISIBLE or IN_FLIGHT (its state now)."""
        if message.state is MessageState.VISIBLE:
            self._became_visible(message.message_id, message.group_id)
        elif message.state is MessageState.IN_FLIGHT:
            self._took_flight(message.group_id)
        else:
            self._count_delayed(message.group_id, +1)

    def left(self, message: Message) -> None:
        """`message` is leaving its state (still set): moved on, or gone from the queue."""
        if message.state is MessageState.VISIBLE:
            self._left_visible(message.message_id, message.group_id)
        elif message.state is MessageState.IN_FLIGHT:
            self._left_flight(message.group_id)
        else:
            self._count_delayed(message.group_id, -1)

    def _became_visible(self, message_id: str, tenant: _Tenant) -> None:
        stream = self._visible.get(tenant)
        seq = next(self._seq)
        if stream is not None:
            stream[message_id] = seq
            return
        self._visible[tenant] = OrderedDict({message_id: seq})
        if tenant not in self._queued:
            self._push_head(seq, tenant)

    def _left_visible(self, message_id: str, tenant: _Tenant) -> None:
        stream = self._visible[tenant]
        del stream[message_id]
        if not stream:
            del self._visible[tenant]

    def _took_flight(self, tenant: _Tenant) -> None:
        if tenant is not None:
            self._recount(tenant, +1)
        # A larger total ends the noise of exactly the tenants whose count times ten it
        # now equals (no longer more than a tenth).
        edge, remainder = divmod(len(self._in_flight_ids), NOISY_SHARE_ONE_IN)
        if remainder == 0 and self._noisy:
            self._noisy.difference_update(self._by_count.get(edge, ()))
        if tenant is not None and self._is_noisy(tenant):
            self._noisy.add(tenant)

    def _left_flight(self, tenant: _Tenant) -> None:
        if tenant is not None:
            self._recount(tenant, -1)
            if not self._is_noisy(tenant):
                self._noisy.discard(tenant)
        # A smaller total makes noisy exactly the tenants whose count times ten is now one
        # more than the total (they were at the edge, and their own counts did not move).
        edge, remainder = divmod(len(self._in_flight_ids) + 1, NOISY_SHARE_ONE_IN)
        if remainder == 0:
            self._noisy.update(self._by_count.get(edge, ()))

    def _count_delayed(self, tenant: _Tenant, change: int) -> None:
        if tenant is not None:
            count = self._delayed.get(tenant, 0) + change
            if count:
                self._delayed[tenant] = count
            else:
                del self._delayed[tenant]

    # -- serving ------------------------------------------------------------------------

    def pick(self) -> str | None:
        """The id of the message fairness hands out next; None where the queue's own order
        gives the same (no tenant noisy, or all that is visible one noisy tenant's)."""
        if not self._noisy:
            return None
        noisy = [stream for t in self._noisy if (stream := self._visible.get(t))]
        if sum(map(len, noisy)) == len(self._visible_ids):  # no quiet tenant has any
            # One noisy tenant holds all that is visible: the plain order serves it.
            return None if len(noisy) < 2 else self._least_busy_noisy_head()
        heads, set_aside = self._heads, []
        found: str | None = None
        while heads and found is None:
            seq, tenant = heads[0]
            head = self._head(tenant)
            if head is None:  # nothing visible: the tenant gets an entry when it has
                heapq.heappop(heads)
                del self._queued[tenant]
            elif head[1] != seq:  # its oldest was taken since: move the entry up to date
                heapq.heapreplace(heads, (head[1], tenant))
                self._queued[tenant] = head[1]
            elif tenant in self._noisy:
                set_aside.append(heapq.heappop(heads))
            else:
                found = head[0]
        for entry in set_aside:
            heapq.heappush(heads, entry)
        return found if found is not None else self._least_busy_noisy_head()

    def counts(self, visible: int, in_flight: int, delayed: int) -> FairCounts:
        """The queue's counts (all tenants) with the noisy tenants' share taken out."""
        noisy = self._noisy
        return FairCounts(
            noisy_groups=len(noisy),
            visible_in_quiet_groups=visible - sum(len(self._visible.get(t, ())) for t in noisy),
            in_flight_in_quiet_groups=in_flight - sum(self._in_flight[t] for t in noisy),
            delayed_in_quiet_groups=delayed - sum(self._delayed.get(t, 0) for t in noisy),
        )

    # -- internals ----------------------------------------------------------------------

    def _is_noisy(self, tenant: str) -> bool:
        count = self._in_flight.get(tenant, 0)
        return count >= NOISY_MIN_IN_FLIGHT and count * NOISY_SHARE_ONE_IN > len(
            self._in_flight_ids
        )

    def _recount(self, tenant: str, change: int) -> None:
        counts, by_count = self._in_flight, self._by_count
        old = counts.get(tenant, 0)
        new = old + change
        if new:
            counts[tenant] = new
        else:
            del counts[tenant]
        if old >= NOISY_MIN_IN_FLIGHT:
            at_old = by_count[old]
            if len(at_old) == 1:
                del by_count[old]
            else:
                at_old.discard(tenant)
        if new >= NOISY_MIN_IN_FLIGHT:
            at_new = by_count.get(new)
            if at_new is None:
                by_count[new] = {tenant}
            else:
                at_new.add(tenant)

    def _head(self, tenant: _Tenant) -> tuple[str, int] | None:
        stream = self._visible.get(tenant)
        return None if stream is None else next(iter(stream.items()))

    def _least_busy_noisy_head(self) -> str | None:
        """The oldest visible message of the noisy tenant with the fewest in flight."""
        best: tuple[int, int, str] | None = None
        for tenant in self._noisy:
            head = self._head(tenant)
            if head is not None:
                key = (self._in_flight[tenant], head[1], head[0])
                best = key if best is None or key < best else best
        return None if best is None else best[2]

    def _push_head(self, seq: int, tenant: _Tenant) -> None:
        heapq.heappush(self._heads, (seq, tenant))
        self._queued[tenant] = seq
        # Tenants that had visible messages once keep their entries until `pick` meets
        # them; with many tenants and no noise, rebuild now and then from those that have
        # some (amortized O(1): the heap at least halves each time).
        if len(self._heads) > 2 * len(self._visible) + 64:
            self._queued = {t: next(iter(s.values())) for t, s in self._visible.items()}
            self._heads = [(seq, t) for t, seq in self._queued.items()]
            heapq.heapify(self._heads)
