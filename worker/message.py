"""`Message`: what a handler receives."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from worker.core.lease import Lease
from worker.types import MessageAttribute, ReceivedMessage

__all__ = ["Message"]


class Message:
    """One received message: decoded body, attributes, receive count and its lease.

    `body` is the decoded body (JSON by default); `raw_body` the string as received.
    `lease.deadline`, `lease.time_left_s()`, `await lease.extend(s)` and `lease.lost` let a
    handler look at or act on its lease; the runtime extends it on its own.
    """

    __slots__ = ("_received", "body", "lease")

    def __init__(self, received: ReceivedMessage, body: Any, lease: Lease) -> None:
        self._received = received
        self.body = body
        self.lease = lease

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
        return self.lease.receipt_handle
