"""`FlowControl.max_bytes` in the runtime: what is counted per held message, how receives are
sized near the cap, and that a finished message's body is let go (the in-memory engine).

Virtual time (looptime): handlers hold their messages until told to end, no sleeps.
"""

from __future__ import annotations

import anyio
import pytest

from tests.recording import RecordingBackend
from worker import Message, OutgoingMessage, Worker, WorkerConfig
from worker.config import FlowControl
from worker.runtime.receiver import Receiver
from worker.runtime.supervisor import Supervisor
from worker.testing import run_worker
from worker.types import QueueSpec

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]

BODY = "x" * 10_000


async def _filled(count: int, body: str = BODY) -> RecordingBackend:
    backend = RecordingBackend()
    await backend.create_queue(QueueSpec("jobs"))
    for start in range(0, count, 10):
        batch = [OutgoingMessage(body=body, entry_id=str(i)) for i in range(min(10, count - start))]
        await backend.inner.send("jobs", batch)
    return backend


class _Running:
    """How many handlers have started; `reach(n)` returns once n have."""

    def __init__(self) -> None:
        self.count = 0
        self._started = anyio.Event()

    def started(self) -> None:
        self.count += 1
        self._started.set()
        self._started = anyio.Event()

    async def reach(self, count: int) -> None:
        while self.count < count:
            await self._started.wait()


def _holding(
    max_bytes: int, *, decode: str = "raw", receive_concurrency: int = 1
) -> tuple[Worker, anyio.Event, _Running]:
    """A worker whose handler holds each message until `gate` is set."""
    config = WorkerConfig(
        max_in_flight=100,
        wait_s=1,
        receive_concurrency=receive_concurrency,
        flow=FlowControl(max_bytes=max_bytes),
    )
    app = Worker(config)
    gate = anyio.Event()
    running = _Running()

    @app.handler("jobs", decode=decode)
    async def job(message: Message) -> None:
        running.started()
        await gate.wait()

    return app, gate, running


def _receiver(supervisor: Supervisor) -> Receiver:
    return supervisor.receivers["jobs"]


def _held_bytes(supervisor: Supervisor) -> int:
    """What the messages held count (without a receive under way's reservation)."""
    return sum(_receiver(supervisor)._counted.values())


async def _settle(running: _Running, count: int) -> None:
    """Let the receives go on until `count` handlers run and nothing more comes."""
    with anyio.fail_after(60):
        await running.reach(count)
    await anyio.sleep(5)  # long enough for any further receive (wait_s=1) to bring more


async def test_near_the_cap_a_receive_asks_for_fewer_messages() -> None:
    """10 kB bodies, max_bytes 100 kB: the receives ask 1 (nothing seen), then what the
    bytes left can take (each message counted with twice its body more while read), down to
    1; the count stops one message past the cap at most, where full batches of 10 would
    have held 10 messages after the first receive (the old count went past by a batch)."""
    app, gate, running = _holding(100_000)
    backend = await _filled(30)
    async with run_worker(app, backend=backend) as harness:
        await _settle(running, 9)
        held = _held_bytes(harness.supervisor)
        one = max(_receiver(harness.supervisor)._counted.values())
        asked = [call.entries for call in backend.of("receive")]
        assert asked[0] == 1
        assert max(asked) < 10
        assert asked[-1] == 1
        assert 100_000 <= held < 100_000 + one
        assert running.count == len(_receiver(harness.supervisor)._counted)
        gate.set()
        await harness.wait_for_handled(30)
        await harness.wait_until_idle()
        slots = harness.supervisor.flows["jobs"].slots
    assert slots.bytes == 0  # stopped: nothing held and no receive under way
    assert _receiver(harness.supervisor)._counted == {}


async def test_a_decoded_payload_is_counted_a_raw_body_is_not() -> None:
    """The same 10 kB bodies under the same cap: a handler that decodes (JSON) holds about
    half as many as one that takes the body raw (its payload counts as much again)."""
    held = {}
    for decode in ("raw", "json"):
        app, gate, running = _holding(200_000, decode=decode)
        backend = await _filled(40, body=f'"{BODY}"')
        async with run_worker(app, backend=backend) as harness:
            await _settle(running, 5)
            held[decode] = running.count
            gate.set()
            await harness.wait_for_handled(40)
    assert held["raw"] >= 18
    assert held["json"] <= held["raw"] // 2 + 1


async def test_concurrent_receives_count_each_others_answers() -> None:
    """Four long polls at once: each counts what its answer may bring while it is under way,
    so that polls that start near the cap are not four, each taking a message past it: the
    count stops one message past the cap at most, as with one receive."""
    app, gate, running = _holding(100_000, receive_concurrency=4)
    backend = await _filled(0)
    async with run_worker(app, backend=backend) as harness:
        for count in range(1, 8):  # one at a time: the polls spread over the queue's life
            await backend.inner.send("jobs", [OutgoingMessage(body=BODY)])
            await _settle(running, count)
        batch = [OutgoingMessage(body=BODY, entry_id=str(i)) for i in range(10)]
        await backend.inner.send("jobs", batch)
        await _settle(running, 9)
        held = _held_bytes(harness.supervisor)
        one = max(_receiver(harness.supervisor)._counted.values())
        assert 100_000 <= held < 100_000 + one
        gate.set()
        await harness.wait_for_handled(17)


async def test_a_finished_message_is_let_go_by_the_leases_left_in_the_keepers_heap() -> None:
    """A finished lease stays in the lease keeper's heap until it surfaces or the heap is
    pruned; the 1 MiB bodies of 100 messages were kept with it (measured: 76 held where the
    cap allowed 20)."""
    app, gate, _ = _holding(10_000_000)
    backend = await _filled(20)
    gate.set()
    async with run_worker(app, backend=backend) as harness:
        await harness.wait_for_handled(20)
        await harness.wait_until_idle()
        schedule = harness.supervisor.keeper._schedule
        leases = [entry[2] for heap in schedule._heaps.values() for entry in heap]
        assert leases  # dropped lazily: still there
        assert all(lease.received is None for lease in leases)
