"""Leases under the whole runtime, on the in-memory engine with the loop clock fast-forwarded.

Each test here could fail: they check the calls the worker made and the engine's state, not
the worker's own account of what it did. Some drive the lease keeper on its own; many are
regressions, their docstrings naming the defect they pin (found in review rounds).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import anyio
import pytest
from structlog.testing import capture_logs

from backends.memory import MemoryBackend
from tests.recording import RecordingBackend
from tests.runtime.wire import WireBackend
from worker import (
    FatalBackendError,
    LeaseConfig,
    LeaseLostError,
    Message,
    Outcome,
    OutgoingMessage,
    Retry,
    TransientBackendError,
    Worker,
    WorkerConfig,
)
from worker.clock import LoopClock
from worker.core.lease import Lease, held_for
from worker.runtime.lease_keeper import LeaseKeeper
from worker.runtime.metrics import Metrics
from worker.testing import WorkerHarness, run_worker
from worker.types import BatchResult, Deletion, QueueSpec, VisibilityChange

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]

LEASE = LeaseConfig(visibility_s=30, extension_s=30, renew_margin_s=10, coalesce_window_s=5)


def _app(lease: LeaseConfig = LEASE, *, max_in_flight: int = 10) -> Worker:
    return Worker(WorkerConfig(lease=lease, max_in_flight=max_in_flight, wait_s=20))


async def _prepare(backend: RecordingBackend, queue: str, count: int) -> list[str]:
    await backend.create_queue(QueueSpec(queue, visibility_timeout_s=30))
    return await _send(backend, queue, count)


async def _send(backend: RecordingBackend, queue: str, count: int) -> list[str]:
    ids = []
    for i in range(count):
        result = await backend.inner.send(queue, [_message(i)])
        ids.append(result.message_ids["0"])
    return ids


def _message(i: int) -> OutgoingMessage:
    return OutgoingMessage(body=f'{{"n": {i}}}')


def _lapsed(harness: WorkerHarness) -> float:
    return harness.metrics.value("lease_worker_leases_lost_total", queue="jobs", reason="lapsed")


def _lost(harness: WorkerHarness, reason: str, queue: str = "jobs") -> float:
    return harness.metrics.value("lease_worker_leases_lost_total", queue=queue, reason=reason)


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
        [record] = await harness.wait_for_handled(1, timeout_s=13 * 3600)
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
            # Kept past the shutdown's poll (issue 27, defect 4: it would take it and release it).
            other = await backend.inner.receive("jobs", max_messages=1, wait_s=0, visibility_s=600)
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
    assert times[:6] == pytest.approx([held_for(30) - 10 + i for i in range(6)], abs=0.01)
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
    assert first_lease == pytest.approx([held_for(30) - 10 + i for i in range(10)], abs=0.01)


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
    assert deadlines == [pytest.approx(held_for(600), abs=0.01)]
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
    assert time_left == [
        pytest.approx(held_for(900) - 1, abs=0.01)
    ]  # 900 s from the 2nd call, at 21 s


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
    # The renewal sent at 20 s (the margin before the deadline, less the clock's drift
    # allowance; recorded when it reached the engine, 1 s later) was the last: nothing
    # renewed the lease after the release was decided.
    [extend] = backend.of("extend")
    assert extend.at == pytest.approx(held_for(30) - 9, abs=0.01)
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
    assert cancelled_at[0] == pytest.approx(held_for(30), abs=0.01)  # the deadline, not a timeout
    assert _lapsed(harness) >= 1


# -- The first deadline: counted from when the service handed the message out --------------


async def test_a_message_arriving_late_in_an_idle_long_poll_runs_once() -> None:
    """Defect 1: the deadline was counted from when the poll was sent, so a message that
    arrived 10 s into a 20 s poll with a 6 s visibility was 'lapsed' on arrival, never run,
    and dead-lettered after maxReceiveCount."""
    lease = LeaseConfig(visibility_s=6, extension_s=6, renew_margin_s=2)
    app = Worker(WorkerConfig(lease=lease, max_in_flight=1, wait_s=20))
    starts: Counter[str] = Counter()

    @app.handler("jobs")
    async def job(message: Message) -> None:
        starts[message.message_id] += 1
        await anyio.sleep(15)  # longer than the visibility: renewals must keep it

    backend = RecordingBackend()
    await backend.create_queue(QueueSpec("jobs", visibility_timeout_s=6))
    async with run_worker(app, backend=backend) as harness:
        await anyio.sleep(10)  # the worker's first long poll is 10 s in, and idle
        [message_id] = await _send(backend, "jobs", 1)
        [record] = await harness.wait_for_handled(1)
        await harness.wait_until_idle()
    assert record.outcome is Outcome.SUCCEEDED
    assert starts == Counter({message_id: 1})
    assert _lost(harness, "lapsed") == 0
    assert backend.inner.engine.peek("jobs", message_id) is None


async def test_a_message_handed_out_late_in_a_long_poll_is_extended_before_its_deadline() -> None:
    """Defect 1, the other half: the estimate of when the service handed the message out
    must never be later than the truth, so the first renewal lands before SQS's deadline."""
    lease = LeaseConfig(visibility_s=6, extension_s=6, renew_margin_s=2)
    app = Worker(WorkerConfig(lease=lease, max_in_flight=1, wait_s=20))

    @app.handler("jobs")
    async def job(message: Message) -> None:
        await anyio.sleep(30)

    backend = RecordingBackend()
    await backend.create_queue(QueueSpec("jobs", visibility_timeout_s=6))
    async with run_worker(app, backend=backend) as harness:
        await anyio.sleep(10)
        sent_at = anyio.current_time()
        await _send(backend, "jobs", 1)
        await harness.wait_for_handled(1)
    first = backend.of("extend")[0]
    # Handed out at 10 s; SQS's deadline is 16 s. The lease is dated from its poll's send
    # (polls of 4 s: the visibility less the margin, sent at 0, 4 and 8 s), so its deadline
    # is 14 s and the first renewal goes at 12 s: before SQS's, never after.
    assert first.at == pytest.approx(sent_at + 2.0, abs=0.01)
    assert _lost(harness, "lapsed") == 0


async def test_visibility_wait_and_margin_are_cross_checked() -> None:
    """Defect 1: contradictory lease settings are refused with a clear error at once."""
    with pytest.raises(ValueError, match="renew_margin_s"):
        LeaseConfig(visibility_s=6, extension_s=6, renew_margin_s=6)


# -- The hard cap (max_lease_s) ------------------------------------------------------------


async def test_a_max_lease_shorter_than_the_first_renewal_is_honoured() -> None:
    """The hard cap was only looked at when the first renewal fell due: with a 30 s
    visibility and max_lease_s=15, the handler ran until 20 s instead of being cancelled at
    15 - renew_margin_s = 5 s (found by the logging canary run)."""
    lease = LeaseConfig(visibility_s=30, extension_s=30, renew_margin_s=10, max_lease_s=15)
    app = Worker(WorkerConfig(lease=lease, max_in_flight=1, wait_s=20))
    cancelled_at: list[float] = []

    @app.handler("jobs")
    async def forever(message: Message) -> None:
        try:
            await anyio.sleep_forever()
        finally:
            cancelled_at.append(anyio.current_time())

    backend = RecordingBackend()
    await backend.create_queue(QueueSpec("jobs"))
    await _send(backend, "jobs", 1)
    started = anyio.current_time()
    async with run_worker(app, backend=backend) as harness:
        [record] = await harness.wait_for_handled(1)
    assert record.outcome is Outcome.TIMED_OUT
    assert cancelled_at == [pytest.approx(started + 5, abs=0.01)]
    assert backend.of("extend") == []


# Found by review: a renewal storm at the hard cap when max_until is not a whole number of
# seconds away.
async def test_cap_with_fractional_max_lease_does_not_spin() -> None:
    lease = LeaseConfig(visibility_s=30, extension_s=30, renew_margin_s=10, max_lease_s=100.5)
    app = _app(lease, max_in_flight=1)

    @app.handler("jobs")
    async def slow(message: Message) -> None:
        await anyio.sleep(1_000)

    storm = anyio.Event()

    class Counting(RecordingBackend):
        async def extend(self, queue, entries):  # type: ignore[no-untyped-def]
            if len(self.of("extend")) >= 200:
                storm.set()
            return await super().extend(queue, entries)

    backend = Counting()
    await _prepare(backend, "jobs", 1)
    async with run_worker(app, backend=backend) as harness:
        async with anyio.create_task_group() as tg:

            async def handled() -> None:
                await harness.wait_for_handled(1)
                tg.cancel_scope.cancel()

            async def stormed() -> None:
                await storm.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(handled)
            tg.start_soon(stormed)
        harness.shutdown()
    at = [round(c.at, 3) for c in backend.of("extend")]
    assert not storm.is_set(), f"{len(at)} extend calls, at {at[:8]} ... {at[-3:]}"


# -- Renewals beside a delete --------------------------------------------------------------


async def test_a_slow_delete_near_the_deadline_does_not_let_the_lease_lapse() -> None:
    """Defect 2: renewals were held while a delete was on the wire; a 4 s delete sent 0.1 s
    before the renewal was due let the lease lapse, and the message ran twice."""
    lease = LeaseConfig(visibility_s=30, extension_s=30, renew_margin_s=3)
    app = Worker(WorkerConfig(lease=lease, max_in_flight=1, wait_s=20, call_timeout_s=5))
    starts: Counter[str] = Counter()

    @app.handler("jobs")
    async def job(message: Message) -> None:
        starts[message.message_id] += 1
        await anyio.sleep(26.9)

    backend = WireBackend(latency={"delete": 4.0})
    await backend.create_queue(QueueSpec("jobs", visibility_timeout_s=30))
    [message_id] = await _send(backend, "jobs", 1)
    async with run_worker(app, backend=backend) as harness:
        await harness.wait_for_handled(1)
        await harness.wait_until_idle()
        await anyio.sleep(100)  # three visibility periods: a lapsed message would be back
    assert starts == Counter({message_id: 1})
    assert backend.inner.engine.peek("jobs", message_id) is None
    assert _lost(harness, "lapsed") == 0
    assert backend.overlaps() == []


@pytest.mark.parametrize("offset", [-0.06, -0.05, -0.04, -0.01, 0.0, 0.01])
async def test_no_renewal_goes_out_beside_a_delete_of_the_same_handle(offset: float) -> None:
    """Defect 3: the keeper marked a lease 'extending' one loop iteration after choosing it,
    so a delete could go out in the gap: the renewal's 'invalid' answer was then counted as a
    lost lease although the message was deleted."""
    lease = LeaseConfig(visibility_s=30, extension_s=30, renew_margin_s=10)
    app = Worker(WorkerConfig(lease=lease, max_in_flight=10, wait_s=20, settle_linger_s=0.05))

    @app.handler("jobs")
    async def job(message: Message) -> None:
        # Finish so that the delete is sent right around the renewal's due time (20 s).
        await anyio.sleep(20 - 0.05 + offset)

    backend = WireBackend(latency={"delete": 0.5, "extend": 0.5})
    await backend.create_queue(QueueSpec("jobs", visibility_timeout_s=30))
    ids = await _send(backend, "jobs", 10)
    async with run_worker(app, backend=backend) as harness:
        await harness.wait_for_handled(10)
        await harness.wait_until_idle()
    assert backend.overlaps() == []
    assert _lost(harness, "ReceiptHandleIsInvalid") == 0
    assert _lost(harness, "MessageNotInflight") == 0
    assert all(backend.inner.engine.peek("jobs", i) is None for i in ids)


async def test_no_renewal_goes_out_beside_a_delete_on_the_wire() -> None:
    app = _app(max_in_flight=1)

    @app.handler("jobs")
    async def job(message: Message) -> None:
        await anyio.sleep(18)  # done at 18; the renewal falls due at 20

    backend = RecordingBackend()
    original_delete = backend.delete

    async def slow_delete(queue: str, entries: Sequence[Deletion]) -> BatchResult:
        await anyio.sleep(4)  # on the wire from 18.05 to 22.05
        return await original_delete(queue, entries)

    backend.delete = slow_delete  # type: ignore[method-assign]
    [message_id] = await _prepare(backend, "jobs", 1)
    async with run_worker(app, backend=backend) as harness:
        [record] = await harness.wait_for_handled(1)
        await harness.wait_until_idle()
    assert record.outcome is Outcome.SUCCEEDED
    assert backend.of("extend") == []
    assert backend.inner.engine.peek("jobs", message_id) is None


async def test_a_delete_on_a_lease_shorter_than_its_call_timeout_needs_no_renewal_first() -> None:
    """With a 5 s call timeout and a 6 s visibility, asking for a renewal before the delete
    looped, renewing for ever; the delete goes out at once, abandoned (if need be) in time
    for a renewal after it."""
    lease = LeaseConfig(visibility_s=6, extension_s=6, renew_margin_s=2)
    app = Worker(WorkerConfig(lease=lease, max_in_flight=1, wait_s=20, call_timeout_s=5))

    @app.handler("jobs")
    async def job(message: Message) -> None:
        await anyio.sleep(1)

    backend = WireBackend(latency={"extend": 0.1})  # a renewal takes time, as on a network
    await backend.create_queue(QueueSpec("jobs", visibility_timeout_s=6))
    [message_id] = await _send(backend, "jobs", 1)
    async with run_worker(app, backend=backend) as harness:
        await harness.wait_for_handled(1)
        await harness.wait_until_idle()
    assert len(backend.of("extend")) == 0
    assert len(backend.of("delete")) == 1
    assert backend.inner.engine.peek("jobs", message_id) is None


async def test_a_lease_chosen_for_renewal_is_marked_extending_in_the_same_step() -> None:
    """Defect 3, at its root: choosing a lease and marking it 'extending' must be one step,
    with no await between, or the settler may put a delete on the wire in the gap."""
    backend = RecordingBackend()
    keeper = LeaseKeeper(backend, LeaseConfig(), clock=LoopClock(), metrics=Metrics())
    now = anyio.current_time()
    lease = Lease(
        queue="jobs",
        message_id="m",
        receipt_handle="h",
        received_at=now - 25,
        visibility_s=30,
        max_lease_s=43_200,
        now=anyio.current_time,
    )
    keeper.track(lease)
    [(chosen, visibility, asked)] = keeper._choose([lease])
    assert chosen is lease and visibility == 30 and asked is None
    assert lease.extending


async def test_nothing_waits_for_a_renewal_from_a_keeper_whose_task_ended() -> None:
    """The keeper crashed; a delete near its lease's deadline asked it for a renewal first,
    no answer came, the flush timed out, and the handled message ran again."""
    backend = RecordingBackend()
    await backend.create_queue(QueueSpec("jobs"))
    config = LeaseConfig(visibility_s=30, extension_s=30, renew_margin_s=10)
    keeper = LeaseKeeper(backend, config, clock=LoopClock(), metrics=Metrics())
    lease = Lease(
        queue="jobs",
        message_id="m",
        receipt_handle="h",
        received_at=anyio.current_time() - 28,  # 2 s left: a delete would want a renewal
        visibility_s=30,
        max_lease_s=43_200,
        now=anyio.current_time,
    )
    async with anyio.create_task_group() as tasks:
        await tasks.start(keeper.run)
        tasks.cancel_scope.cancel()  # the keeper's task ends (a crash, or the shutdown)
    keeper.track(lease)  # held by a handler that finishes after that
    with anyio.fail_after(1):
        await keeper.wait_extension_idle(lease, 3.0)
        # Issue 27 (7): it said nothing, as if the extension had happened.
        with pytest.raises(LeaseLostError, match="lease keeper has stopped"):
            await lease.extend(60)
    assert backend.of("extend") == []


async def test_waiting_for_time_before_a_delete_does_not_spin_at_the_cap() -> None:
    """Near the hard cap the keeper caps a lease instead of renewing it and answers the
    request at once; the delete's wait for time asked again, for ever."""
    backend = RecordingBackend()
    await backend.create_queue(QueueSpec("jobs"))
    config = LeaseConfig(visibility_s=30, extension_s=30, renew_margin_s=10)
    keeper = LeaseKeeper(backend, config, clock=LoopClock(), metrics=Metrics())
    now = anyio.current_time()
    # 1 s left on the lease (renewals failed for a while), 10.5 s left to the cap.
    lease = Lease(
        queue="jobs",
        message_id="m",
        receipt_handle="h",
        received_at=now,
        visibility_s=1,
        max_lease_s=10.5,
        now=anyio.current_time,
    )
    async with anyio.create_task_group() as tasks:
        await tasks.start(keeper.run)
        keeper.track(lease)
        await anyio.sleep(0.01)
        with anyio.fail_after(5):
            await keeper.wait_extension_idle(lease, 5.0)
        tasks.cancel_scope.cancel()
    assert backend.of("extend") == []


# -- A handler's own lease.extend() --------------------------------------------------------


@pytest.mark.parametrize("bad", [2.5, True, "600", None])
async def test_extend_with_a_bad_value_raises_type_error_at_the_call(bad: object) -> None:
    """Defect 8: `lease.extend(2.5)` or `extend(True)` reached the wire and poisoned the
    whole renewal batch."""
    app = Worker(WorkerConfig(max_in_flight=1, wait_s=20))
    raised: list[BaseException] = []

    @app.handler("jobs")
    async def job(message: Message) -> None:
        try:
            await message.lease.extend(bad)  # type: ignore[arg-type]
        except TypeError as error:
            raised.append(error)

    backend = RecordingBackend()
    await backend.create_queue(QueueSpec("jobs"))
    await _send(backend, "jobs", 1)
    async with run_worker(app, backend=backend) as harness:
        [record] = await harness.wait_for_handled(1)
    assert record.outcome is Outcome.SUCCEEDED
    assert len(raised) == 1
    assert backend.of("extend") == []


async def test_an_extend_request_is_kept_until_it_succeeds() -> None:
    """Defect 9: `await lease.extend(600)` returned normally after a failed call, and the
    retry asked for the default 30 s."""
    app = Worker(WorkerConfig(max_in_flight=1, wait_s=20))
    time_left: list[float] = []

    @app.handler("jobs")
    async def job(message: Message) -> None:
        await message.lease.extend(600)
        time_left.append(message.lease.time_left_s())

    backend = RecordingBackend()
    backend.failures["extend"] = [TransientBackendError("throttled", code="Throttling")]
    await backend.create_queue(QueueSpec("jobs"))
    await _send(backend, "jobs", 1)
    async with run_worker(app, backend=backend) as harness:
        [record] = await harness.wait_for_handled(1)
    assert record.outcome is Outcome.SUCCEEDED
    assert [c.visibility for c in backend.of("extend")] == [(600,), (600,)]
    assert time_left == [pytest.approx(held_for(600), abs=0.01)]  # counted from the retry


async def test_abandoned_extend_calls_leave_no_request_behind() -> None:
    """Defect 15: `LeaseKeeper._renewed` kept an entry for every `extend()` whose caller
    gave up waiting (a timeout around it)."""
    app = Worker(WorkerConfig(max_in_flight=1, wait_s=20))

    @app.handler("jobs")
    async def job(message: Message) -> None:
        for _ in range(100):
            with anyio.move_on_after(0):
                await message.lease.extend(60)

    backend = RecordingBackend()
    await backend.create_queue(QueueSpec("jobs"))
    await _send(backend, "jobs", 1)
    async with run_worker(app, backend=backend) as harness:
        [record] = await harness.wait_for_handled(1)
        await harness.wait_until_idle()
        assert harness.supervisor.keeper.waiting_requests == 0
    assert record.outcome is Outcome.SUCCEEDED


# Found by review: lease.extend() during a keeper renewal in flight: returns before its own
# extension lands, and a release right after can be overtaken by it.
async def test_extend_while_a_renewal_is_in_flight() -> None:
    app = _app(LeaseConfig(visibility_s=30, extension_s=30, renew_margin_s=10), max_in_flight=1)
    seen: dict[str, float] = {}
    deliveries: list[float] = []

    class Slow(RecordingBackend):
        async def extend(self, queue, entries):  # type: ignore[no-untyped-def]
            delay = 2.0 if entries[0].visibility_s == 30 else 3.0
            await anyio.sleep(delay)
            return await super().extend(queue, entries)

    @app.handler("jobs")
    async def job(message: Message) -> None:
        deliveries.append(anyio.current_time())
        if message.receive_count > 1:
            return
        await anyio.sleep(21)  # the keeper's renewal went out at 20 and answers at 22
        await message.lease.extend(3600)
        seen["left_after_extend"] = message.lease.time_left_s()
        raise Retry(after_s=5)  # come back in 5 s

    backend = Slow()
    await _prepare(backend, "jobs", 1)
    async with run_worker(app, backend=backend) as harness:
        with anyio.move_on_after(300):
            await harness.wait_for_handled(2)
        harness.shutdown()
    calls = [(c.operation, c.at, c.visibility) for c in backend.calls if c.operation != "receive"]
    print(seen, deliveries, calls)
    assert seen["left_after_extend"] > 3000, seen
    assert len(deliveries) == 2 and deliveries[1] < 60, deliveries


# -- A renewal batch refused whole, a copy received while held -----------------------------


@dataclass
class PoisonBackend(RecordingBackend):
    """Refuses a whole visibility batch that holds the poisoned handle, as SQS does for an
    invalid parameter in one entry."""

    poisoned: set[str] = field(default_factory=set)

    async def extend(self, queue: str, entries: Sequence[VisibilityChange]) -> BatchResult:
        if any(e.receipt_handle in self.poisoned for e in entries):
            self._record("extend", queue, len(entries), tuple(e.visibility_s for e in entries))
            raise FatalBackendError(
                "one entry is invalid",
                operation="ChangeMessageVisibilityBatch",
                queue=queue,
                code="InvalidParameterValue",
            )
        return await super().extend(queue, entries)


async def test_a_whole_call_refusal_caused_by_one_entry_spares_the_others() -> None:
    """Defect 8: a whole-call refusal was applied to every lease of the batch: nine
    innocent handlers were cancelled as 'at their cap', in a hot loop."""
    lease = LeaseConfig(visibility_s=30, extension_s=30, renew_margin_s=10)
    app = Worker(WorkerConfig(lease=lease, max_in_flight=10, wait_s=20))
    started: list[str] = []
    backend = PoisonBackend()

    @app.handler("jobs")
    async def job(message: Message) -> None:
        started.append(message.message_id)
        if len(started) == 10:  # the tenth handler's first delivery only
            backend.poisoned.add(message.receipt_handle)
        await anyio.sleep(50)

    await backend.create_queue(QueueSpec("jobs", visibility_timeout_s=30))
    await _send(backend, "jobs", 10)
    with capture_logs() as logs:
        async with run_worker(app, backend=backend) as harness:
            records = await harness.wait_for_handled(10)
            await harness.wait_until_idle()
    poisoned_id = started[9]
    outcomes = Counter((r.message.message_id == poisoned_id, r.outcome) for r in records)
    assert outcomes[(False, Outcome.SUCCEEDED)] == 9  # not one innocent lease cancelled
    capped = [e for e in logs if e["event"] == "lease.max_lease_reached"]
    assert [e["message_id"] for e in capped] == [poisoned_id]
    # At 20 s: the refused batch, then one call per lease; no hot loop after.
    sizes = [c.entries for c in backend.of("extend")]
    assert sizes[:11] == [10] + [1] * 10
    assert len(sizes) <= 14, sizes


# Found by review: a copy received while held: the lease keeps its old (later) deadline
# although the service now counts the visibility of the new handle from this receive.
async def test_adopted_copy_is_renewed_before_its_own_visibility_ends() -> None:
    lease = LeaseConfig(visibility_s=30, extension_s=300, renew_margin_s=10)
    app = _app(lease, max_in_flight=2)
    started = anyio.Event()

    @app.handler("jobs")
    async def job(message: Message) -> None:
        started.set()
        await anyio.sleep(600)

    backend = RecordingBackend()
    [message_id] = await _prepare(backend, "jobs", 1)
    async with run_worker(app, backend=backend) as harness:
        await started.wait()
        await anyio.sleep(50)  # renewed at 20, to 320
        backend.inner.engine.expire("jobs", message_id)  # visible: our receiver takes it again
        await anyio.sleep(35)  # t = 85: the copy's 30 s visibility has ended
        snapshot = backend.inner.engine.peek("jobs", message_id)
        harness.shutdown()
    # 1: first receive, 2: the copy at 50; a 3rd means it went visible at 80 mid-handler
    assert snapshot is not None and snapshot.receive_count == 2, snapshot
