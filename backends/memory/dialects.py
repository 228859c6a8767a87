"""`Dialect`: the numbers in which queue services differ, as the engine models them.

Only SQS's is implemented (`SQS_DIALECT`). The engine reads every number from here; a later
Alibaba Cloud SMQ dialect (batches of 16, minimum visibility 1, a new receipt handle from
every visibility change, no FIFO, its own error codes) needs new fields and code for those
behaviours, not just other numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

from worker.backend import Limits
from worker.rules import SQS_LIMITS

__all__ = ["SQS_DIALECT", "Dialect"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Dialect:
    """The numbers in which services differ. Only `SQS_DIALECT` is modelled (see above)."""

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

    @property
    def limits(self) -> Limits:
        """What the runtime may ask of a backend that speaks this dialect."""
        return Limits(
            receive_batch=self.max_receive,
            delete_batch=self.max_batch_entries,
            extend_batch=self.max_batch_entries,
            release_batch=self.max_batch_entries,
            send_batch=self.max_batch_entries,
            max_wait_s=self.max_wait_s,
            min_release_visibility_s=self.min_visibility_s,
            max_visibility_s=self.max_visibility_s,
            max_lease_s=self.max_lease_s,
            extension_returns_new_handle=False,
            supports_peek=False,
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
)
