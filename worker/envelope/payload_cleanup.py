"""`PayloadCleanup`: a backend wrapper that deletes a large payload's S3 object once its
message's delete succeeded, as AWS's extended clients do on their delete.

It remembers which receipt handle points to which object as messages are received (and
follows a handle an extension replaces), and forgets a handle when its message is released
(it comes back with a new one) or deleted. Only an entry the service answered as deleted
has its object removed: a message whose delete failed may be delivered again and still
needs it. A failed object delete is logged, never raised: the message is gone either way
(an S3 lifecycle rule is the backstop for such leftovers).

::

    backend = PayloadCleanup(await SqsBackend.connect(settings), store)
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import anyio
import structlog

from worker.backend import Backend, Limits
from worker.envelope.large_payloads import Pointer, S3Payloads, pointer_of
from worker.types import (
    BatchResult,
    Deletion,
    OutgoingMessage,
    QueueInfo,
    ReceivedMessage,
    VisibilityChange,
)

__all__ = ["PayloadCleanup"]

#: Handles remembered at most: a lost lease's entry is never deleted, so the oldest go first.
MAX_REMEMBERED = 100_000
#: Longest wait for the object deletes of one delete call (they run after it succeeded).
DELETE_BUDGET_S = 5.0


class PayloadCleanup:
    """A `Backend` that deletes a large payload's S3 object after its message's delete."""

    def __init__(self, inner: Backend, store: S3Payloads, *, logger: Any = None) -> None:
        self.inner = inner
        self.store = store
        self._log = logger or structlog.get_logger("lease_worker.large_payloads")
        self._pointers: OrderedDict[tuple[str, str], Pointer] = OrderedDict()

    def __getattr__(self, name: str) -> Any:  # the admin protocols, where the inner has them
        return getattr(self.inner, name)

    @property
    def limits(self) -> Limits:
        return self.inner.limits

    async def queue_info(self, queue: str) -> QueueInfo:
        return await self.inner.queue_info(queue)

    async def receive(
        self, queue: str, *, max_messages: int, wait_s: float, visibility_s: int | None = None
    ) -> Sequence[ReceivedMessage]:
        received = await self.inner.receive(
            queue, max_messages=max_messages, wait_s=wait_s, visibility_s=visibility_s
        )
        for message in received:
            pointer = pointer_of(message)
            if pointer is not None:
                self._pointers[(queue, message.receipt_handle)] = pointer
                while len(self._pointers) > MAX_REMEMBERED:
                    self._pointers.popitem(last=False)
        return received

    async def extend(self, queue: str, entries: Sequence[VisibilityChange]) -> BatchResult:
        result = await self.inner.extend(queue, entries)
        handles = {entry.entry_id: entry.receipt_handle for entry in entries}
        for entry_id, new in result.new_handles.items():
            pointer = self._pointers.pop((queue, handles.get(entry_id, "")), None)
            if pointer is not None:
                self._pointers[(queue, new)] = pointer
        return result

    async def release(self, queue: str, entries: Sequence[VisibilityChange]) -> BatchResult:
        result = await self.inner.release(queue, entries)
        handles = {entry.entry_id: entry.receipt_handle for entry in entries}
        for entry_id in result.succeeded:
            self._pointers.pop((queue, handles.get(entry_id, "")), None)
        return result

    async def delete(self, queue: str, entries: Sequence[Deletion]) -> BatchResult:
        result = await self.inner.delete(queue, entries)
        handles = {entry.entry_id: entry.receipt_handle for entry in entries}
        done = [self._pointers.pop((queue, handles.get(i, "")), None) for i in result.succeeded]
        pointers = [pointer for pointer in done if pointer is not None]
        if pointers and self.store.delete_after:
            # Shielded: the messages are deleted; a caller's timeout must not cut this short
            # and make the delete look failed.
            with anyio.CancelScope(shield=True), anyio.move_on_after(DELETE_BUDGET_S):
                async with anyio.create_task_group() as tasks:
                    for pointer in pointers:
                        tasks.start_soon(self._delete_object, pointer)
        return result

    async def _delete_object(self, pointer: Pointer) -> None:
        try:
            await self.store.delete(pointer)
        except Exception as error:
            self._log.warning(
                "large_payload.delete_failed",
                bucket=pointer[0],
                key=pointer[1],
                error=type(error).__name__,
            )

    async def send(self, queue: str, messages: Sequence[OutgoingMessage]) -> BatchResult:
        return await self.inner.send(queue, messages)

    async def aclose(self) -> None:
        await self.inner.aclose()
