"""The exception tree. Every error the runtime raises on purpose is one of these::

    LeaseWorkerError
    ├── ConfigError              invalid settings (also a ValueError)
    ├── RegistrationError        a bad @app.handler(...) call (also a ValueError)
    ├── DecodeError              a message body the handler's decoder refused
    ├── MessageRejected          the producer refused a message before any call (a ValueError)
    ├── SendFailed               the producer's send of one message failed (entry's code)
    ├── LeaseLostError           `extend()`, `ensure_held()` or a send on a lease that is gone
    ├── WorkerCrashed            a task of the worker raised; what it held was released
    └── BackendError             a whole queue-service call failed (operation, queue)
        ├── TransientBackendError    throttling, 5xx, timeouts, resets: retry later
        │   └── OverLimit            too many messages in flight on the queue
        └── FatalBackendError        retrying will not help: fix the setup
            ├── QueueNotFound
            ├── AccessDenied
            └── UnsupportedOperation the backend cannot do it (SQS cannot peek)

    HandlerSignal                a handler's own word on its message (not an error)
    ├── Retry(after_s)           release the message to come back after `after_s`
    ├── BatchFailure(ids)        a batch handler's failed messages (the rest succeeded)
    ├── Discard(reason)          delete the message without handling it
    └── Duplicate(reason)        delete it: already handled (outcome `duplicate`)

A failed *entry* of a batch call is not an exception: it is an `EntryFailure` value in a
`BatchResult`. Only `backends/sqs.py` imports botocore's exceptions and maps them here.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = [
    "AccessDenied",
    "BackendError",
    "BatchFailure",
    "ConfigError",
    "DecodeError",
    "Discard",
    "Duplicate",
    "FatalBackendError",
    "HandlerSignal",
    "LeaseLostError",
    "LeaseWorkerError",
    "MessageRejected",
    "OverLimit",
    "QueueNotFound",
    "RegistrationError",
    "Retry",
    "SendFailed",
    "TransientBackendError",
    "UnsupportedOperation",
    "WorkerCrashed",
]


class LeaseWorkerError(Exception):
    """Base of every error lease-worker raises on purpose."""


class ConfigError(LeaseWorkerError, ValueError):
    """A setting is invalid. The message names the setting and the accepted range."""


class RegistrationError(LeaseWorkerError, ValueError):
    """A handler registration is invalid (duplicate queue, not callable, bad option)."""


class DecodeError(LeaseWorkerError):
    """A message body could not be decoded. Carries the message id, never the body."""

    def __init__(self, message_id: str, reason: str) -> None:
        super().__init__(f"message {message_id}: body could not be decoded: {reason}")
        self.message_id = message_id
        self.reason = reason


class MessageRejected(LeaseWorkerError, ValueError):
    """The producer refused a message before sending anything: `index` is its position in
    the call, `reason` says why (never quoting the body)."""

    def __init__(self, index: int, reason: str) -> None:
        super().__init__(f"message {index}: {reason}")
        self.index = index
        self.reason = reason


class SendFailed(LeaseWorkerError):
    """`Producer.send` could not send its message: the service's code for the entry, after
    the retries a service-side failure gets."""

    def __init__(self, queue: str, code: str, message: str = "") -> None:
        super().__init__(f"send to {queue!r} failed: {code} {message}".rstrip())
        self.queue = queue
        self.code = code


class LeaseLostError(LeaseWorkerError):
    """Raised by `Lease.extend()` when the lease was lost before or during the extension,
    by `ensure_held()` once it is lost or its deadline has passed, and by a send from
    inside a handler whose lease is gone: the message's receipt handle is no longer this
    worker's to use. Raised out of a handler whose lease is in fact gone, it is a fence
    that held (`handler.fenced`), not the handler's failure."""


class WorkerCrashed(LeaseWorkerError):
    """A task of the worker (a background task, or one of the runtime's own) raised: the
    worker released what it held and stopped. The task's exception is the `__cause__`."""

    def __init__(self, task: str, error: BaseException) -> None:
        super().__init__(f"{task} raised {type(error).__name__}")
        self.task = task
        self.__cause__ = error


class BackendError(LeaseWorkerError):
    """A whole call to the queue service failed."""

    def __init__(
        self, message: str, *, operation: str = "", queue: str = "", code: str = ""
    ) -> None:
        super().__init__(message)
        self.operation = operation
        self.queue = queue
        self.code = code


class TransientBackendError(BackendError):
    """Throttling, a 5xx, a timeout or a broken connection: the same call may succeed later."""


class OverLimit(TransientBackendError):
    """The queue has as many messages in flight as the service allows; receive less, later."""


class FatalBackendError(BackendError):
    """Retrying will not help: the queue is missing, access is denied, the request is invalid."""


class QueueNotFound(FatalBackendError):
    """The queue does not exist (or is not visible with these credentials)."""


class AccessDenied(FatalBackendError):
    """The credentials may not perform this operation on this queue."""


class UnsupportedOperation(FatalBackendError):
    """The queue service has no such operation (peeking on SQS, for one)."""


class HandlerSignal(Exception):
    """Raised by a handler to say what should become of its message."""


class Retry(HandlerSignal):
    """Release the message so that it is delivered again after `after_s` seconds."""

    def __init__(self, after_s: float = 0.0, reason: str = "") -> None:
        if not 0 <= after_s < float("inf"):  # also refuses nan
            raise ValueError(f"Retry(after_s={after_s!r}): after_s must be a finite number >= 0")
        super().__init__(reason or f"retry after {after_s} s")
        self.after_s = after_s
        self.reason = reason


class Discard(HandlerSignal):
    """Delete the message without handling it (it is logged and counted, never redelivered)."""

    def __init__(self, reason: str = "") -> None:
        super().__init__(reason or "discarded")
        self.reason = reason


class Duplicate(HandlerSignal):
    """Delete the message without handling it: it was handled already (an idempotency
    guard found its completion). Counted as the outcome `duplicate`, not `discarded`."""

    def __init__(self, reason: str = "") -> None:
        super().__init__(reason or "duplicate")
        self.reason = reason


class BatchFailure(HandlerSignal):
    """Raised by a batch handler: these message ids failed, every other one succeeded."""

    def __init__(self, failed: Iterable[str], reason: str = "") -> None:
        self.failed = frozenset(failed)
        super().__init__(reason or f"{len(self.failed)} messages failed")
        self.reason = reason
