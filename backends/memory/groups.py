"""The message groups of one FIFO queue of the in-memory engine, and which of them are ready.

Rules this module keeps:

- FIFO queues group messages by MessageGroupId. A group is *ready* when its first message
  is VISIBLE and none of its messages is IN_FLIGHT. A standard queue groups nothing.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from backends.memory.message import Message, MessageState

__all__ = ["MessageGroups"]


@dataclass(slots=True, eq=False)
class _Group:
    ids: OrderedDict[str, None] = field(default_factory=OrderedDict)
    in_flight: int = 0


class MessageGroups:
    """The groups over a queue's `messages` (its own dict, only read here), in send order.

    The queue reports each message's arrival, departure and state changes; the groups keep
    their in-flight counts and the ready set from that, so serving never scans the queue.
    """

    def __init__(self, messages: Mapping[str, Message], *, fifo: bool) -> None:
        self._messages = messages
        self._fifo = fifo
        self._groups: dict[str, _Group] = {}
        self._ready: OrderedDict[str, None] = OrderedDict()

    def add(self, message: Message) -> None:
        """Append a new message to its group; readiness waits until it is VISIBLE."""
        if self._fifo and message.group_id is not None:
            self._groups.setdefault(message.group_id, _Group()).ids[message.message_id] = None

    def remove(self, message: Message) -> None:
        """Forget a message that has left the queue (already gone from `messages`)."""
        if self._fifo and message.group_id is not None:
            group = self._groups[message.group_id]
            del group.ids[message.message_id]
            if message.state is MessageState.IN_FLIGHT:
                group.in_flight -= 1
            self.refresh(message.group_id)

    def took_flight(self, message: Message) -> None:
        """Count a message just put IN_FLIGHT (its group was taken off the ready set)."""
        if self._fifo and message.group_id is not None:
            self._groups[message.group_id].in_flight += 1

    def became_visible(self, message: Message, *, was_in_flight: bool) -> None:
        """Update the group of a message that has just turned VISIBLE."""
        if self._fifo and message.group_id is not None:
            if was_in_flight:
                self._groups[message.group_id].in_flight -= 1
            self.refresh(message.group_id)

    def pop_ready(self) -> str | None:
        """Take the ready group that became ready first off the ready set; None if none."""
        if not self._ready:
            return None
        return self._ready.popitem(last=False)[0]

    def message_ids(self, group_id: str) -> Iterable[str]:
        """The ids of a group's messages, in send order (do not remove any while walking)."""
        return self._groups[group_id].ids

    def refresh(self, group_id: str) -> None:
        """Keep the ready set true to the rule: head VISIBLE and nothing IN_FLIGHT."""
        group = self._groups.get(group_id)
        if group is None:
            return
        if not group.ids:
            del self._groups[group_id]
            self._ready.pop(group_id, None)
            return
        head = self._messages[next(iter(group.ids))]
        if group.in_flight == 0 and head.state is MessageState.VISIBLE:
            self._ready.setdefault(group_id, None)
        else:
            self._ready.pop(group_id, None)

    def clear(self) -> None:
        self._groups.clear()
        self._ready.clear()
