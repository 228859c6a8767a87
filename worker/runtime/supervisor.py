"""The supervisor: owns every task of a worker and the order in which they stop.

Tasks::

    background ── the application's background tasks, each shielded until the run's end:
      │           they outlive the handlers however the run ends (a cancellation from
      │           outside included), so a heartbeat never ends claims still in use
      └─ services ── lease keeper, settler, loop-lag watcher, queue sampler
           └─ receivers ── one long-poll loop per queue
    handlers ── one task per message, in a group no task waits inside
                (`HandlerTasks`): a handler that will not end cannot hold the exit

Shutdown, on the first `request_shutdown()` (SIGTERM/SIGINT in the CLI), bounded by
`grace_s + flush_timeout_s` whatever the handlers do:
1. receiving stops at once: no new long poll starts; those in flight are not thrown away
   (the service may already have handed messages out in their answers) but waited for,
   within the grace (each ends by `wait_s` plus the call timeout), and what they bring is
   released at once, its handlers never run; a poll still unanswered at the grace's end
   is cancelled (`shutdown.receive_cut_short`: what it took, if anything, stays invisible
   until the visibility asked for at receive runs out);
2. drain: handlers run on, leases still extended, until `grace_s` after the request (a
   second request: `second_signal_grace_s` after it, which cuts the polls short too);
3. every handler still running is cancelled, level-triggered, and its message released
   (shortest visibility); a synchronous handler's lease is kept while its thread runs;
4. handlers get half of `flush_timeout_s` to end (after a second request, one loop
   iteration); the rest are given up on, and their messages left to lapse (no more
   renewals, never released while the handler's coroutine or thread still exists: another
   consumer would run it alongside); a message whose handler never started is released;
   `handlers_running` tells if a task is left behind;
5. the settler sends what is pending, until `flush_timeout_s` after step 3.
A fatal backend error (missing queue, access denied) takes the same path and is raised at
the end; so does a crash (a background task, or a task of the runtime, raising anything but
a cancellation), without the drain, and `WorkerCrashed` is raised. A cancellation from
outside releases what is held from the calling task, shielded, within `flush_timeout_s`.
One message never stops the supervisor: what a handler raises is its message's failure.

Start-up (`prepare()`): a transient failure reading a queue's attributes is retried with a
doubling pause for `STARTUP_CALL_TIMEOUTS` call timeouts (60 s by default), then raised.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import structlog
from anyio.abc import TaskGroup, TaskStatus

from worker.backend import Backend
from worker.clock import LoopClock
from worker.config import FlowControl
from worker.core.lease import Lease, LeaseState
from worker.core.preflight import check_config, check_queue
from worker.core.settlement import Action, Outcome, Settlement
from worker.errors import (
    ConfigError,
    FatalBackendError,
    WorkerCrashed,
)
from worker.registry import AppSpec, DescribesApp, WorkerContext, app_spec, resolve_decoder
from worker.runtime.background import BackgroundTasks
from worker.runtime.dispatcher import Dispatcher
from worker.runtime.flow import QueueFlow
from worker.runtime.handler_tasks import HandlerTasks
from worker.runtime.handlers import Executor, Observer
from worker.runtime.lease_keeper import LeaseKeeper
from worker.runtime.loop_lag import LoopLag
from worker.runtime.metrics import Metrics, MetricsSnapshot
from worker.runtime.queue_sampler import QueueSampler
from worker.runtime.queues import STARTUP_CALL_TIMEOUTS, queue_info_at_start
from worker.runtime.rate_gate import RateGate
from worker.runtime.rate_store import RateStore, rate_store
from worker.runtime.receiver import Receiver
from worker.runtime.settler import Settler
from worker.runtime.slots import Slots
from worker.runtime.tenants import Admission
from worker.runtime.timed_backend import TimedBackend
from worker.types import QueueInfo, ReceivedMessage

__all__ = ["Supervisor", "run", "serve"]


class Supervisor:
    """Runs one `Worker` on one backend: receivers, handlers, the lease keeper and the
    settler, and the order in which they stop (see the module docstring).

    `run()` returns after a clean shutdown (`request_shutdown()`, which the CLI calls on
    SIGTERM/SIGINT); `prepare()` runs the start-up hooks and checks the queues first. Time
    is the event loop's clock: fast-forward the loop (looptime) to test on virtual time.
    """

    def __init__(
        self,
        app: AppSpec | DescribesApp,
        backend: Backend,
        *,
        metrics: Metrics | None = None,
        observers: list[Observer] | None = None,
        logger: Any = None,
        sample_queues_every_s: float | None = None,
        loop_lag_interval_s: float = 5.0,
    ) -> None:
        app = app_spec(app)
        if not len(app.registry):
            raise ConfigError(
                f"worker {app.name!r} has no handlers: register one with @app.handler(queue)"
            )
        check_config(app.config, backend.limits)  # the backend's limits, not SQS's numbers
        self.app = app
        self.backend = backend
        self.clock = LoopClock()
        self.metrics = metrics or Metrics()
        self.queues: dict[str, QueueInfo] = {}
        self.receivers: dict[str, Receiver] = {}
        self.loop_lag = LoopLag(self.metrics.loop_lag, interval_s=loop_lag_interval_s)
        self._log = logger or structlog.get_logger("lease_worker.supervisor")
        config = app.config
        calls = self._calls = TimedBackend(backend, self.metrics)
        self._observers: list[Observer] = list(observers or [])
        #: Each queue's flow control, where its `FlowControl` turns any on.
        self.flows: dict[str, QueueFlow] = {}
        #: Shared rate limits' stores, one per URL, closed at the end of the run.
        self.rate_stores: dict[str, RateStore] = {}
        self.keeper = LeaseKeeper(calls, config.lease, clock=self.clock, metrics=self.metrics)
        self.settler = Settler(
            calls,
            clock=self.clock,
            metrics=self.metrics,
            linger_s=config.settle_linger_s,
            leases=self.keeper,
            retry_interval_s=config.lease.retry_interval_s,
            call_timeout_s=config.call_timeout_s,
            renew_timeout_s=config.lease.effective_renew_timeout_s,
        )
        self.executor = Executor(
            keeper=self.keeper,
            settler=self.settler,
            clock=self.clock,
            metrics=self.metrics,
            limits=backend.limits,
            sync_threads=config.sync_threads,
            observers=self._observers,
        )
        self.dispatcher = Dispatcher(
            executor=self.executor,
            keeper=self.keeper,
            spec_for=lambda queue: app.registry[queue],
            is_fifo=lambda queue: self.queues[queue].fifo,
        )
        self._handlers = HandlerTasks(on_crash=lambda error: self._crashed("a handler task", error))
        self._stop_receiving = anyio.Event()
        self._stopped_at = 0.0  # when receiving was told to stop: the grace counts from it
        self._released_unhandled = 0  # brought by polls in flight at the stop
        self._drained = anyio.Event()
        # A second request or a crash moves a phase's end up, and the scope waiting for it.
        self._until: dict[str, float] = {}
        self._scopes: dict[str, anyio.CancelScope] = {}
        self._shutdown_requests = 0
        self._fatal: FatalBackendError | None = None
        self._crash: WorkerCrashed | None = None
        self._settler_down = False
        self._background_group: TaskGroup
        self._background = BackgroundTasks()
        self._context = WorkerContext(backend, self.metrics.registry, self.request_shutdown)
        self._sampler = None
        if sample_queues_every_s is not None:
            self._sampler = QueueSampler(
                calls,
                queues=lambda: self.queues,
                oldest_received_age_s=self._oldest_received_age_s,
                metrics=self.metrics,
                clock=self.clock,
                interval_s=sample_queues_every_s,
                call_timeout_s=config.call_timeout_s,
            )
        for spec in app.registry:
            self.metrics.declare_queue(spec.queue, spec.name)
        self.metrics.watch(self.snapshot)
        #: Called after each lease ends (settled, forgotten or lost): for tests and hooks.
        self.on_lease_finished: list[Callable[[], None]] = []

    @property
    def in_flight(self) -> int:
        return self.dispatcher.held_count

    @property
    def stopping(self) -> bool:
        return self._stop_receiving.is_set()

    @property
    def receiving(self) -> bool:
        """Start-up is over and no shutdown has begun: messages are being received."""
        return bool(self.receivers) and not self.stopping

    def held(self) -> list[tuple[Lease, ReceivedMessage]]:
        """Every message held right now and its lease (a copy): for the console."""
        held = self.dispatcher.held()
        return [(lease, lease.received) for lease in held if lease.received is not None]

    def snapshot(self) -> MetricsSnapshot:
        """What is held right now: read by the metrics at each scrape."""
        now = self.clock.now()
        nearest: dict[str, float] = {}
        held = self.dispatcher.held()
        for lease in held:
            left = lease.deadline - now
            nearest[lease.queue] = min(nearest.get(lease.queue, left), left)
        abandoned = 0
        running = self.executor.threads.running_keys()
        if running:  # a set of every held message only when a thread runs at all
            keys = {(lease.queue, lease.message_id) for lease in held}
            abandoned = sum(key not in keys for key in running)
        return MetricsSnapshot(nearest, self.settler.pending, abandoned)

    @property
    def handlers_running(self) -> bool:
        """True after `run()` if a handler task that would not end was left running (it
        swallows every cancellation): the event loop's own exit would wait for it."""
        return self._handlers.opened and not self._handlers.ended

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
        elif self._shutdown_requests == 2:
            self._log.warning("shutdown.hurried", in_flight=self.in_flight)
            hurry = self.clock.now() + self.app.config.shutdown.second_signal_grace_s
            self._move_up("drain", hurry)
            self._move_up("wind_down", hurry)

    async def prepare(self) -> None:
        """Run the start-up hooks and check every queue; `run` does it if not done yet.

        Raises `QueueNotFound` (or another `FatalBackendError`) before anything is received,
        and a `TransientBackendError` once start-up has retried for `STARTUP_CALL_TIMEOUTS`
        call timeouts (or a shutdown was requested meanwhile).
        """
        if self.queues:
            return
        for hook in self.app.startup_hooks:
            await hook(self._context)
        await self._check_queues()

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        await self.prepare()
        self.clock.bind()  # for this run, in this loop: LoopClock.bind
        try:
            await self._run_bound(task_status)
        finally:
            self.clock.unbind()

    async def _run_bound(self, task_status: TaskStatus[None]) -> None:
        # Background tasks outlive the handlers, whatever ends the run (BackgroundTasks).
        async with anyio.create_task_group() as self._background_group:
            try:
                await self._run(task_status)
            except BaseException:
                # Cancelled from outside (an embedding application going down), or a bug
                # here: release what is held from this task; the settler's went down too.
                flush_s = self.app.config.shutdown.flush_timeout_s
                with anyio.CancelScope(deadline=self.clock.now() + flush_s, shield=True):
                    await self._release_from_here(flush_s / 2)
                raise
            finally:
                self._background.end()
                await self._close_rate_stores()
        self._log.info("shutdown.complete")
        if self._crash is not None:
            raise self._crash
        if self._fatal is not None:
            raise self._fatal

    async def _run(self, task_status: TaskStatus[None]) -> None:
        flush_s = self.app.config.shutdown.flush_timeout_s
        async with anyio.create_task_group() as services:
            await services.start(self._service, "the lease keeper", self.keeper.run)
            await services.start(self._service, "the settler", self.settler.run)
            await services.start(self._service, "the loop lag watcher", self.loop_lag.run)
            if self._sampler is not None:
                await services.start(self._service, "the queue sampler", self._sampler.run)
            self.dispatcher.tasks = await self._handlers.open()
            await self._receive_and_drain(task_status)
            cancelled_at = self.clock.now()
            self._cancel_held()
            await self._wind_down(cancelled_at + flush_s / 2)
            await self._flush(cancelled_at + flush_s)
            services.cancel_scope.cancel()

    async def _check_queues(self) -> None:
        give_up_at = self.clock.now() + STARTUP_CALL_TIMEOUTS * self.app.config.call_timeout_s
        for spec in self.app.registry:
            info = self.queues[spec.queue] = await queue_info_at_start(
                self._calls,
                spec.queue,
                config=self.app.config,
                clock=self.clock,
                give_up_at=give_up_at,
                stop=self._stop_receiving,
                log=self._log,
            )
            self._log.info(
                "queue.ready",
                queue=spec.queue,
                visibility_timeout_s=info.visibility_timeout_s,
                fifo=info.fifo,
                dead_letter_queue=info.redrive.dead_letter_queue if info.redrive else None,
            )
            for warning in check_queue(spec.policy, info, self.app.config.lease):
                self._log.warning("queue.config_warning", queue=spec.queue, warning=warning)

    async def _receive_and_drain(self, task_status: TaskStatus[None]) -> None:
        """Receive until stopped, then drain: the polls in flight and the handlers together."""
        async with anyio.create_task_group() as receivers:
            for spec in self.app.registry:
                receiver = self.receivers[spec.queue] = self._receiver(
                    spec.queue, spec.max_in_flight
                )
                for _ in range(self.app.config.receive_concurrency):
                    name = f"the receiver of {spec.queue!r}"
                    await receivers.start(self._service, name, receiver.run)
            for task in self.app.background_tasks:
                name = f"background task {getattr(task, '__qualname__', repr(task))}"
                work = functools.partial(self._watch, name, task(self._context))
                self._background.start(self._background_group, work)
            self._log.info("worker.started", queues=self.app.registry.queues)
            task_status.started()
            await self._stop_receiving.wait()
            self._stopped_at = self.clock.now()
            for receiver in self.receivers.values():
                receiver.stop()  # no new polls: those in flight end by themselves
            self._release_waiting()
            await self._drain()
            receivers.cancel_scope.cancel()  # polls unanswered at the drain's end
        self._polls_ended()

    def _polls_ended(self) -> None:
        cut_short = sum(receiver.cut_short for receiver in self.receivers.values())
        if cut_short:
            self._log.warning("shutdown.receive_cut_short", polls=cut_short)
        if self._released_unhandled:
            self._log.info("shutdown.released_unhandled", messages=self._released_unhandled)

    async def _service(
        self,
        name: str,
        run: Callable[..., Awaitable[None]],
        *,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        await self._watch(name, run(task_status=task_status))

    async def _watch(self, name: str, work: Awaitable[None]) -> None:
        try:
            await work
        except anyio.get_cancelled_exc_class():
            raise
        except BaseException as error:  # SystemExit, KeyboardInterrupt too: a crash
            self._crashed(name, error)

    def _crashed(self, task: str, error: BaseException) -> None:
        self._log.error("worker.crashed", task=task, error=type(error).__name__, exc_info=error)
        self._settler_down = self._settler_down or task == "the settler"
        self._crash = self._crash or WorkerCrashed(task, error)
        self._stop_receiving.set()
        self._move_up("drain", self.clock.now())

    def _receiver(self, queue: str, max_in_flight: int | None) -> Receiver:
        config = self.app.config
        flow = self._flow_of(queue)
        slots = Slots(max_in_flight or config.max_in_flight, max_bytes=flow.max_bytes)
        rate = None
        if not flow.off:
            rate = self._rate_gate(queue, flow)
            info = self.queues[queue]
            self.flows[queue] = QueueFlow(
                queue,
                flow,
                slots=slots,
                rate=rate,
                fifo=info.fifo,
                clock=self.clock,
                metrics=self.metrics,
                dead_letters=info.redrive is not None,
            )
            if flow.adaptive is not None and self._observe_flow not in self._observers:
                self._observers.append(self._observe_flow)
        return Receiver(
            queue,
            backend=self._calls,
            keeper=self.keeper,
            clock=self.clock,
            metrics=self.metrics,
            config=self.app.config,
            slots=slots,
            adopt=self.dispatcher.adopt,
            # Flow control off (no QueueFlow): straight to the handler, no lookup a message.
            dispatch=self._dispatch if queue in self.flows else self._run_handler,
            release=self._release_unhandled,
            on_finish=self._finished,
            on_fatal=self._on_fatal,
            note_sent=self._sampler is not None,
            rate=rate,
            # A raw body is its own payload; any other decoding makes one more (max_bytes).
            decoded=self.app.registry[queue].decoder is not resolve_decoder("raw"),
        )

    def _flow_of(self, queue: str) -> FlowControl:
        """The queue's flow control: its handler's own, over the worker's, part by part."""
        own, worker_wide = self.app.registry[queue].flow, self.app.config.flow
        return worker_wide if own is None else own.over(worker_wide)

    def _rate_gate(self, queue: str, flow: FlowControl) -> RateGate | None:
        limit = flow.rate
        if limit is None:
            return None
        config = self.app.config
        store = None
        if limit.shared is not None:
            store = self.rate_stores.get(limit.shared)
            if store is None:
                store = self.rate_stores[limit.shared] = rate_store(
                    limit.shared, timeout_s=config.call_timeout_s
                )
        return RateGate(
            queue,
            limit,
            batch=self.backend.limits.receive_batch,
            store=store,
            clock=self.clock,
            metrics=self.metrics,
            call_timeout_s=config.call_timeout_s,
            backoff_s=config.receive_backoff_s,
            backoff_max_s=config.receive_backoff_max_s,
        )

    async def _close_rate_stores(self) -> None:
        with anyio.CancelScope(shield=True), anyio.move_on_after(1.0):
            for store in self.rate_stores.values():
                try:
                    await store.close()
                except Exception as error:  # closing a connection: nothing left to lose
                    self._log.info("flow.rate_store_close_failed", error=type(error).__name__)

    def _observe_flow(
        self, received: ReceivedMessage, outcome: Outcome, settlement: Settlement
    ) -> None:
        flow = self.flows.get(received.queue)
        if flow is not None:
            flow.observed(received, outcome)

    def _release_waiting(self) -> None:
        """A shutdown: messages waiting for their tenant's turn are handed back, never run."""
        for flow in self.flows.values():
            if flow.tenants is not None:
                for lease in flow.tenants.take_waiting():
                    self._release_unhandled(lease)

    def _oldest_received_age_s(self, queue: str) -> float | None:
        receiver = self.receivers.get(queue)
        return None if receiver is None else receiver.take_oldest_age_s()

    def _dispatch(self, received: ReceivedMessage, lease: Lease) -> None:
        flow = self.flows.get(lease.queue)
        if flow is not None:
            if flow.tenants is not None:
                admission, release_s = flow.tenants.admit(received, lease)
                if admission is Admission.WAIT:
                    self.dispatcher.hold(received, lease)  # renewed, its handler not started
                    return
                if admission is Admission.RELEASE:
                    flow.tenant_released.inc()
                    self.settler.submit(lease, Settlement(Action.RELEASE, release_s))
                    return
            flow.started(received)
        self._run_handler(received, lease)

    def _run_handler(self, received: ReceivedMessage, lease: Lease) -> None:
        try:
            self.dispatcher.dispatch(received, lease)
        except Exception:
            # Not stranded (renewed, never run): released at once through the settler, and
            # its slot given back once, when its lease ends.
            self._log.exception("dispatch.failed", queue=lease.queue, message_id=lease.message_id)
            flow = self.flows.get(lease.queue) if self.flows else None
            if flow is not None:
                flow.not_started(received)
            release = Settlement(Action.RELEASE, self.backend.limits.min_release_visibility_s)
            self.settler.submit(lease, release)

    def _release_unhandled(self, lease: Lease) -> None:
        """A message a poll in flight at the stop brought: handed back at once, not run."""
        self._released_unhandled += 1
        release = Settlement(Action.RELEASE, self.backend.limits.min_release_visibility_s)
        self.settler.submit(lease, release)

    def _finished(self, lease: Lease) -> None:
        self.dispatcher.forget(lease)
        if self.flows:  # flow control off: nothing to look up
            self._flow_finished(lease)
        for listener in self.on_lease_finished:
            listener()
        if not self.dispatcher.held_count and self.stopping:
            self._drained.set()

    def _flow_finished(self, lease: Lease) -> None:
        flow = self.flows.get(lease.queue)
        if flow is None:
            return
        flow.finished(lease)
        if flow.tenants is not None:
            turn = flow.tenants.finished(lease)
            if turn is not None:  # the tenant's next waiting message
                if self.stopping:
                    self._release_unhandled(turn[1])
                else:
                    self.keeper.reschedule(turn[1])  # its cap counts from now
                    flow.started(turn[0])
                    self._run_handler(*turn)

    def _on_fatal(self, error: FatalBackendError) -> None:
        self._log.error("worker.fatal", error=str(error), code=error.code, queue=error.queue)
        self._fatal = self._fatal or error
        if not self.stopping:  # a poll in flight at the stop: not a second request
            self.request_shutdown()

    def _move_up(self, phase: str, until: float) -> None:
        self._until[phase] = min(self._until.get(phase, until), until)
        if (scope := self._scopes.get(phase)) is not None:
            scope.deadline = min(scope.deadline, until)

    async def _phase(self, phase: str, until: float, wait: Callable[[], Awaitable[None]]) -> None:
        with anyio.CancelScope(deadline=min(until, self._until.get(phase, until))) as scope:
            self._scopes[phase] = scope
            await anyio.lowlevel.checkpoint()  # one loop iteration, even when hurried
            await wait()
        del self._scopes[phase]

    async def _drain(self) -> None:
        """Until `grace_s` after the stop: the handlers end, and the polls in flight too."""
        grace = self.app.config.shutdown.grace_s
        if self.dispatcher.held_count:
            self._log.info("shutdown.draining", in_flight=self.in_flight, grace_s=grace)
        await self._phase("drain", self._stopped_at + grace, self._until_drained)

    async def _until_drained(self) -> None:
        for receiver in self.receivers.values():
            await receiver.wait_stopped()
        if self.dispatcher.held_count:  # else `_drained` may never be set: nothing ends
            await self._drained.wait()

    def _cancel_held(self) -> None:
        left = [lease for lease in self.dispatcher.held() if lease.cancel_reason is None]
        if left:
            self._log.warning("shutdown.releasing", messages=len(left))
        for lease in left:
            lease.cancel(Outcome.SHUTDOWN)

    async def _wind_down(self, until: float) -> None:
        """Wait for the cancelled handlers to end, then give up on those that have not."""
        self._handlers.close()
        await self._phase("wind_down", until, self._handlers.wait)
        if not self._handlers.ended:
            self._give_up()

    def _give_up(self) -> None:
        left = [lease for lease in self.dispatcher.held() if lease.state is LeaseState.HELD]
        if not left:
            return
        # Left to lapse: each handler (task or thread) still exists and may act on its message.
        running = sum(self.executor.abandon(lease) for lease in left)
        self._log.warning(
            "shutdown.gave_up_waiting",
            released=len(left) - running,
            left_to_lapse=running,
        )

    async def _flush(self, until: float) -> None:
        with anyio.CancelScope(deadline=until, shield=True) as scope:
            if not self._settler_down:
                await self.settler.flush()
            if self._settler_down:  # also when it went down during the flush
                await self.settler.send_now()
        if scope.cancelled_caught:
            self._log.error("shutdown.flush_timed_out", pending=self.settler.pending)

    async def _release_from_here(self, wind_down_s: float) -> None:
        self._stop_receiving.set()  # a tenant's turn from here on is released, not run
        self._release_waiting()
        self._cancel_held()
        self._handlers.cancel()
        with anyio.move_on_after(wind_down_s):
            await self._handlers.wait()
        if not self._handlers.ended:
            self._give_up()
        await self.settler.send_now()


async def serve(app: AppSpec | DescribesApp, backend: Backend, **options: Any) -> None:
    """Run `app` on `backend` until it is shut down (`Supervisor` takes the `options`)."""
    await Supervisor(app, backend, **options).run()


def run(app: AppSpec | DescribesApp, backend: Backend, **options: Any) -> None:
    """Blocking form of `serve`: runs its own event loop."""
    anyio.run(lambda: serve(app, backend, **options))
