"""The supervisor: owns every task of a worker and the order in which they stop.

Tasks::

    services ── lease keeper, settler, background tasks
      └─ handlers ── one task per message
           └─ receivers ── one long-poll loop per queue

Shutdown, on the first `request_shutdown()` (SIGTERM/SIGINT in the CLI):
1. receiving stops at once: the receive loops, and their pending long polls, are cancelled;
2. drain: handlers run on, leases still extended, for `grace_s`; a second request cuts the
   drain to `second_signal_grace_s`;
3. every handler still running is cancelled and its message released (shortest visibility),
   so another worker takes it at once;
4. the settler sends what is pending, within `flush_timeout_s`; then the services stop.
A fatal backend error (missing queue, access denied) takes the same path and is raised at
the end. The supervisor never stops because of one message.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import anyio
import structlog
from anyio.abc import TaskGroup, TaskStatus

from worker.app import Worker, WorkerContext
from worker.backend import Backend
from worker.clock import Clock, LoopClock
from worker.core.lease import Lease
from worker.core.preflight import check_queue
from worker.core.settlement import Outcome
from worker.errors import ConfigError, FatalBackendError
from worker.runtime.dispatcher import Dispatcher
from worker.runtime.handlers import Executor, Observer
from worker.runtime.lease_keeper import LeaseKeeper
from worker.runtime.metrics import Metrics, watch_loop_lag
from worker.runtime.receiver import Receiver
from worker.runtime.settler import Settler
from worker.runtime.slots import Slots
from worker.types import QueueInfo, ReceivedMessage

__all__ = ["Supervisor", "run", "serve"]


class Supervisor:
    """Runs one `Worker` on one backend: receivers, handlers, the lease keeper and the
    settler, and the order in which they stop (see the module docstring).

    `run()` returns after a clean shutdown (`request_shutdown()`, which the CLI calls on
    SIGTERM/SIGINT); `prepare()` runs the start-up hooks and checks the queues first.
    """

    def __init__(
        self,
        app: Worker,
        backend: Backend,
        *,
        clock: Clock | None = None,
        metrics: Metrics | None = None,
        observers: list[Observer] | None = None,
        logger: Any = None,
    ) -> None:
        if not len(app.registry):
            raise ConfigError(
                f"worker {app.name!r} has no handlers: register one with @app.handler(queue)"
            )
        self.app = app
        self.backend = backend
        self.clock = clock or LoopClock()
        self.metrics = metrics or Metrics()
        self.queues: dict[str, QueueInfo] = {}
        self._log = logger or structlog.get_logger("lease_worker.supervisor")
        config = app.config
        self.keeper = LeaseKeeper(backend, config.lease, clock=self.clock, metrics=self.metrics)
        self.settler = Settler(
            backend,
            clock=self.clock,
            metrics=self.metrics,
            linger_s=config.settle_linger_s,
            untrack=self.keeper.untrack,
            wait_extension_idle=self.keeper.wait_extension_idle,
            retry_interval_s=config.lease.retry_interval_s,
            call_timeout_s=config.call_timeout_s,
        )
        self.executor = Executor(
            keeper=self.keeper,
            settler=self.settler,
            clock=self.clock,
            metrics=self.metrics,
            limits=backend.limits,
            sync_threads=config.sync_threads,
            observers=observers or [],
        )
        self.dispatcher = Dispatcher(
            executor=self.executor,
            keeper=self.keeper,
            spec_for=lambda queue: app.registry[queue],
            is_fifo=lambda queue: self.queues[queue].fifo,
        )
        self._held: set[Lease] = set()
        self._stop_receiving = anyio.Event()
        self._drained = anyio.Event()
        self._drain_scope: anyio.CancelScope | None = None
        self._shutdown_requests = 0
        self._fatal: FatalBackendError | None = None
        self._context = WorkerContext(backend, self.metrics.registry, self.request_shutdown)
        #: Called after each lease ends (settled, forgotten or lost): for tests and hooks.
        self.on_lease_finished: list[Callable[[], None]] = []

    @property
    def in_flight(self) -> int:
        return len(self._held)

    @property
    def stopping(self) -> bool:
        return self._stop_receiving.is_set()

    def request_shutdown(self) -> None:
        """First call: stop receiving and drain. Second: cut the drain short."""
        self._shutdown_requests += 1
        if self._shutdown_requests == 1:
            self._log.info(
                "shutdown.requested",
                in_flight=self.in_flight,
                grace_s=self.app.config.shutdown.grace_s,
            )
            self._stop_receiving.set()
        elif self._drain_scope is not None:
            hurry = self.clock.now() + self.app.config.shutdown.second_signal_grace_s
            self._log.warning("shutdown.hurried", in_flight=self.in_flight)
            self._drain_scope.deadline = min(self._drain_scope.deadline, hurry)

    async def prepare(self) -> None:
        """Run the start-up hooks and check every queue; `run` does it if not done yet.

        Raises `QueueNotFound` (or another `FatalBackendError`) before anything is received.
        """
        if self.queues:
            return
        for hook in self.app.startup_hooks:
            await hook(self._context)
        await self._check_queues()

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        await self.prepare()
        try:
            await self._run(task_status)
        except anyio.get_cancelled_exc_class():
            # Cancelled from outside (an embedding application going down): the handler
            # tasks were cancelled and asked for releases; send them from here, since the
            # settler's own task went down too.
            with anyio.move_on_after(self.app.config.shutdown.flush_timeout_s, shield=True):
                self._cancel_held()
                await self.settler.send_now()
            raise
        self._log.info("shutdown.complete")
        if self._fatal is not None:
            raise self._fatal

    async def _run(self, task_status: TaskStatus[None]) -> None:
        context = self._context
        async with anyio.create_task_group() as services:
            await services.start(self.keeper.run)
            await services.start(self.settler.run)
            services.start_soon(watch_loop_lag, self.metrics)
            # Handler tasks in asyncio's own task group: as structured as anyio's, at a
            # third of the cost per task (memory and CPU), which counts at 100,000 in flight.
            async with asyncio.TaskGroup() as handlers:
                self.dispatcher.tasks = handlers
                await self._receive_until_stopped(services, context, task_status)
                await self._drain()
                self._cancel_held()
            await self._flush()
            services.cancel_scope.cancel()

    async def _check_queues(self) -> None:
        for spec in self.app.registry:
            info = await self.backend.queue_info(spec.queue)
            self.queues[spec.queue] = info
            self._log.info(
                "queue.ready",
                queue=spec.queue,
                visibility_timeout_s=info.visibility_timeout_s,
                fifo=info.fifo,
                dead_letter_queue=info.redrive.dead_letter_queue if info.redrive else None,
            )
            for warning in check_queue(spec.policy, info, self.app.config.lease):
                self._log.warning("queue.config_warning", queue=spec.queue, warning=warning)

    async def _receive_until_stopped(
        self, services: TaskGroup, context: WorkerContext, task_status: TaskStatus[None]
    ) -> None:
        async with anyio.create_task_group() as receivers:
            for spec in self.app.registry:
                receiver = self._receiver(spec.queue, spec.max_in_flight)
                for _ in range(self.app.config.receive_concurrency):
                    await receivers.start(receiver.run)
            for task in self.app.background_tasks:
                services.start_soon(task, context)
            self._log.info("worker.started", queues=self.app.registry.queues)
            task_status.started()
            await self._stop_receiving.wait()
            receivers.cancel_scope.cancel()

    def _receiver(self, queue: str, max_in_flight: int | None) -> Receiver:
        slots = Slots(max_in_flight or self.app.config.max_in_flight)
        return Receiver(
            queue,
            backend=self.backend,
            keeper=self.keeper,
            clock=self.clock,
            metrics=self.metrics,
            config=self.app.config,
            slots=slots,
            adopt=self.dispatcher.adopt,
            dispatch=self._dispatch,
            on_finish=self._finished,
            on_fatal=self._on_fatal,
        )

    def _dispatch(self, received: ReceivedMessage, lease: Lease) -> None:
        self._held.add(lease)
        self.dispatcher.dispatch(received, lease)

    def _finished(self, lease: Lease) -> None:
        self._held.discard(lease)
        self.dispatcher.forget(lease)
        for listener in self.on_lease_finished:
            listener()
        if not self._held and self.stopping:
            self._drained.set()

    def _on_fatal(self, error: FatalBackendError) -> None:
        self._log.error("worker.fatal", error=str(error), code=error.code, queue=error.queue)
        self._fatal = self._fatal or error
        self.request_shutdown()

    async def _drain(self) -> None:
        if not self._held:
            return
        grace = self.app.config.shutdown.grace_s
        self._log.info("shutdown.draining", in_flight=self.in_flight, grace_s=grace)
        with anyio.CancelScope(deadline=self.clock.now() + grace) as scope:
            self._drain_scope = scope
            if self._shutdown_requests > 1:
                self.request_shutdown()
            await self._drained.wait()
        self._drain_scope = None

    def _cancel_held(self) -> None:
        left = [lease for lease in self._held if lease.cancel_reason is None]
        if left:
            self._log.warning("shutdown.releasing", messages=len(left))
        for lease in left:
            lease.cancel(Outcome.SHUTDOWN)

    async def _flush(self) -> None:
        with anyio.move_on_after(self.app.config.shutdown.flush_timeout_s, shield=True) as scope:
            await self.settler.flush()
        if scope.cancelled_caught:
            self._log.error("shutdown.flush_timed_out", pending=self.settler.pending)


async def serve(app: Worker, backend: Backend, **options: Any) -> None:
    """Run `app` on `backend` until it is shut down (`Supervisor` takes the `options`)."""
    await Supervisor(app, backend, **options).run()


def run(app: Worker, backend: Backend, **options: Any) -> None:
    """Blocking form of `serve`: runs its own event loop."""
    anyio.run(lambda: serve(app, backend, **options))
