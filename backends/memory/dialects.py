"""`Dialect`: the numbers and rules in which queue services differ, as the engine models them.

Two dialects: `SQS_DIALECT` (the default) and `SMQ_DIALECT`, Alibaba Cloud SMQ (formerly
MNS). The engine reads every number from here. SMQ's rules, as the engine keeps them:

- Receive and delete take up to 16; visibility is 1-43,200 s (no 0: the shortest release
  is 1 s); long polls wait up to 30 s; a message is at most 64 KiB; delays up to 7 days.
- Every receive *and every visibility change* hands out a new receipt handle; the old one
  is refused from then on (`ReceiptHandleIsInvalid` in the engine's vocabulary, SMQ's
  `ReceiptHandleError` on its wire). A stale delete is refused too, whatever `HandleRules`
  says: SMQ has no lenient mode.
- No FIFO queues. SMQ guarantees no order; the engine happens to deliver oldest-visible
  first, and nothing may rely on that.
- Peek (BatchPeekMessage) exists. DequeueCount is the receive count; a dead-letter policy
  moves a message after its maximum receive count, as SQS's redrive does.

Entry failures keep the engine's (SQS's) codes, which the runtime reads; `serve-smq` and the
SMQ client translate them to and from SMQ's own.
"""

from __future__ import annotations

from dataclasses import dataclass

from worker.backend import Limits
from worker.rules import SMQ_LIMITS, SQS_LIMITS

__all__ = ["SMQ_DIALECT", "SQS_DIALECT", "Dialect"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Dialect:
    """The numbers and rules in which services differ (see the module)."""

    name: str
    max_batch_entries: int
    max_receive: int
    min_visibility_s: int
    max_visibility_s: int
    #: How long a message may stay invisible counted from its receive.
    max_lease_s: int
    max_delay_s: int
    max_message_bytes: int
    #: Longest long poll, seconds.
    max_wait_s: int
    #: Entries per visibility-change call a client should send (SMQ: 1, no batch call).
    max_change_entries: int
    #: A visibility change hands out a new receipt handle and retires the old one (SMQ).
    rotates_handles: bool
    #: FIFO queues exist (SQS) or not (SMQ).
    fifo_queues: bool
    #: The service can read messages without receiving them (SMQ's BatchPeekMessage).
    peek: bool

    @property
    def limits(self) -> Limits:
        """What the runtime may ask of a backend that speaks this dialect."""
        return Limits(
            receive_batch=self.max_receive,
            delete_batch=self.max_batch_entries,
            extend_batch=self.max_change_entries,
            release_batch=self.max_change_entries,
            send_batch=self.max_batch_entries,
            max_wait_s=self.max_wait_s,
            min_release_visibility_s=self.min_visibility_s,
            max_visibility_s=self.max_visibility_s,
            max_lease_s=self.max_lease_s,
            extension_returns_new_handle=self.rotates_handles,
            supports_peek=self.peek,
            # The service's own limits (serve-sqs, serve-smq answer over a network);
            # MemoryBackend, in process, says otherwise.
            cancelled_receive_takes_nothing=False,
        )


SQS_DIALECT = Dialect(
    name="sqs",
    max_batch_entries=SQS_LIMITS.delete_batch,
    max_receive=SQS_LIMITS.receive_batch,
    min_visibility_s=SQS_LIMITS.min_release_visibility_s,
    max_visibility_s=SQS_LIMITS.max_visibility_s,
    max_lease_s=SQS_LIMITS.max_lease_s,
    max_delay_s=900,
    max_message_bytes=1_048_576,
    max_wait_s=SQS_LIMITS.max_wait_s,
    max_change_entries=SQS_LIMITS.extend_batch,
    rotates_handles=False,
    fifo_queues=True,
    peek=False,
)

SMQ_DIALECT = Dialect(
    name="smq",
    max_batch_entries=SMQ_LIMITS.delete_batch,
    max_receive=SMQ_LIMITS.receive_batch,
    min_visibility_s=SMQ_LIMITS.min_release_visibility_s,
    max_visibility_s=SMQ_LIMITS.max_visibility_s,
    # SMQ documents no cap counted from the receive; 12 h is the conservative reading
    # (one visibility change may not reach past it either).
    max_lease_s=SMQ_LIMITS.max_lease_s,
    max_delay_s=604_800,
    max_message_bytes=65_536,
    max_wait_s=SMQ_LIMITS.max_wait_s,
    max_change_entries=SMQ_LIMITS.extend_batch,
    rotates_handles=SMQ_LIMITS.extension_returns_new_handle,
    fifo_queues=False,
    peek=SMQ_LIMITS.supports_peek,
)
