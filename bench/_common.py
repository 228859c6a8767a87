"""What the benchmarks share: timing, virtual-time loops, queue filling."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio

from backends.memory import MemoryBackend
from worker import Outcome, Supervisor, Worker
from worker.backend import Backend
from worker.core.settlement import Settlement
from worker.types import OutgoingMessage, ReceivedMessage

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Timing:
    wall_s: float
    cpu_s: float


#: The event loops a benchmark can run on (uvloop: the [fast] extra).
LOOPS = ("asyncio", "uvloop")


def loop_factory(loop: str) -> Callable[[], asyncio.AbstractEventLoop]:
    if loop == "uvloop":
        import uvloop

        return uvloop.new_event_loop
    if loop != "asyncio":
        raise ValueError(f"loop {loop!r}: choose from {', '.join(LOOPS)}")
    return asyncio.new_event_loop


def run_async(
    func: Callable[..., Awaitable[T]],
    *args: Any,
    virtual_time: bool = False,
    loop: str = "asyncio",
) -> T:
    """Run on a fresh event loop of kind `loop`; with `virtual_time`, sleeps take no real time
    (looptime, which is an asyncio loop: `loop` must then be "asyncio")."""
    options: dict[str, Any] = {}
    if virtual_time:
        import looptime

        if loop != "asyncio":
            raise ValueError("virtual time (looptime) runs on the asyncio loop only")
        options["loop_factory"] = lambda: looptime.new_event_loop(start=0)
    else:
        options["loop_factory"] = loop_factory(loop)
    return anyio.run(func, *args, backend="asyncio", backend_options=options)


async def fill(backend: MemoryBackend, queue: str, count: int, body: str = "{}") -> None:
    """Send `count` messages straight into the engine (not part of what is measured)."""
    engine = backend.engine
    for start in range(0, count, 10):
        batch = [OutgoingMessage(entry_id=str(i), body=body) for i in range(min(10, count - start))]
        engine.send(queue, batch)


async def run_until_handled(
    app: Worker, backend: Backend, count: int, *, started: Callable[[], None] | None = None
) -> Supervisor:
    """Run `app` until `count` handler runs have finished, then shut it down cleanly.

    `started` is called once the worker receives (e.g. to take a reading).
    """
    done = anyio.Event()
    handled = 0

    def observe(message: ReceivedMessage, outcome: Outcome, settlement: Settlement) -> None:
        nonlocal handled
        handled += 1
        if handled == count:
            done.set()

    supervisor = Supervisor(app, backend, observers=[observe])
    async with anyio.create_task_group() as tasks:
        await tasks.start(supervisor.run)
        if started is not None:
            started()
        await done.wait()
        await supervisor.settler.flush()
        supervisor.request_shutdown()
    return supervisor
