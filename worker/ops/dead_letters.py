"""The dead-letter tools, over any backend that is a `DeadLetterAdmin`: the CLI
(`lease-worker dlq`) and the console call these.

- `dead_letter_queues`: every queue that some queue's redrive policy names, with its
  sources, counts and (where the service tells) its oldest message's age.
- `inspect`: read messages without handling them. Where the backend can peek, nothing
  changes. On SQS, which cannot, the messages are received with a short visibility and
  released at once: each one's receive count goes up by one, and for a moment they are
  invisible to any other consumer of that queue. `Inspection.changed` says which.
- `redrive` / `move_tasks` / `cancel_move`: the service's own message move tasks (SQS's
  StartMessageMoveTask): messages go back to where each came from, or to `destination`,
  with new message ids, at up to `max_per_second`.
- `purge`: deletes every message; the callers ask for the queue's name to be typed back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from worker.backend import Backend, DeadLetterAdmin, QueueAdmin
from worker.errors import ConfigError
from worker.types import MoveTask, ReceivedMessage, VisibilityChange

__all__ = [
    "DeadLetterQueue",
    "Inspection",
    "admin",
    "cancel_move",
    "dead_letter_queues",
    "inspect",
    "move_tasks",
    "purge",
    "redrive",
]

#: Seconds an inspected SQS message stays invisible if its release is lost on the way.
INSPECT_VISIBILITY_S = 30


@dataclass(frozen=True, slots=True)
class DeadLetterQueue:
    name: str
    sources: tuple[str, ...]
    visible: int
    in_flight: int
    delayed: int
    oldest_message_age_s: float | None


@dataclass(frozen=True, slots=True)
class Inspection:
    messages: tuple[ReceivedMessage, ...]
    #: False after a peek; True when reading counted a receive (SQS).
    changed: bool


def admin(backend: Backend) -> DeadLetterAdmin:
    if not isinstance(backend, DeadLetterAdmin):
        raise ConfigError(f"{type(backend).__name__} has no dead-letter operations")
    return backend


async def dead_letter_queues(backend: Backend, prefix: str = "") -> list[DeadLetterQueue]:
    tools = admin(backend)
    found = []
    for name in sorted(await tools.list_queues(prefix)):
        sources = await tools.dead_letter_source_queues(name)
        if not sources:
            continue
        info = await backend.queue_info(name)
        found.append(
            DeadLetterQueue(
                name=name,
                sources=tuple(sorted(sources)),
                visible=info.approximate_visible,
                in_flight=info.approximate_in_flight,
                delayed=info.approximate_delayed,
                oldest_message_age_s=info.oldest_message_age_s,
            )
        )
    return found


async def inspect(backend: Backend, queue: str, max_messages: int = 10) -> Inspection:
    limit = backend.limits.receive_batch
    if not 1 <= max_messages <= limit:
        raise ConfigError(f"inspect: from 1 to {limit} messages at a time, not {max_messages}")
    if backend.limits.supports_peek:
        return Inspection(tuple(await admin(backend).peek(queue, max_messages)), changed=False)
    received = await backend.receive(
        queue, max_messages=max_messages, wait_s=1, visibility_s=INSPECT_VISIBILITY_S
    )
    await _release(backend, queue, received)
    return Inspection(tuple(received), changed=True)


async def _release(backend: Backend, queue: str, received: Sequence[ReceivedMessage]) -> None:
    entries = [
        VisibilityChange(entry_id=str(n), receipt_handle=m.receipt_handle, visibility_s=0)
        for n, m in enumerate(received)
    ]
    if entries:
        await backend.release(queue, entries)


async def redrive(
    backend: Backend,
    queue: str,
    *,
    destination: str | None = None,
    max_per_second: int | None = None,
) -> str:
    if max_per_second is not None and not 1 <= max_per_second <= 500:
        raise ConfigError(f"redrive: --rate {max_per_second}: from 1 to 500 messages a second")
    return await admin(backend).start_message_move_task(
        queue, destination=destination, max_per_second=max_per_second
    )


async def move_tasks(backend: Backend, queue: str) -> list[MoveTask]:
    return await admin(backend).list_message_move_tasks(queue, max_results=10)


async def cancel_move(backend: Backend, task_handle: str) -> int:
    return await admin(backend).cancel_message_move_task(task_handle)


async def purge(backend: Backend, queue: str, *, confirm: str) -> None:
    """Delete every message of `queue`; `confirm` must be the queue's name, typed back."""
    if confirm != queue:
        raise ConfigError(f"purge {queue!r}: not confirmed (type the queue's name to confirm)")
    if not isinstance(backend, QueueAdmin):
        raise ConfigError(f"{type(backend).__name__} cannot purge queues")
    await backend.purge(queue)
