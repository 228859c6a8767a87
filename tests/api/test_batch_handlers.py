"""Batch handlers: partial success, leases renewed for the whole batch, FIFO groups."""

from __future__ import annotations

import anyio
import pytest

from tests.recording import RecordingBackend
from worker import (
    LeaseConfig,
    Message,
    Outcome,
    RegistrationError,
    ShutdownConfig,
    Worker,
    WorkerConfig,
)
from worker.errors import BatchFailure
from worker.testing import run_worker
from worker.types import OutgoingMessage, QueueSpec

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]

LEASE = LeaseConfig(visibility_s=30, extension_s=30, renew_margin_s=10)


async def _queue(backend: RecordingBackend, name: str, count: int) -> list[str]:
    await backend.create_queue(QueueSpec(name, visibility_timeout_s=30))
    ids = []
    for n in range(count):
        message = OutgoingMessage(body=f'{{"n": {n}}}')
        if name.endswith(".fifo"):
            group = "a" if n < 3 else "b"
            message = OutgoingMessage(body=f'{{"n": {n}}}', group_id=group, deduplication_id=str(n))
        ids.append((await backend.send(name, [message])).message_ids["0"])
    return ids


def _app() -> Worker:
    return Worker(WorkerConfig(lease=LEASE, max_in_flight=10, wait_s=20))


async def test_batch_of_10_with_3_failures_deletes_7_in_one_call_and_releases_3() -> None:
    app = _app()
    batches: list[int] = []

    @app.batch_handler("jobs", max_size=10, max_wait_s=5)
    async def handle(messages: list[Message]) -> set[str]:
        batches.append(len(messages))
        return {m.message_id for m in messages if m.body["n"] in (0, 4, 8) and m.receive_count == 1}

    backend = RecordingBackend()
    await _queue(backend, "jobs", 10)
    async with run_worker(app, backend=backend) as harness:
        records = await harness.wait_for_handled(13)  # the 3 come back, and succeed
        await harness.wait_until_idle()
    assert batches == [10, 3]
    assert [call.entries for call in backend.of("delete")] == [7, 3]
    assert [call.visibility for call in backend.of("release")] == [(0, 0, 0)]
    assert [r.outcome for r in records[:10]].count(Outcome.FAILED) == 3
    metric = harness.metrics.value
    assert metric("lease_worker_messages_handled_total", queue="jobs", outcome="failed") == 3
    assert metric("lease_worker_messages_handled_total", queue="jobs", outcome="succeeded") == 10
    assert backend.inner.engine.counts("jobs").visible == 0


async def test_a_batch_waits_max_wait_s_for_more_and_raising_fails_the_listed_ones() -> None:
    app = _app()
    handed: list[tuple[int, float]] = []

    @app.batch_handler("jobs", max_size=10, max_wait_s=2)
    async def handle(messages: list[Message]) -> None:
        handed.append((len(messages), anyio.current_time()))
        raise BatchFailure([messages[0].message_id])

    backend = RecordingBackend()
    await _queue(backend, "jobs", 4)
    start = anyio.current_time()
    async with run_worker(app, backend=backend) as harness:
        records = await harness.wait_for_handled(4)
        harness.shutdown()
    assert [n for n, _ in handed] == [4]
    assert 2 <= handed[0][1] - start < 3
    assert [r.outcome for r in records].count(Outcome.FAILED) == 1


async def test_every_lease_of_a_long_batch_is_renewed_and_a_lost_one_is_never_deleted() -> None:
    app = _app()
    saw_lost: list[list[bool]] = []

    @app.batch_handler("jobs", max_size=10, max_wait_s=1)
    async def handle(messages: list[Message]) -> None:
        await anyio.sleep(150)  # five visibility timeouts
        saw_lost.append([m.lease.lost for m in messages])

    backend = RecordingBackend()
    ids = await _queue(backend, "jobs", 10)
    async with run_worker(app, backend=backend) as harness:
        await anyio.sleep(45)  # past the first visibility: renewed, not redelivered
        backend.inner.engine.expire("jobs", ids[0])  # behind the worker's back
        other = await backend.inner.receive("jobs", max_messages=1, wait_s=0, visibility_s=3600)
        assert [m.message_id for m in other] == ids[:1]
        records = await harness.wait_for_handled(10)
        await harness.wait_until_idle()
    assert saw_lost == [[True] + [False] * 9]
    outcomes = {r.message.message_id: r.outcome for r in records}
    assert outcomes.pop(ids[0]) is Outcome.LEASE_LOST
    assert set(outcomes.values()) == {Outcome.SUCCEEDED}
    assert [call.entries for call in backend.of("delete")] == [9]
    renewed = [call.entries for call in backend.of("extend")]
    assert len(renewed) >= 5 and renewed[0] == 10 and renewed[-1] == 9
    assert all(r.message.receive_count == 1 for r in records)
    snapshot = backend.inner.engine.peek("jobs", ids[0])
    assert snapshot is not None and snapshot.receive_count == 2  # the other consumer's


async def test_fifo_a_failure_stops_the_rest_of_its_group_in_the_batch() -> None:
    app = _app()

    @app.batch_handler("jobs.fifo", max_size=10, max_wait_s=1)
    async def handle(messages: list[Message]) -> set[str]:
        return {m.message_id for m in messages if m.body["n"] in (1, 3)}

    backend = RecordingBackend()
    ids = await _queue(backend, "jobs.fifo", 5)  # group a: 0 1 2, group b: 3 4
    async with run_worker(app, backend=backend) as harness:
        records = await harness.wait_for_handled(5)
        await harness.wait_until_idle()
    outcomes = [{r.message.message_id: r.outcome for r in records}[i] for i in ids]
    assert outcomes == [
        Outcome.SUCCEEDED,
        Outcome.FAILED,
        Outcome.SKIPPED,
        Outcome.FAILED,
        Outcome.SKIPPED,
    ]
    assert [call.entries for call in backend.of("delete")] == [1]


async def test_batch_handler_registration_is_checked() -> None:
    app = _app()
    with pytest.raises(RegistrationError, match="must be async"):

        @app.batch_handler("a")
        def sync(messages: list[Message]) -> None: ...

    with pytest.raises(RegistrationError, match="parameter 'messages' is annotated Message"):

        @app.batch_handler("b")
        async def one(messages: Message) -> None: ...

    with pytest.raises(ValueError, match="max_size=0"):
        app.batch_handler("c", max_size=0)


async def test_a_batch_still_running_at_the_end_of_the_grace_is_cancelled_and_released() -> None:
    app = Worker(
        WorkerConfig(lease=LEASE, max_in_flight=10, wait_s=20, shutdown=ShutdownConfig(grace_s=5))
    )
    started = anyio.Event()
    cancelled_at: list[float] = []

    @app.batch_handler("jobs", max_size=4, max_wait_s=1)
    async def handle(messages: list[Message]) -> None:
        started.set()
        try:
            await anyio.sleep(3_600)
        except anyio.get_cancelled_exc_class():
            cancelled_at.append(anyio.current_time())
            raise

    backend = RecordingBackend()
    await _queue(backend, "jobs", 4)
    async with run_worker(app, backend=backend) as harness:
        await started.wait()
        stop = anyio.current_time()
        harness.shutdown()
        records = await harness.wait_for_handled(4)
    assert [r.outcome for r in records] == [Outcome.SHUTDOWN] * 4
    assert len(cancelled_at) == 1 and 5 <= cancelled_at[0] - stop < 6
    assert [call.visibility for call in backend.of("release")] == [(0, 0, 0, 0)]
    assert backend.of("delete") == []
    assert backend.inner.engine.counts("jobs").visible == 4
