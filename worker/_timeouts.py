"""Every call to the queue service has a deadline of the runtime's own.

botocore's read timeout must exceed the 20 s long poll, so a request lost on a dead
connection (no reset, no answer) would hang that long: longer than a lease's renewal margin.
The runtime abandons such a call at a deadline it chooses and treats it as a transient
failure, to be retried on a fresh connection.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

from worker.errors import TransientBackendError

__all__ = ["call_by"]

T = TypeVar("T")


async def call_by(
    deadline: float,
    call: Callable[[], Awaitable[T]],
    *,
    operation: str,
    queue: str,
    code: str = "Timeout",
) -> T:
    """`await call()`, abandoned at `deadline` (loop time) with a `TransientBackendError`."""
    with anyio.CancelScope(deadline=deadline):
        return await call()
    raise TransientBackendError(
        f"{operation} on queue {queue!r}: no answer in time",
        operation=operation,
        queue=queue,
        code=code,
    )
