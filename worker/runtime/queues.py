"""Creating the app's queues on a backend that starts empty (the embedded engine, tests)."""

from __future__ import annotations

from worker.app import Worker
from worker.backend import Backend, QueueAdmin
from worker.errors import ConfigError, QueueNotFound
from worker.types import QueueSpec

__all__ = ["create_missing_queues"]


async def create_missing_queues(app: Worker, backend: Backend) -> None:
    """Create every queue `app` has a handler for that `backend` does not have yet, with the
    app's visibility as the queue's VisibilityTimeout."""
    if not isinstance(backend, QueueAdmin):
        raise ConfigError(f"{type(backend).__name__} cannot create queues")
    for queue in app.registry.queues:
        try:
            await backend.queue_info(queue)
        except QueueNotFound:
            await backend.create_queue(
                QueueSpec(queue, visibility_timeout_s=app.config.lease.visibility_s)
            )
