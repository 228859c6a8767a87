"""LoopClock: the loop's own time; bound by the supervisor to its loop for its run."""

from __future__ import annotations

import asyncio

import pytest

from worker import Message, Worker, WorkerConfig
from worker.clock import LoopClock
from worker.testing import run_worker

pytestmark = [pytest.mark.looptime]


@pytest.mark.asyncio
async def test_bound_it_reads_that_loops_time_and_unbound_it_looks_the_loop_up() -> None:
    clock = LoopClock()
    loop = asyncio.get_running_loop()
    assert clock.loop is None
    assert clock.bind() is loop and clock.loop is loop
    assert clock.now == loop.time  # no lookup in between
    await asyncio.sleep(5)
    assert clock.now() == loop.time() == pytest.approx(5)
    clock.unbind()
    assert clock.loop is None
    assert clock.now() == loop.time()
    assert "now" not in vars(clock)
    clock.unbind()  # twice is harmless


def test_unbound_outside_a_loop_it_says_so() -> None:
    with pytest.raises(RuntimeError, match="no running event loop"):
        LoopClock().now()


@pytest.mark.asyncio
async def test_the_supervisor_binds_its_clock_for_its_run_and_unbinds_it_after() -> None:
    app = Worker(WorkerConfig(max_in_flight=1, wait_s=1))
    seen: list[object] = []

    @app.handler("jobs")
    async def handler(message: Message) -> None:
        seen.append(harness.supervisor.clock.loop)

    loop = asyncio.get_running_loop()
    async with run_worker(app) as harness:
        await harness.send("jobs", {})
        await harness.wait_for_handled(1)
        assert harness.supervisor.clock.loop is loop
        assert harness.supervisor.executor.clock.loop is loop
    assert seen == [loop]
    assert harness.supervisor.clock.loop is None
    assert harness.supervisor.executor.clock.loop is None
    assert "now" not in vars(harness.supervisor.clock)
