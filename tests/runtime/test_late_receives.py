"""Receive answers that arrive late: a handler never starts on a lease the worker cannot show
is still held.

An answer proves only that the service handed its messages out after the request left; it
may then wait anywhere (a proxy, a retransmit, a paused process). Each lease is therefore
dated from when its receive was sent, and a long poll never waits longer than the
visibility less the renewal margin, so that a message handed out at the end of an idle poll
still arrives with the margin left. Here a second consumer polls the same queue on the
same engine, as another worker process would.
"""

from __future__ import annotations

from collections import Counter

import anyio
import pytest

from backends.memory import MemoryBackend
from worker import LeaseConfig, Message, Outcome, Worker, WorkerConfig
from worker.testing import FaultyBackend, run_worker
from worker.types import Deletion, OutgoingMessage, QueueSpec, ReceivedMessage

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]

LEASE = LeaseConfig(visibility_s=6)  # renewal margin 2 s


async def _setup() -> FaultyBackend[MemoryBackend]:
    backend = FaultyBackend(MemoryBackend())
    await backend.create_queue(QueueSpec("jobs", visibility_timeout_s=6))
    return backend


async def _other_consumer(
    service: MemoryBackend, taken: list[tuple[float, ReceivedMessage]], delete: bool
) -> None:
    """Another worker: short polls every 0.1 s, keeping what it gets (and deleting it)."""
    while True:
        for received in await service.receive("jobs", max_messages=10, wait_s=0):
            taken.append((anyio.current_time(), received))
            if delete:
                await service.delete("jobs", [Deletion("0", received.receipt_handle)])
        await anyio.sleep(0.1)


async def test_an_answer_later_than_the_visibility_runs_nothing() -> None:
    backend = await _setup()
    await backend.inner.send("jobs", [OutgoingMessage(body="{}")])
    backend.late("receive", by_s=8.0)  # the first poll: lands at once, answered at 8 s
    # A call timeout long enough to take the answer (the default, 5 s past the poll's
    # wait, would abandon the call first: no run either).
    app = Worker(WorkerConfig(lease=LEASE, wait_s=1, call_timeout_s=10))
    starts: list[float] = []

    @app.handler("jobs")
    async def job(message: Message) -> None:
        starts.append(anyio.current_time())

    taken: list[tuple[float, ReceivedMessage]] = []
    async with anyio.create_task_group() as others:
        async with run_worker(app, backend=backend) as harness:
            await anyio.sleep(1)  # the worker's poll has taken the message
            others.start_soon(_other_consumer, backend.inner, taken, True)
            await anyio.sleep(12)  # the late answer has arrived meanwhile (at 8 s)
            lost = harness.metrics.value(
                "lease_worker_leases_lost_total", queue="jobs", reason="lapsed"
            )
        others.cancel_scope.cancel()
    assert len(taken) == 1 and 6.0 <= taken[0][0] <= 6.2  # the other took it at its lapse
    assert starts == []  # and the late answer's copy never ran beside it
    assert lost == 1


async def test_an_answer_late_within_the_visibility_is_renewed_before_the_deadline() -> None:
    """3 s late on a 6 s visibility: the lease is dated from the send (deadline 6 s, first
    renewal 2 s before it), so the service never lets the other consumer take it."""
    backend = await _setup()
    await backend.inner.send("jobs", [OutgoingMessage(body="{}")])
    backend.late("receive", by_s=3.0)
    app = Worker(WorkerConfig(lease=LEASE, wait_s=1))
    runs: Counter[str] = Counter()

    @app.handler("jobs")
    async def job(message: Message) -> None:
        runs[message.message_id] += 1
        await anyio.sleep(15)  # two visibilities and more: renewals must keep it

    taken: list[tuple[float, ReceivedMessage]] = []
    async with anyio.create_task_group() as others:
        async with run_worker(app, backend=backend) as harness:
            await anyio.sleep(0.5)  # the worker's poll has taken the message
            others.start_soon(_other_consumer, backend.inner, taken, False)
            [record] = await harness.wait_for_handled(1)
        others.cancel_scope.cancel()
    assert record.outcome is Outcome.SUCCEEDED
    assert taken == []
    assert list(runs.values()) == [1]
    first_renewal = next(call for call in backend.calls if call.operation == "extend")
    assert first_renewal.at <= 4.0 + 1e-6  # the send (0 s) + 6 s - the 2 s margin


async def test_a_long_poll_waits_no_longer_than_the_visibility_less_the_margin() -> None:
    """wait_s=20 on a 6 s visibility polls 4 s at a time; a message handed out at the end
    of an idle poll arrives with the margin left, and is renewed in time and handled."""
    config = WorkerConfig(lease=LEASE, wait_s=20)
    assert config.poll_wait_s == 4
    assert WorkerConfig(wait_s=20).poll_wait_s == 20  # the defaults: 30 s, margin 10 s
    backend = await _setup()
    app = Worker(config)

    @app.handler("jobs")
    async def job(message: Message) -> None:
        await anyio.sleep(10)

    async with run_worker(app, backend=backend) as harness:
        await anyio.sleep(7.9)  # idle polls sent at 0 and 4 s; the second ends at 8 s
        await backend.inner.send("jobs", [OutgoingMessage(body="{}")])
        [record] = await harness.wait_for_handled(1)
        lost = harness.metrics.value(
            "lease_worker_leases_lost_total", queue="jobs", reason="lapsed"
        )
    assert record.outcome is Outcome.SUCCEEDED
    assert lost == 0
    polls = [call for call in backend.calls if call.operation == "receive"]
    assert [call.at for call in polls[:2]] == [0.0, pytest.approx(4.0, abs=0.01)]
