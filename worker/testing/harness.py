"""`run_worker` and `WorkerHarness`: a worker on the in-memory engine inside a test."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio

from backends.memory import MemoryBackend
from worker.app import Worker
from worker.backend import Backend, QueueAdmin
from worker.clock import ManualClock
from worker.core.settlement import Outcome, Settlement
from worker.errors import ConfigError
from worker.runtime.metrics import Metrics
from worker.runtime.queues import create_missing_queues
from worker.runtime.supervisor import Supervisor
from worker.types import OutgoingMessage, ReceivedMessage

__all__ = ("Handled", "ManualClock", "WorkerHarness", "run_worker")


@dataclass(frozen=True, slots=True)
class Handled:
    """One finished handler run."""

    message: ReceivedMessage
    outcome: Outcome
    settlement: Settlement


class WorkerHarness:
    """A running worker on an in-memory backend, with ways to feed it and watch it."""

    def __init__(self, supervisor: Supervisor, backend: Backend) -> None:
        self.supervisor = supervisor
        self.backend = backend
        self.metrics = supervisor.metrics
        self.handled: list[Handled] = []
        self._changed = anyio.Event()

    @property
    def engine(self) -> Any:
        """The in-memory engine, for its test hooks (counts, peek, expire)."""
        return getattr(self.backend, "engine", None)

    def _observe(self, message: ReceivedMessage, outcome: Outcome, settlement: Settlement) -> None:
        self.handled.append(Handled(message, outcome, settlement))
        self._changed.set()

    async def send(self, queue: str, body: Any, **options: Any) -> str:
        """Send `body` (a str as is, anything else as JSON); returns the message id."""
        text = body if isinstance(body, str) else json.dumps(body)
        result = await self.backend.send(queue, [OutgoingMessage(body=text, **options)])
        if result.failed:
            raise ValueError(f"send to {queue!r} failed: {result.failed[0]}")
        return result.message_ids["0"]

    async def wait_for_handled(self, count: int) -> list[Handled]:
        """Wait until at least `count` handler runs have finished; returns them all."""
        while len(self.handled) < count:
            self._changed = anyio.Event()
            await self._changed.wait()
        return list(self.handled)

    async def wait_until_idle(self) -> None:
        """Wait until no message is held and the settler has sent everything."""
        while self.supervisor.in_flight:
            self._changed = anyio.Event()
            await self._changed.wait()
        await self.supervisor.settler.flush()

    def shutdown(self) -> None:
        self.supervisor.request_shutdown()


@asynccontextmanager
async def run_worker(
    app: Worker,
    *,
    backend: Backend | None = None,
    metrics: Metrics | None = None,
    create_queues: bool = True,
    **options: Any,
) -> AsyncIterator[WorkerHarness]:
    """Run `app` until the block ends, then shut it down cleanly.

    `backend` defaults to a new in-memory backend; with `create_queues`, every registered
    queue that does not exist yet is created (on a backend that can create queues). Other
    `options` go to `Supervisor` (e.g. `sample_queues_every_s`).
    """
    backend = backend or MemoryBackend()
    if isinstance(getattr(getattr(backend, "engine", None), "clock", None), ManualClock):
        raise ConfigError(
            "run_worker: the in-memory engine runs on a ManualClock, which stands still under "
            "a running worker; use MemoryBackend() (the event loop's clock) and looptime"
        )
    if create_queues and isinstance(backend, QueueAdmin):
        await create_missing_queues(app, backend)
    harness: WorkerHarness
    observers = [lambda m, o, s: harness._observe(m, o, s)]
    supervisor = Supervisor(app, backend, metrics=metrics, observers=observers, **options)
    harness = WorkerHarness(supervisor, backend)
    await supervisor.prepare()  # a missing queue raises here, not inside a task group
    supervisor.on_lease_finished.append(lambda: harness._changed.set())
    async with anyio.create_task_group() as tasks:
        await tasks.start(supervisor.run)
        try:
            yield harness
        finally:
            if not supervisor.stopping:  # a second request would cut the shutdown short
                supervisor.request_shutdown()
