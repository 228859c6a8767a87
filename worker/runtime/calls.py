"""Every call to the queue service has a deadline of the runtime's own.

botocore's read timeout must exceed the 20 s long poll, so a request lost on a dead
connection (no reset, no answer) would hang that long: longer than a lease's renewal margin.
The runtime abandons such a call at a deadline it chooses and treats it as a transient
failure, to be retried on a fresh connection.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from worker.errors import BackendError, TransientBackendError

__all__ = ["as_backend_error", "call_by"]

T = TypeVar("T")


async def call_by(
    deadline: float,
    call: Callable[[], Awaitable[T]],
    *,
    operation: str,
    queue: str,
    code: str = "Timeout",
) -> T:
    """`await call()`, abandoned at `deadline` (loop time) with a `TransientBackendError`.

    asyncio's own timeout, not an anyio cancel scope: it cooperates with anyio's scopes the
    same way (a cancellation from outside goes on as one) at a sixth of the cost per call,
    which counts with every receive and every batch of deletes (0.6 us a message on the
    in-memory engine).
    """
    timeout = asyncio.timeout_at(deadline)
    try:
        async with timeout:
            return await call()
    except TimeoutError:
        if not timeout.expired():
            raise  # the call's own TimeoutError (a socket's, say), not our deadline
        raise TransientBackendError(
            f"{operation} on queue {queue!r}: no answer in time",
            operation=operation,
            queue=queue,
            code=code,
        ) from None


def as_backend_error(raised: Exception, log: Any, operation: str, queue: str) -> BackendError:
    """A backend should raise only `BackendError`s; anything else is logged as the bug it is
    and handled like a transient failure, so that one bad call never stops the worker."""
    if isinstance(raised, BackendError):
        return raised
    log.error("backend.unexpected_error", operation=operation, queue=queue, exc_info=raised)
    return TransientBackendError(
        f"{operation} raised {type(raised).__name__}",
        operation=operation,
        queue=queue,
        code=type(raised).__name__,
    )
