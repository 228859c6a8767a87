"""A fake around the in-memory backend for the producer: records each send call's entries
and fails planned entries (by body) or whole calls, before the engine sees them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from backends.memory import MemoryBackend
from worker.backend import Limits
from worker.types import BatchResult, EntryFailure, OutgoingMessage


@dataclass
class SendingBackend:
    inner: MemoryBackend = field(default_factory=MemoryBackend)
    #: The bodies sent in each call, in order.
    calls: list[list[str]] = field(default_factory=list)
    #: body -> entry failures to answer, one per call that holds it.
    entry_failures: dict[str, list[EntryFailure]] = field(default_factory=dict)
    #: Errors to raise for the next calls, whole.
    call_failures: list[Exception] = field(default_factory=list)

    @property
    def limits(self) -> Limits:
        return self.inner.limits

    async def send(self, queue: str, messages: Sequence[OutgoingMessage]) -> BatchResult:
        self.calls.append([m.body for m in messages])
        if self.call_failures:
            raise self.call_failures.pop(0)
        failed: list[EntryFailure] = []
        passed: list[OutgoingMessage] = []
        for message in messages:
            planned = self.entry_failures.get(message.body)
            if planned:
                failed.append(EntryFailure(message.entry_id, *_fields(planned.pop(0))))
            else:
                passed.append(message)
        result = await self.inner.send(queue, passed) if passed else BatchResult()
        return BatchResult(
            succeeded=result.succeeded,
            failed=(*result.failed, *failed),
            message_ids=result.message_ids,
        )

    async def aclose(self) -> None:
        await self.inner.aclose()


def _fields(failure: EntryFailure) -> tuple[str, str, bool]:
    return failure.code, failure.message, failure.sender_fault
