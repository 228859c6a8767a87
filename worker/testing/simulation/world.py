"""`simulate(schedule)`: the real runtime of a fleet of workers, on one virtual clock, against
the in-memory engine, every call through the simulated network; returns what the checks
found.

What runs is what users run: each worker process is a `Supervisor` (receivers, lease
keeper, settler, dispatcher, handlers, flow control's slots, shutdown) around an app
registered with `@app.handler`, its backend the `SimBackend` of its slot. Around them:
- the messages are sent straight to the engine at their drawn times;
- each handler run sleeps its drawn time, may block its loop, calls
  `message.lease.ensure_held()` right before its side effect (as the docs tell users to),
  makes it, and raises if drawn to fail;
- stalls, SIGTERMs (`request_shutdown()`, what the CLI's signal handler calls) and SIGKILLs
  (a stall with no end) hit a slot's current process at their drawn times; a process that
  ended is restarted in its slot `restart_s` later;
- at `duration_s` every process is told to stop; a killed process's tasks are unwound at
  the very end, its network cut first, so that nothing it does after its death reaches the
  service or the history.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
from collections.abc import Callable, Iterator, MutableMapping
from dataclasses import dataclass
from typing import Any

import structlog

from backends.memory import MemoryBackend
from backends.memory.dialects import SMQ_DIALECT, SQS_DIALECT
from backends.memory.engine import MemoryEngine
from worker.app import Worker
from worker.config import (
    AdaptiveConcurrency,
    FlowControl,
    LeaseConfig,
    RateLimit,
    ShutdownConfig,
    TenantCap,
    WorkerConfig,
)
from worker.errors import LeaseLostError
from worker.message import Message
from worker.runtime.supervisor import Supervisor
from worker.testing.simulation.history import History, Run, Violation
from worker.testing.simulation.loop import PROCESS, START, SimLoop
from worker.testing.simulation.network import Network
from worker.testing.simulation.schedule import Schedule
from worker.types import OutgoingMessage, QueueSpec, RedrivePolicy

__all__ = ["Result", "simulate"]

QUEUE = "jobs"
DEAD_LETTERS = "jobs-dlq"
#: How long after the stop a process may take to end before it counts as hung: its grace,
#: a long poll, the flush, and room for calls that time out.
_SHUTDOWN_SLACK_S = 120.0


class _ServiceClock:
    """The engine's clock: the true time, whichever process's call reads it."""

    def __init__(self, loop: SimLoop) -> None:
        self._loop = loop

    def now(self) -> float:
        return self._loop.true_time()

    def wall_offset_s(self) -> float:
        return 1_700_000_000.0

    async def sleep_until(self, deadline: float) -> None:
        await asyncio.sleep(max(0.0, deadline - self.now()))


class SimulatedFailure(Exception):
    """What a handler drawn to fail raises."""


@dataclass(frozen=True, slots=True)
class Result:
    schedule: Schedule
    violations: tuple[Violation, ...]
    #: A fingerprint of the history (the same schedule gives the same one).
    digest: str
    runs: int
    events: tuple[str, ...]
    #: Every log line of every process, with its `process` and virtual time `t`.
    logs: tuple[MutableMapping[str, Any], ...]

    @property
    def failed(self) -> bool:
        return bool(self.violations)


def simulate(schedule: Schedule) -> Result:
    """Run `schedule` on a fresh loop of its own and check its history."""
    loop = SimLoop()
    world = _World(loop, schedule)
    loop.set_exception_handler(world.on_error)
    try:
        with _logs_to(world.logs, loop):
            loop.run_until_complete(world.run())
            world.ending()
            loop.run_until_complete(_end_every_task(loop))
    finally:
        loop.close()
    if world.errors:
        raise RuntimeError(f"the simulation itself failed: {world.errors[0]}")
    history = world.history
    return Result(
        schedule,
        tuple(history.violations),
        history.digest(),
        len(history.runs),
        tuple(history.events),
        tuple(world.logs),
    )


@contextlib.contextmanager
def _logs_to(logs: list[MutableMapping[str, Any]], loop: SimLoop) -> Iterator[None]:
    """Every log line of the run, with its process and virtual time, into `logs` (as
    structlog's `capture_logs`, which this extends)."""

    def stamp(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
        event["t"] = round(loop.true_time(), 6)
        event["process"] = PROCESS.get()
        return event

    capture = structlog.testing.LogCapture()
    saved = structlog.get_config()
    structlog.configure(processors=[stamp, capture])
    try:
        yield
    finally:
        structlog.configure(**saved)
        logs.extend(capture.entries)


class _World:
    def __init__(self, loop: SimLoop, schedule: Schedule) -> None:
        self.loop = loop
        self.schedule = schedule
        dialect = SMQ_DIALECT if schedule.dialect == "smq" else SQS_DIALECT
        self.engine = MemoryEngine(
            _ServiceClock(loop), dialect=dialect, epoch=f"{schedule.seed:012x}"[-12:]
        )
        self.service = MemoryBackend(self.engine)
        self.history = History(self.engine, QUEUE, DEAD_LETTERS, [""] * len(schedule.sends))
        self.network = Network(self.service, schedule, self.history)
        #: The process each slot runs now, its task and its supervisor.
        self.current: dict[int, str] = {}
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self.supervisors: dict[str, Supervisor] = {}
        self.contexts: dict[str, contextvars.Context] = {}
        self.stopping = False
        #: Processes told to stop before their supervisor existed.
        self._terms: set[str] = set()
        self._runs: dict[int, int] = {}
        #: Errors no task waited for: a defect of the simulation, unless a killed process's
        #: tasks left them while being unwound.
        self.errors: list[str] = []
        self.logs: list[MutableMapping[str, Any]] = []
        self._unwinding = False

    def ending(self) -> None:
        """The history is checked: what the tasks left do now is not part of it."""
        self._unwinding = True
        self.network.dead.update(self.tasks)
        self.history.killed.update(self.tasks)  # as good as dead: they no longer count

    def on_error(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if not self._unwinding:
            self.errors.append(f"{context.get('message')}: {context.get('exception')!r}")

    async def run(self) -> None:
        await self._create_queues()
        sender = self.loop.create_task(self._send_all())
        for stall in self.schedule.stalls:
            self.loop.call_at(START + stall.at_s, self._stall, stall.slot, stall.length_s)
        for signal in self.schedule.signals:
            self.loop.call_at(START + signal.at_s, self._signal, signal.slot, signal.kind)
        slots = [
            self.loop.create_task(self._keep(slot), context=contextvars.Context())
            for slot in range(self.schedule.slots)
        ]
        await asyncio.sleep(self.schedule.duration_s)
        self.stopping = True
        for slot in range(self.schedule.slots):
            self._signal(slot, "term")
        await asyncio.gather(sender, *slots)
        await self._unwind_killed()
        self.history.check()

    async def _create_queues(self) -> None:
        visibility = self.schedule.visibility_s
        await self.service.create_queue(QueueSpec(DEAD_LETTERS))
        redrive = RedrivePolicy(DEAD_LETTERS, self.schedule.max_receive_count)
        await self.service.create_queue(
            QueueSpec(QUEUE, visibility_timeout_s=visibility, redrive=redrive)
        )

    async def _send_all(self) -> None:
        """Send each message at its time, in the schedule's order (the index is its name)."""
        for index, at in sorted(enumerate(self.schedule.sends), key=lambda sent: sent[1]):
            await asyncio.sleep(START + at - self.loop.true_time())
            body = json.dumps({"m": index})
            tenants = self.schedule.tenants
            group = f"t{index % tenants}" if tenants else None
            result = self.engine.send(QUEUE, [OutgoingMessage(body=body, group_id=group)])
            self.history.sent(index, result.message_ids[result.succeeded[0]])

    # -- processes ------------------------------------------------------------------------

    async def _keep(self, slot: int) -> None:
        """Run a process in `slot`, and another after it ends, until the fleet stops."""
        generation = 0
        while not self.stopping:
            name = f"w{slot}.{generation}"
            context = contextvars.Context()
            context.run(PROCESS.set, name)
            self.contexts[name] = context
            self.current[slot] = name
            task = self.loop.create_task(self._process(slot, name), context=context)
            self.tasks[name] = task
            await self._wait_end(name, task)
            generation += 1
            if not self.stopping:
                await asyncio.sleep(self.schedule.restart_s)

    async def _wait_end(self, name: str, task: asyncio.Task[None]) -> None:
        waiter: asyncio.Future[None] = self.loop.create_future()

        def ended(_: object) -> None:
            if not waiter.done():
                waiter.set_result(None)

        task.add_done_callback(ended)
        while not waiter.done():
            if name in self.history.killed:
                return
            if self.stopping and self._overdue(name):
                self.history.hung(name)
                return
            await asyncio.wait([waiter], timeout=1.0)

    def _overdue(self, name: str) -> bool:
        stopped_at = START + self.schedule.duration_s
        return self.loop.true_time() > stopped_at + self.schedule.grace_s + _SHUTDOWN_SLACK_S

    async def _process(self, slot: int, name: str) -> None:
        schedule = self.schedule
        config = WorkerConfig(
            max_in_flight=schedule.max_in_flight,
            wait_s=schedule.wait_s,
            receive_concurrency=schedule.receive_concurrency,
            lease=LeaseConfig(visibility_s=schedule.visibility_s),
            shutdown=ShutdownConfig(grace_s=schedule.grace_s),
            flow=_flow(schedule.flow),
        )
        if schedule.clock_rates:
            self.loop.set_rate(name, schedule.clock_rates[slot])
        app = Worker(config, name=name)
        app.handler(QUEUE, on_error=schedule.on_error)(self._handler())
        supervisor = Supervisor(app, self.network.backend(slot, name))
        self.supervisors[name] = supervisor
        if name in self._terms:
            supervisor.request_shutdown()
        await supervisor.prepare()
        await supervisor.run()

    def _handler(self) -> Callable[[Message], Any]:
        async def handle(message: Message) -> None:
            process = PROCESS.get()
            assert process is not None
            run = self.history.started(process, message.message_id, message.lease.receipt_handle)
            index = message.body["m"]
            count = self._runs[index] = self._runs.get(index, 0) + 1
            plan = self.schedule.attempt(index, count - 1)
            outcome = "cancelled"
            try:
                await asyncio.sleep(plan.duration_s)
                if plan.blocks_s:
                    now = self.loop.true_time()
                    self.history.disturbed(process, now, now + plan.blocks_s)
                    await self.loop.block(plan.blocks_s)
                message.lease.ensure_held()
                if run is not None:
                    self.history.acted(run, message.lease.receipt_handle)
                if plan.fails:
                    outcome = "raised"
                    raise SimulatedFailure(f"run {count} of m{index} fails")
                outcome = "ok"
            except SimulatedFailure:
                raise
            except LeaseLostError:
                outcome = "fenced"  # ensure_held() stopped it: a lease event, not a failure
                raise
            except Exception:
                outcome = "raised"
                raise
            finally:
                self._end(run, outcome)

        return handle

    def _end(self, run: Run | None, outcome: str) -> None:
        if run is not None:
            self.history.ended(run, outcome)

    # -- what happens to processes ----------------------------------------------------------

    def _stall(self, slot: int, length_s: float) -> None:
        name = self.current.get(slot)
        if name is None or name in self.history.killed:
            return
        now = self.loop.true_time()
        self.loop.stall(name, now, now + length_s)
        self.history.disturbed(name, now, now + length_s)

    def _signal(self, slot: int, kind: str) -> None:
        name = self.current.get(slot)
        if name is None or name in self.history.killed or self.tasks[name].done():
            return
        if kind == "kill":
            self.loop.stall(name, self.loop.true_time())
            self.history.kill(name)
            return
        self.history.disturbed(name, self.loop.true_time())
        supervisor = self.supervisors.get(name)
        if supervisor is None:
            self._terms.add(name)  # not started yet: told when it starts
            return
        # In a task of the process: it waits for a stall to end, as a signal handler would.
        self.loop.create_task(_request_shutdown(supervisor), context=self.contexts[name])

    async def _unwind_killed(self) -> None:
        """Cut a killed process's network, then let its tasks end: nothing they do now
        reaches the service or the history."""
        self._unwinding = True
        for name in sorted(self.history.killed):
            self.network.dead.add(name)
            task = self.tasks[name]
            task.cancel()
            self.loop.revive(name)
            await asyncio.wait([task], timeout=_SHUTDOWN_SLACK_S)  # its error is not ours


async def _end_every_task(loop: SimLoop) -> None:
    """Cancel what is left (long polls the service still serves, answers on their way) and
    wait for it: a task left pending when the loop closes stays reachable from anyio's
    per-task state, and with it the whole world (a leak of about 80 KB a seed)."""
    current = asyncio.current_task()
    left = [task for task in asyncio.all_tasks(loop) if task is not current]
    for task in left:
        task.cancel()
    await asyncio.gather(*left, return_exceptions=True)


def _flow(kind: str) -> FlowControl:
    """The flow control a schedule names."""
    if kind == "rate":
        return FlowControl(rate=RateLimit(per_s=2.0))
    if kind == "bytes":
        return FlowControl(max_bytes=1_200)  # about 450 bytes a message: three at most
    if kind == "adaptive":
        return FlowControl(adaptive=AdaptiveConcurrency())
    if kind == "tenants":
        return FlowControl(tenants=TenantCap(per_tenant=1, hold=1, release_s=2))
    return FlowControl()


async def _request_shutdown(supervisor: Supervisor) -> None:
    supervisor.request_shutdown()
