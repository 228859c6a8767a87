"""The runtime's leases and shutdown over every fate of a call, on both dialects.

Each call the runtime makes can be not sent (refused), answered, answered late after it
landed, or landed with its answer lost; the process can stall. Over `FaultyBackend` on the
engine's SQS and SMQ dialects, a worker handling long messages must: run each message to
success exactly once per delivery it holds, never run one message in two handlers at once,
and leave the queue empty, whatever fate its renewals, deletes and receives meet (issue 27).
"""

from __future__ import annotations

from collections import Counter

import anyio
import pytest

from backends.memory import MemoryBackend, MemoryEngine
from backends.memory.dialects import SMQ_DIALECT
from backends.memory.engine import QueueCounts
from worker import LeaseConfig, Message, Outcome, TransientBackendError, Worker, WorkerConfig
from worker.clock import LoopClock
from worker.testing import FaultyBackend, run_worker
from worker.types import OutgoingMessage, QueueSpec

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]

LEASE = LeaseConfig(visibility_s=10, extension_s=10)
COUNT = 4


def _backend(dialect: str) -> FaultyBackend[MemoryBackend]:
    engine = MemoryEngine(LoopClock(), dialect=SMQ_DIALECT) if dialect == "smq" else None
    return FaultyBackend(MemoryBackend(engine) if engine is not None else MemoryBackend())


def _plan(backend: FaultyBackend[MemoryBackend], fate: str) -> None:
    if fate == "extend-late":
        backend.late("extend", by_s=2.5, times=None)  # every renewal, under the margin
    elif fate == "extend-refused":
        backend.refuse("extend", TransientBackendError("down", code="Throttling"), times=3)
    elif fate == "delete-late":
        backend.late("delete", by_s=2.0, times=None)
    elif fate == "delete-lost":
        backend.lose("delete", times=1)
    elif fate == "receive-late":
        backend.late("receive", by_s=2.0, times=2)


@pytest.mark.parametrize("dialect", ["sqs", "smq"])
@pytest.mark.parametrize(
    "fate", ["extend-late", "extend-refused", "delete-late", "delete-lost", "receive-late"]
)
async def test_every_message_runs_once_and_the_queue_drains(dialect: str, fate: str) -> None:
    backend = _backend(dialect)
    app = Worker(WorkerConfig(lease=LEASE, max_in_flight=COUNT, wait_s=5))
    running: Counter[str] = Counter()
    starts: Counter[str] = Counter()
    overlaps: list[str] = []

    @app.handler("jobs")
    async def job(message: Message) -> None:
        starts[message.message_id] += 1
        running[message.message_id] += 1
        if running[message.message_id] > 1:
            overlaps.append(message.message_id)
        try:
            await anyio.sleep(25)  # several renewals
        finally:
            running[message.message_id] -= 1

    await backend.create_queue(QueueSpec("jobs", visibility_timeout_s=10))
    await backend.inner.send(
        "jobs", [OutgoingMessage(body="{}", entry_id=str(i)) for i in range(COUNT)]
    )
    _plan(backend, fate)
    async with run_worker(app, backend=backend) as harness:
        handled = await harness.wait_for_handled(COUNT)
        await harness.wait_until_idle()
        lost = harness.metrics.value("lease_worker_leases_lost_total", queue="jobs")
    assert [h.outcome for h in handled] == [Outcome.SUCCEEDED] * COUNT
    assert overlaps == []
    assert sorted(starts.values()) == [1] * COUNT
    assert lost == 0
    assert backend.inner.engine.counts("jobs") == QueueCounts(0, 0, 0)


@pytest.mark.parametrize("dialect", ["sqs", "smq"])
async def test_a_stall_longer_than_the_lease_runs_no_message_twice_at_once(dialect: str) -> None:
    backend = _backend(dialect)
    app = Worker(WorkerConfig(lease=LEASE, max_in_flight=COUNT, wait_s=5))
    running: Counter[str] = Counter()
    overlaps: list[str] = []
    effects: Counter[str] = Counter()
    stalled = anyio.Event()

    @app.handler("jobs")
    async def job(message: Message) -> None:
        running[message.message_id] += 1
        if running[message.message_id] > 1:
            overlaps.append(message.message_id)
        try:
            if not stalled.is_set():
                stalled.set()
                backend.stall(15)  # longer than the 10 s leases
            await anyio.sleep(3)
            effects[message.message_id] += 1
        finally:
            running[message.message_id] -= 1

    await backend.create_queue(QueueSpec("jobs", visibility_timeout_s=10))
    await backend.inner.send(
        "jobs", [OutgoingMessage(body="{}", entry_id=str(i)) for i in range(COUNT)]
    )
    async with run_worker(app, backend=backend) as harness:
        handled = await harness.wait_for_handled(2 * COUNT)
        await harness.wait_until_idle()
        lost = harness.metrics.value(
            "lease_worker_leases_lost_total", queue="jobs", reason="lapsed"
        )
    outcomes = Counter(h.outcome for h in handled)
    # Every lease lapsed during the stall: each first run is lost (its side effect never
    # happens), each message runs once more and succeeds.
    assert outcomes == Counter({Outcome.LEASE_LOST: COUNT, Outcome.SUCCEEDED: COUNT})
    assert lost == COUNT
    assert overlaps == []
    assert sorted(effects.values()) == [1] * COUNT
    assert backend.inner.engine.counts("jobs") == QueueCounts(0, 0, 0)


@pytest.mark.parametrize("dialect", ["sqs", "smq"])
async def test_a_shutdown_while_a_receives_answer_is_late_strands_nothing(dialect: str) -> None:
    """The shutdown suite's case over the fault backend: the receive landed (the engine
    handed the messages out), its answer is late, and the worker is asked to stop meanwhile:
    what the answer brings is released at once, never run (issue 27 (4))."""
    backend = _backend(dialect)
    app = Worker(WorkerConfig(lease=LEASE, max_in_flight=COUNT, wait_s=5))
    runs: list[str] = []

    @app.handler("jobs")
    async def job(message: Message) -> None:
        runs.append(message.message_id)

    await backend.create_queue(QueueSpec("jobs", visibility_timeout_s=10))
    backend.late("receive", by_s=2.0)  # the first poll's answer
    async with run_worker(app, backend=backend) as harness:
        await anyio.sleep(0.5)  # the long poll waits at the engine
        await backend.inner.send(
            "jobs", [OutgoingMessage(body="{}", entry_id=str(i)) for i in range(COUNT)]
        )
        await anyio.sleep(0.5)  # the poll has landed with them; its answer is on its way
        assert backend.inner.engine.counts("jobs") == QueueCounts(0, COUNT, 0)
        harness.shutdown()
    stopped = anyio.current_time()
    assert runs == []
    await anyio.sleep(1)  # SMQ's shortest release is 1 s; SQS's is 0
    assert backend.inner.engine.counts("jobs") == QueueCounts(COUNT, 0, 0)
    assert anyio.current_time() - stopped == pytest.approx(1)
