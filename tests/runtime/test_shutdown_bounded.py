"""Issue 12, defect 6: shutdown is bounded by grace + flush, whatever the handlers do.

Virtual time (looptime): every bound here is checked on the loop's clock, exactly. A handler
that catches its cancellation and keeps awaiting (a rollback) is cancelled again at its
next await; one that swallows every cancellation is given up on, its message left to lapse
(issue 27, defect 5: never released while the coroutine exists); a second request cuts both
the drain and the wait for cancelled handlers short.
"""

from __future__ import annotations

import anyio
import pytest

from backends.memory import MemoryBackend
from worker import LeaseConfig, Message, Outcome, ShutdownConfig, Worker, WorkerConfig
from worker.core.settlement import Action
from worker.testing import WorkerHarness, run_worker
from worker.types import OutgoingMessage, QueueSpec

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]

GRACE_S, FLUSH_S = 5.0, 4.0
LEASE = LeaseConfig(visibility_s=30, extension_s=30, renew_margin_s=10)
HELD = 3


def _app(grace_s: float = GRACE_S, max_in_flight: int = HELD) -> Worker:
    shutdown = ShutdownConfig(grace_s=grace_s, flush_timeout_s=FLUSH_S)
    config = WorkerConfig(lease=LEASE, max_in_flight=max_in_flight, wait_s=20, shutdown=shutdown)
    return Worker(config)


async def _backend(count: int) -> tuple[MemoryBackend, list[str]]:
    backend = MemoryBackend()
    await backend.create_queue(QueueSpec("jobs", visibility_timeout_s=30))
    sent = [
        await backend.send("jobs", [OutgoingMessage(body=f'{{"n": {n}}}')]) for n in range(count)
    ]
    return backend, [result.message_ids["0"] for result in sent]


class Started:
    """Counts handler starts; `wait(n)` returns once n have started."""

    def __init__(self) -> None:
        self.count = 0
        self._changed = anyio.Event()

    def __call__(self) -> None:
        self.count += 1
        self._changed.set()

    async def wait(self, count: int) -> None:
        while self.count < count:
            self._changed = anyio.Event()
            await self._changed.wait()


def _assert_all_visible_again(backend: MemoryBackend, count: int) -> None:
    counts = backend.engine.counts("jobs")
    assert (counts.visible, counts.in_flight, counts.delayed) == (count, 0, 0)


def _assert_all_left_to_lapse(backend: MemoryBackend, count: int) -> None:
    """Given up on while their coroutines still exist: not released (issue 27, defect 5)."""
    counts = backend.engine.counts("jobs")
    assert (counts.visible, counts.in_flight, counts.delayed) == (0, count, 0)


async def _shut_down(
    app: Worker, backend: MemoryBackend, started: Started, *, hurry: bool = False
) -> tuple[WorkerHarness, float]:
    """Run until HELD handlers started, then shut down (the harness asks as its block ends;
    `hurry` asks twice, as a second signal does); returns the harness and the virtual time
    the shutdown took.

    Bounded by grace + flush + 1 s: on the code before the fix the shutdown never ended,
    and this moved on (cancelling the worker from outside) instead of hanging."""
    with anyio.move_on_after(GRACE_S + FLUSH_S + 1) as bound:
        async with run_worker(app, backend=backend) as harness:
            await started.wait(HELD)
            requested_at = anyio.current_time()
            if hurry:
                harness.shutdown()
                harness.shutdown()
    assert not bound.cancelled_caught, "the shutdown was not over within grace + flush + 1 s"
    return harness, anyio.current_time() - requested_at


async def test_a_handler_that_swallows_cancellation_is_cancelled_again_and_the_shutdown_ends() -> (
    None
):
    app = _app()
    started, rolled_back = Started(), []

    @app.handler("jobs")
    async def rollback_on_cancel(message: Message) -> None:
        started()
        try:
            await anyio.sleep(3600)
        except anyio.get_cancelled_exc_class():
            await anyio.sleep(3600)  # a rollback that takes its time: swallows the first one
            rolled_back.append(message.message_id)

    backend, _ = await _backend(HELD)
    harness, took = await _shut_down(app, backend, started)

    # The drain's grace, then the cancellation ended the rollbacks at their first await.
    assert took == pytest.approx(GRACE_S, abs=0.1)
    assert rolled_back == []
    assert [h.outcome for h in harness.handled] == [Outcome.SHUTDOWN] * HELD
    assert {h.settlement.action for h in harness.handled} == {Action.RELEASE}
    assert not harness.supervisor.handlers_running
    _assert_all_visible_again(backend, HELD)


async def test_a_handler_that_swallows_every_cancellation_is_given_up_on_and_left_to_lapse() -> (
    None
):
    app = _app()
    started, swallowed, stop = Started(), [0], [False]

    @app.handler("jobs")
    async def never_ends(message: Message) -> None:
        started()
        while not stop[0]:
            try:
                await anyio.sleep(3600)
            except anyio.get_cancelled_exc_class():
                swallowed[0] += 1

    backend, _ = await _backend(HELD)
    try:
        harness, took = await _shut_down(app, backend, started)
        # Drain, then half the flush timeout for the cancelled handlers to end, then they
        # are given up on: within grace + flush.
        assert took == pytest.approx(GRACE_S + FLUSH_S / 2, abs=0.1)
        assert swallowed[0] >= HELD
        assert harness.supervisor.handlers_running
        assert harness.handled == []  # they never ended
        _assert_all_left_to_lapse(backend, HELD)
    finally:
        stop[0] = True  # so that the loop's own teardown can end them


async def test_a_second_request_cuts_the_drain_and_the_wait_for_cancelled_handlers_short() -> None:
    app = _app(grace_s=120)
    started, stop = Started(), [False]

    @app.handler("jobs")
    async def never_ends(message: Message) -> None:
        started()
        while not stop[0]:
            try:
                await anyio.sleep(3600)
            except anyio.get_cancelled_exc_class():
                pass

    backend, _ = await _backend(HELD)
    try:
        _, took = await _shut_down(app, backend, started, hurry=True)
        assert took == pytest.approx(0, abs=0.1)
        _assert_all_left_to_lapse(backend, HELD)
    finally:
        stop[0] = True


async def test_a_lost_lease_stops_a_handler_that_swallowed_its_cancellation() -> None:
    app = _app(max_in_flight=1)  # no receive under way: nothing takes the message back
    started, worked_on = Started(), []

    @app.handler("jobs")
    async def stubborn(message: Message) -> None:
        started()
        try:
            await anyio.sleep(3600)
        except anyio.get_cancelled_exc_class():
            await anyio.sleep(600)  # carries on after losing the lease
            worked_on.append(anyio.current_time())

    backend, [message_id] = await _backend(1)
    async with run_worker(app, backend=backend) as harness:
        await started.wait(1)
        backend.engine.expire("jobs", message_id)
        with anyio.fail_after(60):
            [handled] = await harness.wait_for_handled(1)
        lost_at = anyio.current_time()
    assert handled.outcome is Outcome.LEASE_LOST
    assert worked_on == []
    # The keeper finds the lease lost at its first renewal (20 s) and the handler ends there.
    assert lost_at == pytest.approx(LEASE.visibility_s - LEASE.renew_margin_s, abs=0.1)
