"""The simulated network: each worker process's `Backend`, between it and the shared service.

Every call goes out on the worker's side, travels `latency_s` (plus a slow call's delay),
runs on the service's side (the in-memory engine, behind a `MemoryBackend` shared by every
worker, as several clients share one SQS), and its answer travels back `latency_s` (plus a
late call's delay). The service's side runs outside every simulated process, so a stalled
or killed worker's receive still takes messages, exactly as a real one's would, and its
answer waits for the worker to read it. The fate of each call comes from the schedule:
- refused: a `TransientBackendError` at once, nothing sent;
- slow: it lands `delay_s` late, then is answered;
- late: it lands, and its answer comes `delay_s` late;
- lost: it lands, and its answer never comes (the caller's own deadline ends the wait).
A worker that gave up on a call (its deadline) does not stop the call: what lands, lands.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from backends.memory import MemoryBackend
from worker.backend import Limits
from worker.errors import TransientBackendError
from worker.testing.simulation.history import History
from worker.testing.simulation.loop import SimLoop
from worker.testing.simulation.schedule import OPERATIONS, Schedule
from worker.types import (
    BatchResult,
    Deletion,
    OutgoingMessage,
    QueueInfo,
    ReceivedMessage,
    VisibilityChange,
)

__all__ = ["Network", "SimBackend"]

T = TypeVar("T")


class Network:
    """The wires between the workers and the service, and their fates."""

    def __init__(self, service: MemoryBackend, schedule: Schedule, history: History) -> None:
        self.service = service
        self.schedule = schedule
        self.history = history
        #: Calls made so far, per slot and operation (the ordinal of the next one).
        self.calls: dict[tuple[int, str], int] = {}
        self.dead: set[str] = set()
        self._service = contextvars.Context()  # the service's side: no process
        self._limits = replace(service.limits, cancelled_receive_takes_nothing=False)
        #: Calls being served (the service's side of each call that landed).
        self._serving: dict[asyncio.Task[None], None] = {}

    def backend(self, slot: int, process: str) -> SimBackend:
        return SimBackend(self, slot, process)

    async def call(
        self,
        slot: int,
        process: str,
        operation: str,
        handles: Sequence[str],
        invoke: Callable[[], Awaitable[T]],
        landed: Callable[[T], None] | None = None,
    ) -> T:
        loop = _sim_loop()
        if process in self.dead:
            raise TransientBackendError("the process is gone", operation=operation)
        key = (slot, operation)
        ordinal = self.calls.get(key, 0)
        self.calls[key] = ordinal + 1
        fault = self.schedule.fault(slot, operation, ordinal) if operation in OPERATIONS else None
        there = back = self.schedule.latency_s
        if fault is not None:
            now = loop.true_time()
            self.history.disturbed(process, now, now + fault.delay_s + 2 * back + 1.0)
            if fault.kind == "refused":
                raise TransientBackendError(
                    f"{operation}: refused (simulated)", operation=operation, code="Simulated"
                )
            if fault.kind == "slow":
                there += fault.delay_s
            elif fault.kind == "late":
                back += fault.delay_s
            elif fault.kind == "lost":
                back = -1.0
        self.history.sending(process, operation, handles)
        answer: asyncio.Future[T] = loop.create_future()
        # The wire's delays are true seconds, whatever the sender's clock says.
        loop.true_call_at(
            loop.true_time() + there,
            self._land,
            invoke,
            answer,
            back,
            landed,
            context=self._service,
        )
        return await answer

    def _land(
        self,
        invoke: Callable[[], Awaitable[T]],
        answer: asyncio.Future[T],
        back: float,
        landed: Callable[[T], None] | None,
    ) -> None:
        loop = asyncio.get_running_loop()
        task = loop.create_task(self._serve(invoke, answer, back, landed), context=self._service)
        self._serving[task] = None  # held until done: a task only the loop refers to may go
        task.add_done_callback(self._served)

    def _served(self, task: asyncio.Task[None]) -> None:
        self._serving.pop(task, None)

    async def _serve(
        self,
        invoke: Callable[[], Awaitable[T]],
        answer: asyncio.Future[T],
        back: float,
        landed: Callable[[T], None] | None,
    ) -> None:
        result: Any = None
        error: BaseException | None = None
        try:
            result = await invoke()
        except Exception as raised:
            error = raised
        else:
            if landed is not None:
                landed(result)
        if back >= 0:
            asyncio.get_running_loop().call_later(back, _answer, answer, result, error)


def _answer(answer: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if answer.done():
        return  # the caller gave up
    if error is not None:
        answer.set_exception(error)
    else:
        answer.set_result(result)


def _sim_loop() -> SimLoop:
    loop = asyncio.get_running_loop()
    if not isinstance(loop, SimLoop):
        raise RuntimeError("the simulated network runs on a SimLoop only")
    return loop


class SimBackend:
    """One worker process's `Backend`: its calls go over the `Network`."""

    def __init__(self, network: Network, slot: int, process: str) -> None:
        self._network = network
        self._slot = slot
        self._process = process
        self._service = network.service
        self._history = network.history

    @property
    def limits(self) -> Limits:
        return self._network._limits

    def _call(
        self,
        operation: str,
        handles: Sequence[str],
        invoke: Callable[[], Awaitable[T]],
        landed: Callable[[T], None] | None = None,
    ) -> Awaitable[T]:
        return self._network.call(self._slot, self._process, operation, handles, invoke, landed)

    async def queue_info(self, queue: str) -> QueueInfo:
        return await self._call("queue_info", (), lambda: self._service.queue_info(queue))

    async def receive(
        self, queue: str, *, max_messages: int, wait_s: float, visibility_s: int | None = None
    ) -> Sequence[ReceivedMessage]:
        asked_at = _sim_loop().true_time()

        def landed(messages: Sequence[ReceivedMessage]) -> None:
            self._history.handed_out(
                self._process, asked_at, [(m.message_id, m.receipt_handle) for m in messages]
            )

        return await self._call(
            "receive",
            (),
            lambda: self._service.receive(
                queue, max_messages=max_messages, wait_s=wait_s, visibility_s=visibility_s
            ),
            landed,
        )

    async def extend(self, queue: str, entries: Sequence[VisibilityChange]) -> BatchResult:
        handles = {e.entry_id: e.receipt_handle for e in entries}

        def landed(result: BatchResult) -> None:
            for entry_id, new in result.new_handles.items():
                self._history.rotated(handles[entry_id], new)

        return await self._call(
            "extend", list(handles.values()), lambda: self._service.extend(queue, entries), landed
        )

    async def release(self, queue: str, entries: Sequence[VisibilityChange]) -> BatchResult:
        handles = [e.receipt_handle for e in entries]
        return await self._call("release", handles, lambda: self._service.release(queue, entries))

    async def delete(self, queue: str, entries: Sequence[Deletion]) -> BatchResult:
        handles = [e.receipt_handle for e in entries]

        async def delete() -> BatchResult:
            self._history.deleting(handles)
            return await self._service.delete(queue, entries)

        return await self._call("delete", handles, delete)

    async def send(self, queue: str, messages: Sequence[OutgoingMessage]) -> BatchResult:
        return await self._call("send", (), lambda: self._service.send(queue, messages))

    async def aclose(self) -> None:
        return None
