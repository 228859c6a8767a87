"""`Message`: what a handler receives."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from worker.core.lease import Lease, LeaseView
from worker.types import MessageAttribute, ReceivedMessage

__all__ = ["Message", "lease_of"]


class Message:
    """One received message: decoded body, attributes, receive count and its lease.

    `body` is the decoded body (JSON by default); `raw_body` the string as received.
    `lease.deadline`, `lease.time_left_s()`, `await lease.extend(s)`, `lease.lost` and
    `lease.ensure_held()` let a handler look at or act on its lease (a read-only
    `LeaseView`); the runtime extends it on its own.
    """

    __slots__ = ("_lease", "_received", "_view", "body")

    def __init__(self, received: ReceivedMessage, body: Any, lease: Lease) -> None:
        self._received = received
        self.body = body
        self._lease = lease
        self._view: LeaseView | None = None

    @property
    def lease(self) -> LeaseView:
        """The message's lease, as a handler sees it (made on first use)."""
        view = self._view
        if view is None:
            view = self._view = LeaseView(self._lease)
        return view

    def __repr__(self) -> str:  # never the body: it may hold personal data
        return f"<Message {self.queue}/{self.message_id} receive_count={self.receive_count}>"

    @property
    def queue(self) -> str:
        return self._received.queue

    @property
    def message_id(self) -> str:
        return self._received.message_id

    @property
    def raw_body(self) -> str:
        return self._received.body

    @property
    def receive_count(self) -> int:
        return self._received.receive_count

    @property
    def attributes(self) -> Mapping[str, str]:
        return self._received.attributes

    @property
    def message_attributes(self) -> Mapping[str, MessageAttribute]:
        return self._received.message_attributes

    @property
    def group_id(self) -> str | None:
        return self._received.group_id

    @property
    def receipt_handle(self) -> str:
        """The current receipt handle (it may change on backends that renew handles)."""
        return self._lease.receipt_handle


def lease_of(message: Message) -> Lease:
    """The runtime's own lease behind `message.lease` (for the runtime, not handlers)."""
    return message._lease
