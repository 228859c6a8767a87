"""The `Backend` protocol: what the runtime asks of a queue service, and its `Limits`.

The lease keeper and the settler read `Limits` and never name a backend. Two services are in
view: SQS (batches of 10 for everything, release to visibility 0, a visibility change keeps
the receipt handle) and Alibaba Cloud SMQ (receive and delete 16 at a time, one extension per
call that hands back a *new* receipt handle, shortest release 1 s).

Contract, for every implementation:
- `receive` long-polls up to `wait_s` and returns as soon as a message is available; it may
  return fewer than `max_messages`, or none. Cancelling it must not lose a message beyond
  what the service itself does (a message handed out in a cancelled response stays
  invisible until its visibility timeout ends).
- `extend`, `release`, `delete` and `send` take at most the limit's batch size of entries,
  with distinct entry ids, and answer a `BatchResult`: a failed entry is a value. They raise
  only for a whole-call failure, as a `worker.errors.BackendError` subclass.
- `extend` may report a new receipt handle per entry (`BatchResult.new_handles`); the caller
  must use it for every later call on that message.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from worker.types import (
    BatchResult,
    Deletion,
    MoveTask,
    OutgoingMessage,
    QueueInfo,
    QueueSpec,
    ReceivedMessage,
    VisibilityChange,
)

__all__ = ["Backend", "DeadLetterAdmin", "Limits", "QueueAdmin"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    """What one queue service allows per call. The runtime sizes every call from these.

    No field has a default: each backend states its own (SQS: 10 of everything, 20 s long
    polls, release to 0 s; SMQ: receive and delete 16, extend 1 with a new handle, 30 s long
    polls, release to 1 s).
    """

    receive_batch: int
    delete_batch: int
    extend_batch: int
    release_batch: int
    send_batch: int
    #: Longest long poll, seconds.
    max_wait_s: int
    #: Shortest visibility a release may set (SQS: 0, visible at once; SMQ: 1).
    min_release_visibility_s: int
    #: Longest visibility one call may set.
    max_visibility_s: int
    #: How long a message may stay invisible counted from its receive (SQS: 12 h).
    max_lease_s: int
    #: True where a visibility change hands back a new receipt handle (SMQ).
    extension_returns_new_handle: bool
    #: True where messages can be read without changing their visibility.
    supports_peek: bool
    #: True where a receive cancelled before it answers has handed nothing out (the
    #: in-process engine): a shutdown cancels its polls at once instead of waiting for
    #: their answers. False for a service over a network, whose answer may be on its way.
    cancelled_receive_takes_nothing: bool


@runtime_checkable
class Backend(Protocol):
    """An open connection to one queue service. Queues are named by the user's name for them."""

    @property
    def limits(self) -> Limits: ...

    async def queue_info(self, queue: str) -> QueueInfo:
        """Attributes of `queue`; raises `QueueNotFound` when there is no such queue."""
        ...

    async def receive(
        self, queue: str, *, max_messages: int, wait_s: float, visibility_s: int | None = None
    ) -> Sequence[ReceivedMessage]: ...

    async def extend(self, queue: str, entries: Sequence[VisibilityChange]) -> BatchResult: ...

    async def release(self, queue: str, entries: Sequence[VisibilityChange]) -> BatchResult: ...

    async def delete(self, queue: str, entries: Sequence[Deletion]) -> BatchResult: ...

    async def send(self, queue: str, messages: Sequence[OutgoingMessage]) -> BatchResult: ...

    async def aclose(self) -> None: ...


@runtime_checkable
class QueueAdmin(Protocol):
    """Creating and removing queues: for the embedded engine, tests and the demo."""

    async def create_queue(self, spec: QueueSpec) -> str:
        """Create the queue `spec` describes and return its URL. Idempotent."""
        ...

    async def delete_queue(self, queue: str) -> None: ...

    async def purge(self, queue: str) -> None: ...


@runtime_checkable
class DeadLetterAdmin(Protocol):
    """What the dead-letter tools (`lease-worker dlq`, the console) ask of a backend.

    Queues are named by name. `peek` reads without changing visibility or receive count
    and raises `UnsupportedOperation` where `Limits.supports_peek` is false (SQS).
    """

    async def list_queues(self, prefix: str = "") -> list[str]: ...

    async def dead_letter_source_queues(self, queue: str) -> list[str]:
        """The queues whose redrive policy names `queue` as their dead-letter queue."""
        ...

    async def peek(self, queue: str, max_messages: int) -> Sequence[ReceivedMessage]: ...

    async def start_message_move_task(
        self, source: str, *, destination: str | None = None, max_per_second: int | None = None
    ) -> str:
        """Start moving `source`'s messages (to where each came from, or `destination`);
        returns the task handle."""
        ...

    async def list_message_move_tasks(
        self, source: str, *, max_results: int = 10
    ) -> list[MoveTask]:
        """The most recent move tasks of `source`, newest first."""
        ...

    async def cancel_message_move_task(self, task_handle: str) -> int:
        """Cancel a running task; returns how many messages it had moved."""
        ...
