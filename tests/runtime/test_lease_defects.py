"""Regression tests for leases that lied: each test is named after the defect it pins.

All run the whole runtime on the in-memory engine with the loop clock fast-forwarded
(looptime), through `RecordingBackend`, so that the calls the worker made and the engine's
state, not the worker's own account, decide.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest
from structlog.testing import capture_logs

from tests.recording import RecordingBackend
from worker import (
    FatalBackendError,
    LeaseConfig,
    Message,
    Outcome,
    OutgoingMessage,
    Retry,
    TransientBackendError,
    Worker,
    WorkerConfig,
)
from worker.clock import LoopClock
from worker.core.lease import Lease
from worker.runtime.lease_keeper import LeaseKeeper
from worker.runtime.metrics import Metrics
from worker.runtime.supervisor import Supervisor
from worker.testing import WorkerHarness, run_worker
from worker.types import BatchResult, Deletion, QueueSpec, VisibilityChange

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]


def _lost(harness: WorkerHarness, reason: str, queue: str = "jobs") -> float:
    return harness.metrics.value("lease_worker_leases_lost_total", queue=queue, reason=reason)


async def _send(backend: RecordingBackend, queue: str, count: int) -> list[str]:
    ids = []
    for i in range(count):
        result = await backend.inner.send(queue, [OutgoingMessage(body=f'{{"n": {i}}}')])
        ids.append(result.message_ids["0"])
    return ids


@dataclass
class WireBackend(RecordingBackend):
    """Calls that take time on the wire: each reaches the engine after `latency[op]`
    seconds, and the time each call spent on the wire is kept by receipt handle."""

    latency: dict[str, float] = field(default_factory=dict)
    #: (operation, receipt handle, sent at, answered at)
    wire: list[tuple[str, str, float, float]] = field(default_factory=list)

    async def _travel(self, operation: str, handles: Sequence[str]) -> float:
        sent = anyio.current_time()
        await anyio.sleep(self.latency.get(operation, 0.0))
        return sent

    def _answered(self, operation: str, handles: Sequence[str], sent: float) -> None:
        now = anyio.current_time()
        self.wire.extend((operation, handle, sent, now) for handle in handles)

    async def extend(self, queue: str, entries: Sequence[VisibilityChange]) -> BatchResult:
        handles = [e.receipt_handle for e in entries]
        sent = await self._travel("extend", handles)
        try:
            return await super().extend(queue, entries)
        finally:
            self._answered("extend", handles, sent)

    async def delete(self, queue: str, entries: Sequence[Deletion]) -> BatchResult:
        handles = [e.receipt_handle for e in entries]
        sent = await self._travel("delete", handles)
        try:
            return await super().delete(queue, entries)
        finally:
            self._answered("delete", handles, sent)

    def overlaps(self) -> list[tuple[str, float, float]]:
        """Renewals on the wire beside a delete of the same handle."""
        found = []
        deletes = [w for w in self.wire if w[0] == "delete"]
        for op, handle, sent, answered in self.wire:
            if op != "extend":
                continue
            for _, other, d_sent, d_answered in deletes:
                if other == handle and sent < d_answered and d_sent < answered:
                    found.append((handle, sent, d_sent))
        return found


# -- 1 -------------------------------------------------------------------------------------


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
    # Handed out at 10 s; SQS's deadline is 16 s: the first renewal comes 2 s (the margin)
    # before it, or earlier, never later.
    assert sent_at + 3.0 <= first.at <= sent_at + 4.0 + 1e-6
    assert _lost(harness, "lapsed") == 0


async def test_visibility_wait_and_margin_are_cross_checked() -> None:
    """Defect 1: contradictory lease settings are refused with a clear error at once."""
    with pytest.raises(ValueError, match="renew_margin_s"):
        LeaseConfig(visibility_s=6, extension_s=6, renew_margin_s=6)


# -- 2 -------------------------------------------------------------------------------------


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


# -- 3 -------------------------------------------------------------------------------------


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


# -- 4 -------------------------------------------------------------------------------------


async def test_a_delete_follows_a_handle_replaced_while_it_was_on_the_wire() -> None:
    """Defect 4: a second copy of a message adopted while its delete was on the wire gave
    the lease a new handle; the delete (old handle) was refused and the message ran twice."""
    lease = LeaseConfig(visibility_s=30, extension_s=30, renew_margin_s=10)
    app = Worker(WorkerConfig(lease=lease, max_in_flight=2, wait_s=20, call_timeout_s=5))
    starts: Counter[str] = Counter()

    @app.handler("jobs")
    async def job(message: Message) -> None:
        starts[message.message_id] += 1
        await anyio.sleep(5)

    backend = WireBackend(latency={"delete": 3.0})
    await backend.create_queue(QueueSpec("jobs", visibility_timeout_s=30))
    [message_id] = await _send(backend, "jobs", 1)
    async with run_worker(app, backend=backend) as harness:
        await harness.wait_for_handled(1)
        # The delete is on the wire now: the message lapses behind the worker's back and the
        # worker's own receiver gets it again, adopting the new handle.
        await anyio.sleep(1)
        backend.inner.engine.expire("jobs", message_id)
        await harness.wait_until_idle()
        await anyio.sleep(100)
    assert starts == Counter({message_id: 1})
    assert backend.inner.engine.peek("jobs", message_id) is None


# -- 8 -------------------------------------------------------------------------------------


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


# -- 9 -------------------------------------------------------------------------------------


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
    assert time_left == [pytest.approx(600, abs=0.01)]  # counted from the retry


# -- 10 ------------------------------------------------------------------------------------


async def test_a_handler_registered_by_queue_url_gets_its_messages() -> None:
    """Defect 10: a handler registered by queue URL on the memory backend raised KeyError in
    dispatch: the message was renewed for an hour and never handled."""
    url = "http://memory.invalid/000000000000/jobs"
    app = Worker(WorkerConfig(max_in_flight=1, wait_s=20))
    seen: list[str] = []

    @app.handler(url)
    async def job(message: Message) -> None:
        seen.append(message.message_id)

    backend = RecordingBackend()
    await backend.create_queue(QueueSpec("jobs"))
    [message_id] = await _send(backend, "jobs", 1)
    async with run_worker(app, backend=backend) as harness:
        [record] = await harness.wait_for_handled(1)
        await harness.wait_until_idle()
    assert record.outcome is Outcome.SUCCEEDED
    assert seen == [message_id]
    assert backend.inner.engine.peek("jobs", message_id) is None
    assert harness.supervisor.in_flight == 0


# -- 11 ------------------------------------------------------------------------------------


async def test_a_release_waiting_out_a_retry_pause_is_sent_at_outside_cancellation() -> None:
    """Defect 11: when the supervisor was cancelled from outside, a release that was waiting
    out its retry pause was skipped: the message stayed invisible."""
    app = Worker(WorkerConfig(max_in_flight=1, wait_s=20))
    failed_once = anyio.Event()

    @app.handler("jobs", on_error="release")
    async def job(message: Message) -> None:
        raise RuntimeError("fails")

    backend = RecordingBackend()
    original = backend.release

    async def release(queue: str, entries: Sequence[VisibilityChange]) -> BatchResult:
        try:
            return await original(queue, entries)
        finally:
            failed_once.set()

    backend.release = release  # type: ignore[method-assign]
    backend.failures["release"] = [TransientBackendError("throttled", code="Throttling")]
    await backend.create_queue(QueueSpec("jobs"))
    [message_id] = await _send(backend, "jobs", 1)
    supervisor = Supervisor(app, backend)
    await supervisor.prepare()
    async with anyio.create_task_group() as tasks:
        await tasks.start(supervisor.run)
        await failed_once.wait()  # the release failed; its retry waits a second
        tasks.cancel_scope.cancel()
    assert len(backend.of("release")) == 2
    assert backend.inner.engine.counts("jobs").visible == 1
    snapshot = backend.inner.engine.peek("jobs", message_id)
    assert snapshot is not None and snapshot.receive_count == 1


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


# -- 15 ------------------------------------------------------------------------------------


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


async def test_outside_cancellation_sends_a_delete_that_would_have_waited_for_a_renewal() -> None:
    """A delete near its lease's deadline waits for a renewal first; when the supervisor is
    cancelled from outside, the keeper is gone, so the delete must go out at once."""
    app = Worker(WorkerConfig(max_in_flight=1, wait_s=20))
    submitted = anyio.Event()

    @app.handler("jobs")
    async def job(message: Message) -> None:
        await anyio.sleep(25)  # 5 s left: too little for a delete call and a renewal after

    backend = RecordingBackend()
    await backend.create_queue(QueueSpec("jobs"))
    [message_id] = await _send(backend, "jobs", 1)
    supervisor = Supervisor(app, backend, observers=[lambda *_: submitted.set()])
    await supervisor.prepare()
    async with anyio.create_task_group() as tasks:
        await tasks.start(supervisor.run)
        await submitted.wait()  # the delete is pending in the settler
        cancelled_at = anyio.current_time()
        tasks.cancel_scope.cancel()
    assert anyio.current_time() - cancelled_at < 1
    assert len(backend.of("delete")) == 1
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


async def test_a_delete_on_the_wire_at_outside_cancellation_is_sent_again() -> None:
    """A delete cancelled on the wire with the settler (the supervisor cancelled from
    outside) was lost: its handled message lapsed and ran again elsewhere."""
    app = Worker(WorkerConfig(max_in_flight=1, wait_s=20))
    submitted = anyio.Event()

    @app.handler("jobs")
    async def job(message: Message) -> None:
        return None

    backend = WireBackend(latency={"delete": 3.0})
    await backend.create_queue(QueueSpec("jobs"))
    [message_id] = await _send(backend, "jobs", 1)
    supervisor = Supervisor(app, backend, observers=[lambda *_: submitted.set()])
    await supervisor.prepare()
    async with anyio.create_task_group() as tasks:
        await tasks.start(supervisor.run)
        await submitted.wait()
        await anyio.sleep(1)  # the delete is on the wire (3 s)
        tasks.cancel_scope.cancel()
    assert backend.inner.engine.peek("jobs", message_id) is None


async def test_a_retry_after_the_handler_cap_is_clamped_by_the_service_cap_only() -> None:
    """`Retry(after_s)` was clamped to the time left under the handler's own max_lease_s (a
    1 s cap made Retry(after_s=3600) a release at 0): the release may last until the
    service's cap, 12 h from the receive."""
    lease = LeaseConfig(visibility_s=30, max_lease_s=60)
    app = Worker(WorkerConfig(lease=lease, max_in_flight=1, wait_s=20))

    @app.handler("jobs")
    async def job(message: Message) -> None:
        await anyio.sleep(40)
        raise Retry(after_s=3_600)

    backend = RecordingBackend()
    await backend.create_queue(QueueSpec("jobs"))
    await _send(backend, "jobs", 1)
    async with run_worker(app, backend=backend) as harness:
        await harness.wait_for_handled(1)
        await harness.wait_until_idle()
    assert [c.visibility for c in backend.of("release")] == [(3_600,)]


async def test_a_message_whose_dispatch_fails_is_released_once() -> None:
    """Defect 10, the other half: a failure while dispatching one message releases that
    message at once, gives its slot back once, and the worker goes on."""
    app = Worker(WorkerConfig(max_in_flight=1, wait_s=20))
    seen: list[int] = []

    @app.handler("jobs")
    async def job(message: Message) -> None:
        seen.append(message.receive_count)

    backend = RecordingBackend()
    await backend.create_queue(QueueSpec("jobs"))
    with capture_logs() as logs:
        async with run_worker(app, backend=backend) as harness:
            dispatcher = harness.supervisor.dispatcher
            dispatch = dispatcher.dispatch
            failures = [RuntimeError("dispatch broke")]

            def flaky(received: Any, lease: Any) -> None:
                if failures:
                    raise failures.pop()
                dispatch(received, lease)

            dispatcher.dispatch = flaky  # type: ignore[method-assign]
            [message_id] = await _send(backend, "jobs", 1)
            await harness.wait_for_handled(1)
            await harness.wait_until_idle()
            assert harness.supervisor.in_flight == 0
    assert seen == [2]  # released at once, received again, handled
    assert [c.visibility for c in backend.of("release")] == [(0,)]
    assert [e["event"] for e in logs].count("dispatch.failed") == 1
    assert backend.inner.engine.peek("jobs", message_id) is None
