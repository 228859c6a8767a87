"""The lease as a fence (issue 27): no handler code runs on past a lease that is gone.

- A cancellation reaches a handler whose awaited answer came while the loop stood still
  (the answer is there, but the lease was lost first): the await raises, the side effect
  after it never happens.
- A renewal that lands and answers late is not a lost lease: on SMQ its new handle is
  adopted, on SQS the time a renewal is given follows the network.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import anyio
import pytest
import structlog

from backends.memory import MemoryBackend, MemoryEngine
from backends.memory.dialects import SMQ_DIALECT
from backends.memory.engine import QueueCounts
from tests.recording import RecordingBackend
from worker import (
    LeaseConfig,
    LeaseLostError,
    Message,
    Outcome,
    Producer,
    TransientBackendError,
    Worker,
    WorkerConfig,
)
from worker.clock import LoopClock
from worker.core.lease import Lease, LeaseState, LeaseView
from worker.runtime.lease_keeper import LeaseKeeper
from worker.runtime.metrics import Metrics
from worker.runtime.scope import HandlerScope
from worker.testing import FaultyBackend, Handled, run_worker
from worker.testing.faults import freeze
from worker.types import (
    BatchResult,
    OutgoingMessage,
    QueueSpec,
    ReceivedMessage,
    VisibilityChange,
)

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]


async def test_a_cancel_reaches_a_handler_whose_awaited_answer_is_already_there() -> None:
    """Issue 27 (1): the answer and the loss land in the same loop step (after a stall, the
    I/O and the keeper's timer run together); the handler must not see the answer."""
    answer: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    effects: list[str] = []
    scopes: list[HandlerScope] = []

    async def handler() -> str:
        scope = HandlerScope()
        scopes.append(scope)
        try:
            effects.append(await answer)  # the side effect after the await
        except asyncio.CancelledError:
            assert scope.close()
            return "cancelled"
        scope.close()
        return "ran on"

    task = asyncio.create_task(handler())
    await asyncio.sleep(0)

    def stall_over() -> None:  # one loop step: the answer arrives, then the lease is lost
        answer.set_result("reply")
        scopes[0].cancel()

    asyncio.get_running_loop().call_soon(stall_over)
    assert await task == "cancelled"
    assert effects == []
    assert task.cancelling() == 0


# -- renewals that land and answer late -----------------------------------------------------


def _late_extends(inner: MemoryBackend, late_s: float, times: int | None) -> RecordingBackend:
    """Every extend (or the first `times`) lands on the engine, then answers `late_s` late."""
    backend = RecordingBackend(inner)
    extend = backend.extend
    left = [times]

    async def late_extend(queue: str, entries: Sequence[VisibilityChange]) -> BatchResult:
        result = await extend(queue, entries)  # landed: the engine has done it
        if left[0] is None or left[0] > 0:
            left[0] = None if left[0] is None else left[0] - 1
            await anyio.sleep(late_s)
        return result

    backend.extend = late_extend  # type: ignore[method-assign]
    return backend


async def _run_one(backend: RecordingBackend, lease: LeaseConfig, run_s: float) -> list[Handled]:
    app = Worker(WorkerConfig(lease=lease, max_in_flight=1, wait_s=20))
    starts: list[int] = []

    @app.handler("jobs")
    async def job(message: Message) -> None:
        starts.append(message.receive_count)
        await anyio.sleep(run_s)

    await backend.create_queue(QueueSpec("jobs", visibility_timeout_s=lease.visibility_s))
    await backend.inner.send("jobs", [OutgoingMessage(body="{}", entry_id="0")])
    async with run_worker(app, backend=backend) as harness:
        handled = await harness.wait_for_handled(1)
        await harness.wait_until_idle()
        lost = harness.metrics.value(
            "lease_worker_leases_lost_total", queue="jobs", reason="lapsed"
        )
    assert starts == [1]  # ran once, never handed to anyone else
    assert lost == 0
    return handled


async def test_smq_a_renewal_answered_late_keeps_its_new_handle_and_the_lease() -> None:
    """Issue 27 (2): the extension landed (the engine rotated the handle) and answered 3 s
    late on a 10 s lease; abandoned at a third of the margin, its retry used the retired
    handle, was refused, and the message ran twice."""
    inner = MemoryBackend(MemoryEngine(LoopClock(), dialect=SMQ_DIALECT))
    backend = _late_extends(inner, 3.0, times=1)
    handled = await _run_one(backend, LeaseConfig(visibility_s=10), run_s=25)
    assert [h.outcome for h in handled] == [Outcome.SUCCEEDED]
    assert inner.engine.counts("jobs") == QueueCounts(0, 0, 0)  # deleted with the newest handle


async def test_sqs_renewals_answered_later_than_a_third_of_the_margin_still_renew() -> None:
    """Issue 27 (3): every renewal answered 1.5 s late on a 2 s margin (they land and extend
    the visibility): each was abandoned at a third of the margin and every lease lapsed."""
    inner = MemoryBackend()
    backend = _late_extends(inner, 1.5, times=None)
    lease = LeaseConfig(visibility_s=6, extension_s=6, renew_margin_s=2)
    handled = await _run_one(backend, lease, run_s=40)
    assert [h.outcome for h in handled] == [Outcome.SUCCEEDED]
    assert inner.engine.counts("jobs") == QueueCounts(0, 0, 0)
    assert len(backend.of("extend")) >= 8  # renewed all along, every 4 s


# -- the keeper's own bookkeeping -----------------------------------------------------------


async def test_a_capped_lease_still_running_past_its_deadline_is_lost_not_held() -> None:
    """Issue 27 (7): at the cap the lease left the schedule for good; a handler that outlived
    its deadline (a thread, or one swallowing its cancellations) still saw it HELD."""
    backend = RecordingBackend()
    await backend.create_queue(QueueSpec("jobs"))
    keeper = LeaseKeeper(
        backend, LeaseConfig(visibility_s=10), clock=LoopClock(), metrics=Metrics()
    )
    start = anyio.current_time()
    lease = Lease(
        queue="jobs",
        message_id="m",
        receipt_handle="h",
        received_at=start,
        visibility_s=10,
        max_lease_s=5,  # capped before its first renewal
        now=anyio.current_time,
    )
    async with anyio.create_task_group() as tasks:
        await tasks.start(keeper.run)
        keeper.track(lease)
        await anyio.sleep(9.5)
        assert (lease.state, lease.cancel_reason) == (LeaseState.HELD, Outcome.TIMED_OUT)
        await anyio.sleep(1)  # past the deadline, the handler still running
        assert lease.state is LeaseState.LOST
        assert lease.lost_reason == "lapsed"
        tasks.cancel_scope.cancel()
    assert backend.of("extend") == []


async def test_a_failed_renewal_call_is_not_logged_as_renewed() -> None:
    """Issue 27 (7): a renewal call that failed was logged as `lease.renewed` too."""
    backend = FaultyBackend(MemoryBackend())
    await backend.create_queue(QueueSpec("jobs"))
    await backend.send("jobs", [OutgoingMessage(body="{}", entry_id="0")])
    [received] = await backend.receive("jobs", max_messages=1, wait_s=0, visibility_s=30)
    backend.refuse("extend", TransientBackendError("down", code="ServiceUnavailable"), times=1)
    keeper = LeaseKeeper(
        backend, LeaseConfig(visibility_s=30), clock=LoopClock(), metrics=Metrics()
    )
    lease = Lease(
        queue="jobs",
        message_id=received.message_id,
        receipt_handle=received.receipt_handle,
        received_at=anyio.current_time(),
        visibility_s=30,
        max_lease_s=43_200,
        now=anyio.current_time,
    )
    with structlog.testing.capture_logs() as logs:
        async with anyio.create_task_group() as tasks:
            await tasks.start(keeper.run)
            keeper.track(lease)
            await anyio.sleep(25)  # due at 20 s: refused, retried 1 s later
            tasks.cancel_scope.cancel()
    events = [entry["event"] for entry in logs if entry["event"].startswith("lease.")]
    assert events == ["lease.renew_call_failed", "lease.renewed"]


# -- stalls ---------------------------------------------------------------------------------


async def test_after_a_stall_no_handler_runs_on_past_its_lapsed_lease() -> None:
    """Issue 27 (1): frozen 9 s with 6 s leases; on resume, a handler whose await completed
    during the freeze went on to its side effect although the lease had lapsed."""
    backend = FaultyBackend(MemoryBackend())
    lease = LeaseConfig(visibility_s=6, extension_s=6, renew_margin_s=2)
    app = Worker(WorkerConfig(lease=lease, max_in_flight=1, wait_s=1))
    effects: list[int] = []

    @app.handler("jobs")
    async def job(message: Message) -> None:
        if message.receive_count == 1:
            backend.stall(9)  # the process freezes while the handler waits
        await anyio.sleep(1)
        effects.append(message.receive_count)

    await backend.create_queue(QueueSpec("jobs", visibility_timeout_s=6))
    await backend.inner.send("jobs", [OutgoingMessage(body="{}", entry_id="0")])
    async with run_worker(app, backend=backend) as harness:
        first, second = await harness.wait_for_handled(2)
        await harness.wait_until_idle()
        lost = harness.metrics.value(
            "lease_worker_leases_lost_total", queue="jobs", reason="lapsed"
        )
    assert (first.outcome, second.outcome) == (Outcome.LEASE_LOST, Outcome.SUCCEEDED)
    assert effects == [2]  # only the copy delivered after the lapse did its work
    assert lost == 1


async def test_a_handler_returning_after_its_lease_lapsed_is_lost_not_a_success() -> None:
    """Issue 27 (stalls): blocking code froze the loop past the deadline and the handler
    returned in the same step; it was reported a success and its message deleted, although
    the message may already be someone else's."""
    backend = RecordingBackend()
    lease = LeaseConfig(visibility_s=6, extension_s=6, renew_margin_s=2)
    app = Worker(WorkerConfig(lease=lease, max_in_flight=1, wait_s=1))

    @app.handler("jobs")
    async def job(message: Message) -> None:
        if message.receive_count == 1:
            freeze(asyncio.get_running_loop(), 9)  # blocking code: the loop stands still

    await backend.create_queue(QueueSpec("jobs", visibility_timeout_s=6))
    await backend.inner.send("jobs", [OutgoingMessage(body="{}", entry_id="0")])
    async with run_worker(app, backend=backend) as harness:
        first, second = await harness.wait_for_handled(2)
        await harness.wait_until_idle()
    assert (first.outcome, second.outcome) == (Outcome.LEASE_LOST, Outcome.SUCCEEDED)
    assert len(backend.of("delete")) == 1  # the copy's only


async def test_handlers_see_a_read_only_lease_with_a_fence() -> None:
    app = Worker(WorkerConfig(lease=LeaseConfig(visibility_s=30), wait_s=1))
    seen: list[str] = []

    @app.handler("jobs")
    async def job(message: Message) -> None:
        view = message.lease
        assert isinstance(view, LeaseView) and message.lease is view
        with pytest.raises(AttributeError):
            view.deadline = 0.0  # type: ignore[misc]
        view.ensure_held()  # held: no error
        seen.append(f"{view.time_left_s():.0f}")
        with pytest.raises(LeaseLostError, match="lapsed"):
            view.ensure_held(now=view.deadline)

    backend = RecordingBackend()
    await backend.create_queue(QueueSpec("jobs", visibility_timeout_s=30))
    await backend.inner.send("jobs", [OutgoingMessage(body="{}", entry_id="0")])
    async with run_worker(app, backend=backend) as harness:
        [handled] = await harness.wait_for_handled(1)
    assert handled.outcome is Outcome.SUCCEEDED
    assert seen == ["30"]


async def test_a_send_from_a_handler_whose_lease_lapsed_does_not_go_out() -> None:
    """Issue 27 (commit points): after a stall the handler's follow-up send went out although
    the message was someone else's, who sends the same follow-up."""
    backend = FaultyBackend(MemoryBackend())
    producer = Producer(backend)
    lease = LeaseConfig(visibility_s=6, extension_s=6, renew_margin_s=2)
    app = Worker(WorkerConfig(lease=lease, max_in_flight=1, wait_s=1))
    refused: list[str] = []

    @app.handler("jobs")
    async def job(message: Message) -> None:
        if message.receive_count == 1:
            freeze(asyncio.get_running_loop(), 9)  # blocking code: the loop stands still
        try:
            await producer.send("next", {"after": message.message_id})
        except LeaseLostError as error:
            refused.append(str(error))
            raise

    for queue in ("jobs", "next"):
        await backend.create_queue(QueueSpec(queue, visibility_timeout_s=6))
    await backend.inner.send("jobs", [OutgoingMessage(body="{}", entry_id="0")])
    async with run_worker(app, backend=backend) as harness:
        first, second = await harness.wait_for_handled(2)
        await harness.wait_until_idle()
    assert (first.outcome, second.outcome) == (Outcome.LEASE_LOST, Outcome.SUCCEEDED)
    assert len(refused) == 1 and "lapsed" in refused[0]
    sends = [call.queue for call in backend.calls if call.operation == "send"]
    assert sends == ["next"]  # the copy's send only


async def test_a_receive_answered_during_a_stall_is_not_run_past_its_lapsed_lease() -> None:
    """Issue 27 (stalls; found by bench/lease_chaos): a long poll answered while the process
    was frozen got its handed-out time from when the worker resumed, a deadline later than
    the service's by the whole stall: the message ran although another consumer held it."""
    backend = RecordingBackend()
    receive = backend.receive
    frozen: list[float] = []

    async def frozen_receive(
        queue: str, *, max_messages: int, wait_s: float, visibility_s: int | None = None
    ) -> Sequence[ReceivedMessage]:
        got = await receive(
            queue, max_messages=max_messages, wait_s=wait_s, visibility_s=visibility_s
        )
        if got and not frozen:  # landed: the engine handed it out; then the process freezes
            frozen.append(anyio.current_time())
            loop = asyncio.get_running_loop()
            loop.call_soon(freeze, loop, 5)  # longer than the lease, within the call's time
            await anyio.sleep(0.5)  # the answer on its way back
        return got

    backend.receive = frozen_receive  # type: ignore[method-assign]
    lease = LeaseConfig(visibility_s=3, extension_s=3, renew_margin_s=1)
    app = Worker(WorkerConfig(lease=lease, max_in_flight=1, wait_s=1))
    runs: list[int] = []

    @app.handler("jobs")
    async def job(message: Message) -> None:
        runs.append(message.receive_count)

    await backend.create_queue(QueueSpec("jobs", visibility_timeout_s=3))
    await backend.inner.send("jobs", [OutgoingMessage(body="{}", entry_id="0")])
    async with run_worker(app, backend=backend) as harness:
        [handled] = await harness.wait_for_handled(1)
        await harness.wait_until_idle()
        lost = harness.metrics.value(
            "lease_worker_leases_lost_total", queue="jobs", reason="lapsed"
        )
    assert frozen != []
    assert runs == [2]  # the first delivery lapsed on arrival and never ran
    assert handled.outcome is Outcome.SUCCEEDED
    assert lost == 1


async def test_a_stall_while_one_answer_is_taken_in_runs_none_of_its_lapsed_messages() -> None:
    """The loop stands still 2.5 s while the receiver takes in one answer of 3 messages
    (visibility 2 s): those after the stall arrive lapsed and must never run on that
    delivery. Reading the clock once per answer (issue 33's hot path) let them through, and
    their handlers ran before the keeper's watchdog: another consumer may hold them by then
    (found in review). A first message runs long, so the keeper sleeps, as in a busy worker.
    """
    app = Worker(WorkerConfig(max_in_flight=10, wait_s=5, lease=LeaseConfig(visibility_s=2)))
    entered: list[tuple[str, int]] = []

    @app.handler("jobs")
    async def job(message: Message) -> None:
        entered.append((message.message_id, message.receive_count))
        await anyio.sleep(5 if len(entered) == 1 else 0.2)

    backend = RecordingBackend()
    await backend.create_queue(QueueSpec("jobs"))
    await backend.inner.send("jobs", [OutgoingMessage(body="{}")])
    order: list[str] = []
    async with run_worker(app, backend=backend) as harness:
        receiver = harness.supervisor.receivers["jobs"]
        adopt = receiver._adopt

        def stalling_adopt(received: ReceivedMessage, sent_at: float, visibility_s: float) -> bool:
            order.append(received.message_id)
            if len(order) == 2:  # before the answer's second message
                freeze(asyncio.get_running_loop(), 2.5)  # SIGSTOP, a long GC
            return adopt(received, sent_at, visibility_s)

        receiver._adopt = stalling_adopt
        await harness.wait_for_handled(1)  # the long one has started: the keeper sleeps
        batch = [OutgoingMessage(body="{}", entry_id=str(i)) for i in range(3)]
        await backend.inner.send("jobs", batch)
        await anyio.sleep(1.0)
    after_stall = set(order[1:3])  # the answer's second and third
    assert len(after_stall) == 2, order
    assert [m for m, count in entered if count == 1 and m in after_stall] == [], (order, entered)
