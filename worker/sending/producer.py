"""The producer: sending from web code and scripts, over any `Backend`, async or sync.

::

    producer = Producer(backend)                       # the composition root gives the backend
    await producer.send("orders", Order(1, 9.5), attributes={"tenant": "acme"})
    results = await producer.send_many("orders", (Outgoing(body=o) for o in orders))

Rules:
- Every message is encoded (`worker.envelope.codecs.encode`, the codecs typed handlers decode
  with) and checked (`worker.sending.outgoing.prepare`) before the first call: a bad one raises
  `MessageRejected` and nothing is sent.
- Messages go in full batches: `backend.limits.send_batch` entries per call (SQS: 10),
  each call within the byte limit.
- A failed entry is retried alone (with the other failed entries of its call), after a
  backoff, when the service says the fault was its own (`sender_fault=False`); a whole
  call that fails transiently is retried whole. Entries the service refused for what they
  hold are not retried. `send_many` answers one `SendResult` per message, in order.
- The current OpenTelemetry context, when there is one, travels in each message's
  attributes (`worker.envelope.tracing`); a large body goes to S3 when given `large_payloads`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import anyio

from worker.backend import Limits
from worker.envelope import fence
from worker.envelope.large_payloads import S3Payloads
from worker.envelope.tracing import aws_trace_header, inject
from worker.errors import ConfigError, SendFailed, TransientBackendError
from worker.sending.outgoing import AttributeValue, Outgoing, batches, prepare
from worker.types import BatchResult, EntryFailure, OutgoingMessage

__all__ = ["Producer", "SendResult", "Sender"]

#: SQS's limit on one message and on one batch call, with attributes (since August 2025).
DEFAULT_MAX_BYTES = 1_048_576


class Sender(Protocol):
    """What the producer needs of a backend (every `Backend` is one)."""

    @property
    def limits(self) -> Limits: ...

    async def send(self, queue: str, messages: Sequence[OutgoingMessage]) -> BatchResult: ...

    async def aclose(self) -> None: ...


@dataclass(frozen=True, slots=True)
class SendResult:
    """What became of one message of `send_many`: its message id, or the failed entry."""

    index: int
    message_id: str | None
    failure: EntryFailure | None
    attempts: int

    @property
    def ok(self) -> bool:
        return self.failure is None


class Producer:
    """Sends messages through `backend`, which stays the caller's to close."""

    def __init__(
        self,
        backend: Sender,
        *,
        max_attempts: int = 4,
        backoff_s: float = 0.1,
        max_message_bytes: int = DEFAULT_MAX_BYTES,
        content_deduplication: bool = False,
        large_payloads: S3Payloads | None = None,
    ) -> None:
        if not isinstance(max_attempts, int) or max_attempts < 1:
            raise ConfigError(f"max_attempts={max_attempts!r}: must be a whole number >= 1")
        if not 0 <= backoff_s < float("inf"):
            raise ConfigError(f"backoff_s={backoff_s!r}: must be a finite number >= 0")
        self.backend = backend
        self._attempts = max_attempts
        self._backoff = backoff_s
        self._max_bytes = max_message_bytes
        self._content_dedup = content_deduplication
        self._large = large_payloads

    async def send(
        self,
        queue: str,
        body: Any,
        *,
        delay_s: int | None = None,
        attributes: Mapping[str, AttributeValue] | None = None,
        group_id: str | None = None,
        deduplication_id: str | None = None,
    ) -> str:
        """Send one message; returns its message id, or raises `SendFailed` (after the
        retries a service-side failure gets) or `MessageRejected` (before any call)."""
        item = Outgoing(
            body=body,
            delay_s=delay_s,
            attributes=attributes or {},
            group_id=group_id,
            deduplication_id=deduplication_id,
        )
        [result] = await self.send_many(queue, [item])
        if result.failure is not None:
            raise SendFailed(queue, result.failure.code, result.failure.message)
        return result.message_id or ""  # every backend here reports ids; "" if one does not

    async def send_many(self, queue: str, items: Iterable[Outgoing | Any]) -> list[SendResult]:
        """Send every item (an `Outgoing`, or a bare body) in full batches; one result each."""
        messages = [self._prepare(queue, index, item) for index, item in enumerate(items)]
        if self._large is not None:  # only once every message passed its checks
            messages = [await self._large.offload(message) for message in messages]
        results: list[SendResult | None] = [None] * len(messages)
        limit = self.backend.limits.send_batch
        for chunk in batches(messages, max_entries=limit, max_bytes=self._max_bytes):
            for result in await self._send_chunk(queue, chunk, messages):
                results[result.index] = result
        return [result for result in results if result is not None]

    def _prepare(self, queue: str, index: int, item: Any) -> OutgoingMessage:
        if not isinstance(item, Outgoing):
            item = Outgoing(body=item)
        large = self._large is not None
        return prepare(
            queue,
            index,
            item,
            max_bytes=S3Payloads.max_body_bytes if large else self._max_bytes,
            content_deduplication=self._content_dedup,
            extra=inject(),
            trace_header=aws_trace_header(),
            reserved_attributes=1 if large else 0,
        )

    async def _send_chunk(
        self, queue: str, chunk: Sequence[int], messages: Sequence[OutgoingMessage]
    ) -> list[SendResult]:
        pending = list(chunk)
        done: list[SendResult] = []
        for attempt in range(1, self._attempts + 1):
            if attempt > 1:
                await anyio.sleep(self._backoff * 2 ** (attempt - 2))
            entries = [replace(messages[i], entry_id=str(i)) for i in pending]
            fence.check()  # sent from a handler whose lease lapsed: not sent at all
            try:
                answer = await self.backend.send(queue, entries)
            except TransientBackendError:
                if attempt == self._attempts:
                    raise
                continue
            retry: list[int] = []
            for index in pending:
                failure = answer.failure(str(index))
                if failure is None:
                    message_id = answer.message_ids.get(str(index))
                    done.append(SendResult(index, message_id, None, attempt))
                elif failure.sender_fault or attempt == self._attempts:
                    done.append(SendResult(index, None, failure, attempt))
                else:
                    retry.append(index)
            pending = retry
            if not pending:
                break
        return done
