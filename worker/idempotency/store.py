"""The store protocol: what a backing store of idempotency records must do.

Five operations, each atomic on its own (a conditional write, a Lua script, a lock), and
each answering as a value when its condition does not hold, never with an exception; an
exception (`StoreError`) means the store could not be asked. Every store passes the one
contract suite (tests/idempotency/test_store_contract.py).

Times are wall-clock seconds, passed in by the caller: a store never reads a clock, so the
rules hold under a test's virtual time. A store's native expiry (Redis key expiry,
DynamoDB's TTL attribute) only collects garbage, late if need be; the answers come from the
times in the records.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from worker.errors import LeaseWorkerError
from worker.idempotency.record import Record

__all__ = ["IdempotencyStore", "StoreError"]


class StoreError(LeaseWorkerError):
    """The store could not be asked (down, timed out, refused). Carries the operation."""

    def __init__(self, operation: str, reason: str) -> None:
        super().__init__(f"idempotency store {operation}: {reason}")
        self.operation = operation
        self.reason = reason


@runtime_checkable
class IdempotencyStore(Protocol):
    """Where idempotency records live (see the module docstring for the rules)."""

    async def create(self, record: Record, *, now: float) -> Record | None:
        """Write `record` unless its key has a record that is in progress or completed and
        not expired at `now`; None once written, else the record in the way."""
        ...

    async def replace(self, record: Record, *, token: str) -> bool:
        """Write `record` over its key's record if that one's token is `token`."""
        ...

    async def remove(self, key: str, *, token: str) -> bool:
        """Delete `key`'s record if its token is `token`."""
        ...

    async def beat(self, owner: str, *, until: float) -> None:
        """Record that `owner` (a worker process) is alive until `until`."""
        ...

    async def beat_of(self, owner: str) -> float | None:
        """Until when `owner` said it is alive; None if it never did (or long ago)."""
        ...
