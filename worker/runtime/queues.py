"""The app's queues at start-up: reading each one's attributes, retried through transient
failures, and creating them on a backend that starts empty (the embedded engine, tests).

A transient failure (throttling, 5xx, no answer within `call_timeout_s`) is retried with a
pause doubling from `receive_backoff_s` to `receive_backoff_max_s`, for at most
`STARTUP_CALL_TIMEOUTS` call timeouts, and ends early when `stop` is set (a signal); then one
`TransientBackendError` says what was tried. A fatal one (missing queue, access denied) is
raised at once."""

from __future__ import annotations

from typing import Any

import anyio

from worker.backend import Backend, QueueAdmin
from worker.clock import Clock
from worker.config import WorkerConfig
from worker.errors import (
    BackendError,
    ConfigError,
    FatalBackendError,
    QueueNotFound,
    TransientBackendError,
)
from worker.registry import AppSpec, DescribesApp, app_spec
from worker.runtime.calls import as_backend_error, call_by
from worker.types import QueueInfo, QueueSpec

__all__ = ["STARTUP_CALL_TIMEOUTS", "create_missing_queues", "queue_info_at_start"]

#: How long start-up retries a transient failure, in call timeouts.
STARTUP_CALL_TIMEOUTS = 12


async def create_missing_queues(app: AppSpec | DescribesApp, backend: Backend) -> None:
    """Create every queue `app` has a handler for that `backend` does not have yet, with the
    app's visibility as the queue's VisibilityTimeout."""
    app = app_spec(app)
    if not isinstance(backend, QueueAdmin):
        raise ConfigError(f"{type(backend).__name__} cannot create queues")
    for queue in app.registry.queues:
        try:
            await backend.queue_info(queue)
        except QueueNotFound:
            await backend.create_queue(
                QueueSpec(queue, visibility_timeout_s=app.config.lease.visibility_s)
            )


async def queue_info_at_start(
    backend: Backend,
    queue: str,
    *,
    config: WorkerConfig,
    clock: Clock,
    give_up_at: float,
    stop: anyio.Event,
    log: Any,
) -> QueueInfo:
    """`backend.queue_info(queue)`, retried through transient failures (see above)."""
    pause, started, attempts = config.receive_backoff_s, clock.now(), 0
    while True:
        attempts += 1
        try:
            return await call_by(
                clock.now() + config.call_timeout_s,
                lambda: backend.queue_info(queue),
                operation="GetQueueAttributes",
                queue=queue,
            )
        except FatalBackendError:
            raise
        except Exception as raised:
            error = as_backend_error(raised, log, "GetQueueAttributes", queue)
        if stop.is_set() or clock.now() + pause > give_up_at:
            raise _no_answer(queue, attempts, clock.now() - started, error)
        log.warning(
            "queue.check_failed",
            queue=queue,
            code=error.code or type(error).__name__,
            error=str(error),
            attempt=attempts,
            retry_in_s=pause,
        )
        with anyio.move_on_after(pause):
            await stop.wait()  # a signal ends the wait at once
        if stop.is_set():
            raise _no_answer(queue, attempts, clock.now() - started, error)
        pause = min(pause * 2, config.receive_backoff_max_s)


def _no_answer(
    queue: str, attempts: int, waited_s: float, error: BackendError
) -> TransientBackendError:
    failure = TransientBackendError(
        f"queue {queue!r}: no answer from the queue service after {attempts} attempts over "
        f"{waited_s:.0f} s ({error})",
        operation="GetQueueAttributes",
        queue=queue,
        code=error.code,
    )
    failure.__cause__ = error
    return failure
