"""Every call to the queue service has a deadline of the runtime's own.

botocore's read timeout must exceed the 20 s long poll, so a request lost on a dead
connection (no reset, no answer) would hang that long: longer than a lease's renewal margin.
The runtime abandons such a call at a deadline it chooses and treats it as a transient
failure, to be retried on a fresh connection.

An idempotent call that must not lose a late answer (an SQS renewal) is hedged instead
(`hedged_call_by`): past its usual time a second, identical call goes out beside the first,
on another connection, and whichever answers first is the answer. A slow network then costs
one extra call, not the answer that was on its way; a lost answer is covered by the second.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio

from worker.errors import BackendError, TransientBackendError

__all__ = ["as_backend_error", "call_by", "hedged_call_by", "may_have_landed", "no_answer"]

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
        raise no_answer(operation, queue, code) from None


async def hedged_call_by(
    hedge_every: float,
    deadline: float,
    call: Callable[[], Awaitable[T]],
    *,
    operation: str,
    queue: str,
    on_hedge: Callable[[], None] | None = None,
) -> tuple[T, float]:
    """`await call()`, and another identical `call()` beside the ones under way each time
    `hedge_every` seconds pass without an answer (`on_hedge` hears of each); the first
    answer wins and the others are abandoned. Returns the answer and when the call that
    gave it was sent. Abandoned at `deadline` (loop time) with a `TransientBackendError`
    (code "DeadlineReached"); once every call sent has raised, the first error is raised.
    For idempotent calls only: several may land."""
    answers: list[tuple[T, float]] = []
    errors: list[Exception] = []
    settled = anyio.Event()
    sent = 0

    async def attempt() -> None:
        sent_at = anyio.current_time()
        if sent_at >= deadline:  # started before a stall that ran past it: never sent
            errors.append(no_answer(operation, queue, "DeadlineReached"))
            if len(errors) == sent:
                settled.set()
            return
        try:
            answer = await call()
        except Exception as error:  # the caller maps it (as_backend_error)
            errors.append(error)
            if len(errors) == sent:
                settled.set()
            return
        answers.append((answer, sent_at))
        settled.set()

    with anyio.move_on_after(max(0.0, deadline - anyio.current_time())):
        async with anyio.create_task_group() as calls:
            while not settled.is_set():
                if sent and on_hedge is not None:
                    on_hedge()
                sent += 1
                calls.start_soon(attempt)
                with anyio.move_on_after(hedge_every):
                    await settled.wait()
            calls.cancel_scope.cancel()  # the other calls: their answers are not needed
    if answers:
        return answers[0]
    if errors and len(errors) == sent:
        raise errors[0]
    raise no_answer(operation, queue, "DeadlineReached")


#: Failures after which a call may have landed: no answer came in time (the runtime's own
#: deadline), or the connection broke after the request may have gone out (the lean
#: client's, botocore's and aiohttp's names for a read that timed out, an answer cut short
#: or a connection that failed). Broad on purpose: a release wrongly taken for landed only
#: waits for its lease's deadline.
_NO_ANSWER = frozenset(
    {
        "Timeout",
        "DeadlineReached",
        "ReadTimeout",
        "ReadTimeoutError",
        "Closed",
        "ProtocolError",
        "ConnectionClosedError",
        "ResponseParserError",
        "ServerDisconnectedError",
        "ClientPayloadError",
        "TimeoutError",
        "ConnectionResetError",
        "ConnectionError",
        "BrokenPipeError",
        "ServerTimeoutError",
        "ClientOSError",
        "ClientConnectionError",
        "HTTPClientError",
    }
)


def may_have_landed(error: BackendError) -> bool:
    """True if the call that raised `error` may have reached the service and been applied:
    no answer came, so nothing says it did not land. A call that is not idempotent once
    someone else acts on the message (a release: another consumer may receive the message
    it made visible) is then not sent again with the same handle."""
    return error.code in _NO_ANSWER


def no_answer(operation: str, queue: str, code: str) -> TransientBackendError:
    """What a call abandoned for want of an answer is: transient, to be retried."""
    return TransientBackendError(
        f"{operation} on queue {queue!r}: no answer in time",
        operation=operation,
        queue=queue,
        code=code,
    )


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
