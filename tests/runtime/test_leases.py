"""Leases under the whole runtime, on the in-memory engine with the loop clock fast-forwarded.

Each test here could fail: they check the calls the worker made and the engine's state, not
the worker's own account of what it did.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import anyio
import pytest
from structlog.testing import capture_logs

from backends.memory import MemoryBackend
from tests.recording import RecordingBackend
from worker import (
    LeaseConfig,
    Message,
    Outcome,
    OutgoingMessage,
    TransientBackendError,
    Worker,
    WorkerConfig,
)
from worker.testing import WorkerHarness, run_worker
from worker.types import BatchResult, QueueSpec, VisibilityChange

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]

LEASE = LeaseConfig(visibility_s=30, extension_s=30, renew_margin_s=10, coalesce_window_s=5)


def _app(*, lease: LeaseConfig = LEASE, max_in_flight: int = 10) -> Worker:
    return Worker(WorkerConfig(lease=lease, max_in_flight=max_in_flight, wait_s=20))


async def _prepare(backend: RecordingBackend, queue: str, count: int) -> list[str]:
    await backend.create_queue(QueueSpec(queue, visibility_timeout_s=30))
    ids = []
    for i in range(count):
        result = await backend.inner.send(queue, [_message(i)])
        ids.append(result.message_ids["0"])
    return ids


def _message(i: int) -> OutgoingMessage:
    return OutgoingMessage(body=f'{{"n": {i}}}')


def _lapsed(harness: WorkerHarness) -> float:
    return harness.metrics.value("lease_worker_leases_lost_total", queue="jobs", reason="lapsed")


@pytest.mark.parametrize("count", [1, 10, 25])
async def test_long_handlers_are_never_redelivered_and_renewals_are_batched(count: int) -> None:
    app = _app(max_in_flight=count)
    starts: Counter[str] = Counter()

    @app.handler("jobs")
    async def job(message: Message) -> None:
        starts[message.message_id] += 1
        assert message.receive_count == 1
        await anyio.sleep(295)  # ~10x the visibility timeout

    backend = RecordingBackend()
    ids = await _prepare(backend, "jobs", count)
    async with run_worker(app, backend=backend) as harness:
        handled = await harness.wait_for_handled(count)
        await harness.wait_until_idle()
    assert all(h.outcome is Outcome.SUCCEEDED for h in handled)
    assert starts == Counter({message_id: 1 for message_id in ids})
    assert backend.inner.engine.counts("jobs").visible == 0
    assert backend.inner.engine.counts("jobs").in_flight == 0
    rounds: dict[float, list[int]] = {}
    for call in backend.of("extend"):
        rounds.setdefault(round(call.at, 3), []).append(call.entries)
    # Renewed every visibility - margin = 20 s (at 20, 40, ... 280) while the handler ran.
    assert len(rounds) == 14
    for sizes in rounds.values():
        assert len(sizes) == math.ceil(count / 10)
        assert sum(sizes) == count
    assert _lapsed(harness) == 0


async def test_leases_are_tracked_from_receipt_not_from_handler_start() -> None:
    # One handler slot for two messages of one receive is not possible (flow control asks
    # for free slots only), so the wait is inside the handler: the lease must still hold.
    app = _app(max_in_flight=2)
    gate = anyio.Event()

    @app.handler("jobs")
    async def job(message: Message) -> None:
        await gate.wait()

    backend = RecordingBackend()
    await _prepare(backend, "jobs", 2)
    async with run_worker(app, backend=backend) as harness:
        await anyio.sleep(95)
        gate.set()
        await harness.wait_for_handled(2)
        await harness.wait_until_idle()
    assert [call.entries for call in backend.of("extend")] == [2, 2, 2, 2]
    assert backend.inner.engine.counts("jobs").visible == 0


async def test_max_lease_cancels_the_handler_before_the_12h_cap() -> None:
    app = _app(max_in_flight=1)
    cancelled_at: list[float] = []

    @app.handler("jobs")
    async def forever(message: Message) -> None:
        try:
            await anyio.sleep_forever()
        finally:
            cancelled_at.append(anyio.current_time())

    backend = RecordingBackend()
    [message_id] = await _prepare(backend, "jobs", 1)
    started = anyio.current_time()
    async with run_worker(app, backend=backend) as harness:
        [record] = await harness.wait_for_handled(1)
        await harness.wait_until_idle()
        harness.shutdown()
    assert record.outcome is Outcome.TIMED_OUT
    assert started + 43_200 - 30 <= cancelled_at[0] <= started + 43_200 - 10
    failures = [c for c in backend.of("extend") if c.visibility and min(c.visibility) < 0]
    assert not failures
    assert harness.metrics.value("lease_worker_leases_capped_total", queue="jobs") == 1
    total_failures = sum(
        harness.metrics.value("lease_worker_lease_renewal_failures_total", queue="jobs", code=code)
        for code in ("InvalidParameterValue", "ReceiptHandleIsInvalid", "MessageNotInflight")
    )
    assert total_failures == 0  # the engine (strict about 12 h) never refused an extension
    # Released under the default policy: visible again at once, with its first receive counted.
    snapshot = backend.inner.engine.peek("jobs", message_id)
    assert snapshot is not None and snapshot.receive_count >= 1


async def test_short_max_lease_is_honoured() -> None:
    lease = LeaseConfig(visibility_s=30, extension_s=30, renew_margin_s=10, max_lease_s=100)
    app = _app(lease=lease, max_in_flight=1)

    @app.handler("jobs")
    async def slow(message: Message) -> None:
        await anyio.sleep(1_000)

    backend = RecordingBackend()
    await _prepare(backend, "jobs", 1)
    started = anyio.current_time()
    async with run_worker(app, backend=backend) as harness:
        [record] = await harness.wait_for_handled(1)
        cancelled = anyio.current_time()
        harness.shutdown()
    assert record.outcome is Outcome.TIMED_OUT
    assert started + 90 - 1 <= cancelled <= started + 90 + 1
    # Renewals at 20, 40, 60 (to 90 = 100 - margin...), each capped by the 100 s lease.
    assert all(v <= 100 for call in backend.of("extend") for v in call.visibility)


async def test_lost_lease_cancels_the_handler_and_settles_nothing() -> None:
    app = _app(max_in_flight=1)
    started = anyio.Event()
    cancelled = anyio.Event()

    @app.handler("jobs")
    async def job(message: Message) -> None:
        started.set()
        try:
            await anyio.sleep(3_600)
        except anyio.get_cancelled_exc_class():
            cancelled.set()
            raise

    backend = RecordingBackend()
    [message_id] = await _prepare(backend, "jobs", 1)
    with capture_logs() as logs:
        async with run_worker(app, backend=backend) as harness:
            await started.wait()
            backend.inner.engine.expire("jobs", message_id)  # behind the worker's back
            other = await backend.inner.receive("jobs", max_messages=1, wait_s=0)
            assert [m.message_id for m in other] == [message_id]
            await cancelled.wait()
            [record] = await harness.wait_for_handled(1)
            await harness.wait_until_idle()
    assert record.outcome is Outcome.LEASE_LOST
    assert backend.of("delete") == [] and backend.of("release") == []
    snapshot = backend.inner.engine.peek("jobs", message_id)
    assert snapshot is not None and snapshot.receive_count == 2  # the other consumer's
    lost = harness.metrics.value(
        "lease_worker_leases_lost_total", queue="jobs", reason="ReceiptHandleIsInvalid"
    )
    assert lost == 1
    [event] = [e for e in logs if e["event"] == "lease.lost"]
    assert event["message_id"] == message_id and event["log_level"] == "warning"


async def test_transient_renewal_failures_are_retried_before_the_deadline() -> None:
    app = _app(max_in_flight=1)

    @app.handler("jobs")
    async def job(message: Message) -> None:
        await anyio.sleep(100)

    backend = RecordingBackend()
    backend.failures["extend"] = [TransientBackendError("throttled", code="Throttling")] * 5
    await _prepare(backend, "jobs", 1)
    async with run_worker(app, backend=backend) as harness:
        [record] = await harness.wait_for_handled(1)
        await harness.wait_until_idle()
    assert record.outcome is Outcome.SUCCEEDED
    times = [call.at for call in backend.of("extend")]
    # Due at 20 (30 s visibility, 10 s margin); five failures, retried a second apart.
    assert times[:6] == pytest.approx([20, 21, 22, 23, 24, 25], abs=0.01)
    assert _lapsed(harness) == 0


async def test_a_partition_longer_than_the_margin_loses_the_lease() -> None:
    app = _app(max_in_flight=1)

    @app.handler("jobs")
    async def job(message: Message) -> None:
        await anyio.sleep(100)

    backend = RecordingBackend()
    backend.failures["extend"] = [TransientBackendError("down", code="ServiceUnavailable")] * 50
    await _prepare(backend, "jobs", 1)
    async with run_worker(app, backend=backend) as harness:
        [record] = await harness.wait_for_handled(1)
    assert record.outcome is Outcome.LEASE_LOST
    # The lapsed message came back and was received again; that lease lapsed too.
    assert _lapsed(harness) >= 1
    first_lease = [call.at for call in backend.of("extend") if call.at < 30]
    assert first_lease == pytest.approx([20.0 + i for i in range(10)], abs=0.01)


async def test_handler_can_extend_its_own_lease() -> None:
    app = _app(max_in_flight=1)
    deadlines: list[float] = []

    @app.handler("jobs")
    async def job(message: Message) -> None:
        await message.lease.extend(600)
        deadlines.append(message.lease.time_left_s())
        await anyio.sleep(500)  # no keeper renewal needed before 590 s

    backend = RecordingBackend()
    await _prepare(backend, "jobs", 1)
    async with run_worker(app, backend=backend) as harness:
        [record] = await harness.wait_for_handled(1)
    assert record.outcome is Outcome.SUCCEEDED
    assert deadlines == [pytest.approx(600, abs=0.01)]
    assert [c.visibility for c in backend.of("extend")] == [(600,)]


async def test_adaptive_extension_follows_handler_durations() -> None:
    lease = LeaseConfig(
        visibility_s=30,
        extension_s=30,
        renew_margin_s=5,
        adaptive=True,
        adaptive_min_s=10,
        adaptive_max_s=600,
    )
    app = _app(lease=lease, max_in_flight=1)

    @app.handler("jobs")
    async def job(message: Message) -> None:
        await anyio.sleep(120)

    backend = RecordingBackend()
    await _prepare(backend, "jobs", 3)
    async with run_worker(app, backend=backend) as harness:
        await harness.wait_for_handled(3)
    visibilities = [c.visibility[0] for c in backend.of("extend")]
    # Before any handler finished: the fixed extension; after: p99 of 120 s handlers.
    assert visibilities[0] == 30
    assert visibilities[-1] == 120


async def test_memory_backend_default_works_with_run_worker() -> None:
    app = _app(max_in_flight=1)

    @app.handler("jobs")
    async def job(message: Message) -> None:
        return None

    async with run_worker(app, backend=MemoryBackend()) as harness:
        await harness.send("jobs", {"hello": "world"})
        [record] = await harness.wait_for_handled(1)
    assert record.outcome is Outcome.SUCCEEDED


async def test_concurrent_receives_never_hold_more_than_max_in_flight() -> None:
    app = Worker(WorkerConfig(lease=LEASE, max_in_flight=25, receive_concurrency=4, wait_s=20))
    gate, full = anyio.Event(), anyio.Event()
    most_held = 0

    @app.handler("jobs")
    async def job(message: Message) -> None:
        nonlocal most_held
        most_held = max(most_held, harness.supervisor.in_flight)
        if harness.supervisor.in_flight == 25:
            full.set()
        await gate.wait()

    backend = RecordingBackend()
    await _prepare(backend, "jobs", 100)
    async with run_worker(app, backend=backend) as harness:
        await full.wait()
        await anyio.sleep(30)  # virtual time: four receivers poll on, and find no free slot
        assert harness.supervisor.in_flight == 25
        gate.set()
        await harness.wait_for_handled(100)
        await harness.wait_until_idle()
    assert most_held == 25
    assert max(call.entries for call in backend.of("receive")) <= 10
    assert backend.inner.engine.counts("jobs").visible == 0


async def test_an_extension_asked_for_while_a_renewal_is_out_is_not_lost() -> None:
    app = _app(max_in_flight=1)
    backend = RecordingBackend()
    asked = anyio.Event()
    time_left: list[float] = []

    @app.handler("jobs")
    async def job(message: Message) -> None:
        await asked.wait()
        await message.lease.extend(900)
        time_left.append(message.lease.time_left_s())

    original_extend = backend.extend

    async def slow_extend(queue: str, entries: Sequence[VisibilityChange]) -> BatchResult:
        asked.set()  # the handler asks while this renewal is on the wire
        await anyio.sleep(1)
        return await original_extend(queue, entries)

    backend.extend = slow_extend  # type: ignore[method-assign]
    await _prepare(backend, "jobs", 1)
    async with run_worker(app, backend=backend) as harness:
        [record] = await harness.wait_for_handled(1)
    assert record.outcome is Outcome.SUCCEEDED
    assert time_left == [pytest.approx(899, abs=0.01)]  # 900 s from the second call, at 21 s


async def test_a_release_while_a_renewal_is_out_stops_renewals_for_good() -> None:
    app = _app(max_in_flight=1)
    backend = RecordingBackend()
    on_wire = anyio.Event()

    @app.handler("jobs", on_error="release")
    async def job(message: Message) -> None:
        if message.receive_count == 1:
            await on_wire.wait()
            raise RuntimeError("fails while its lease is being renewed")

    original_extend = backend.extend

    async def slow_extend(queue: str, entries: Sequence[VisibilityChange]) -> BatchResult:
        on_wire.set()
        await anyio.sleep(1)
        return await original_extend(queue, entries)

    backend.extend = slow_extend  # type: ignore[method-assign]
    # The release keeps failing for 25 s: long enough for a stray renewal to fall due.
    backend.failures["release"] = [TransientBackendError("busy", code="Throttling")] * 25
    [message_id] = await _prepare(backend, "jobs", 1)
    async with run_worker(app, backend=backend) as harness:
        records = await harness.wait_for_handled(2)
        await harness.wait_until_idle()
    assert [r.outcome for r in records] == [Outcome.FAILED, Outcome.SUCCEEDED]
    release = backend.of("release")[-1]
    # The renewal sent at 20 s (recorded when it reached the engine, at 21 s) was the last:
    # nothing renewed the lease after the release was decided.
    [extend] = backend.of("extend")
    assert extend.at == pytest.approx(21, abs=0.01)
    assert release.at >= extend.at  # the release waited for the renewal's answer
    assert backend.inner.engine.peek("jobs", message_id) is None


async def test_a_renewal_never_answered_loses_the_lease_at_its_deadline() -> None:
    app = _app(max_in_flight=1)
    backend = RecordingBackend()
    cancelled_at: list[float] = []

    @app.handler("jobs")
    async def job(message: Message) -> None:
        try:
            await anyio.sleep(100)
        finally:
            cancelled_at.append(anyio.current_time())

    async def hanging_extend(queue: str, entries: Sequence[VisibilityChange]) -> BatchResult:
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    backend.extend = hanging_extend  # type: ignore[method-assign]
    await _prepare(backend, "jobs", 1)
    async with run_worker(app, backend=backend) as harness:
        [record, *_] = await harness.wait_for_handled(1)
    assert record.outcome is Outcome.LEASE_LOST
    assert cancelled_at[0] == pytest.approx(30, abs=0.01)  # the deadline, not a read timeout
    assert _lapsed(harness) >= 1
