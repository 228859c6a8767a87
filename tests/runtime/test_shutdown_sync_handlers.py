"""Synchronous handlers: a thread cannot be stopped, so its message is never handed back
while it runs (issue 12, defect 7), and tests on a fast-forwarded clock see them run at the
real pace.

The threads here block on a `threading.Event` the test sets: while one runs, looptime moves
the loop's clock with the real one (it sees the thread through `run_in_executor`), so the
shutdown's deadlines below pass in real time too, and are kept short.
"""

from __future__ import annotations

import threading
import time

import anyio
import pytest

from tests.recording import RecordingBackend
from worker import LeaseConfig, Message, Outcome, ShutdownConfig, Worker, WorkerConfig
from worker.core.settlement import Action, Settlement
from worker.testing import run_worker
from worker.types import OutgoingMessage, QueueSpec

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]

GRACE_S, FLUSH_S = 0.5, 1.0
LEASE = LeaseConfig(visibility_s=30, extension_s=30, renew_margin_s=10)


def _app(lease: LeaseConfig = LEASE) -> Worker:
    shutdown = ShutdownConfig(grace_s=GRACE_S, flush_timeout_s=FLUSH_S)
    return Worker(WorkerConfig(lease=lease, max_in_flight=1, wait_s=20, shutdown=shutdown))


async def _backend() -> tuple[RecordingBackend, str]:
    backend = RecordingBackend()
    await backend.create_queue(QueueSpec("jobs", visibility_timeout_s=30))
    result = await backend.inner.send("jobs", [OutgoingMessage(body='{"n": 0}')])
    return backend, result.message_ids["0"]


async def _wait(event: threading.Event) -> None:
    """Wait for a thread's event: polled, since a thread cannot set an anyio.Event."""
    with anyio.fail_after(10):
        while not event.is_set():  # noqa: ASYNC110
            await anyio.sleep(0.01)


def _receive_count(backend: RecordingBackend, message_id: str) -> int:
    snapshot = backend.inner.engine.peek("jobs", message_id)
    assert snapshot is not None
    return snapshot.receive_count


class BlockedHandler:
    """A synchronous handler that runs until the test lets it finish."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.finish = threading.Event()
        self.finished = threading.Event()

    def __call__(self, message: Message) -> None:
        self.started.set()
        self.finish.wait(30)
        self.finished.set()


async def test_shutdown_keeps_a_sync_handlers_lease_and_settles_by_what_its_thread_did() -> None:
    app = _app()
    handler = BlockedHandler()
    app.handler("jobs")(handler)
    backend, message_id = await _backend()
    async with run_worker(app, backend=backend) as harness:
        await _wait(handler.started)
        harness.shutdown()
        await anyio.sleep(GRACE_S + 0.2)  # past the drain: the handler has been cancelled
        snapshot = backend.inner.engine.peek("jobs", message_id)
        # Not released under the running thread (it used to be, visibility 0, right here).
        assert snapshot is not None and snapshot.state.value == "in_flight"
        assert backend.of("release") == []
        handler.finish.set()  # the thread ends within the flush timeout
    [handled] = harness.handled
    assert handled.outcome is Outcome.SUCCEEDED
    assert handled.settlement == Settlement(Action.DELETE)
    assert backend.inner.engine.peek("jobs", message_id) is None


async def test_a_sync_handler_still_running_at_the_end_is_left_to_lapse_not_released() -> None:
    app = _app()
    handler = BlockedHandler()
    app.handler("jobs")(handler)
    backend, message_id = await _backend()
    try:
        with anyio.fail_after(GRACE_S + FLUSH_S + 1):
            async with run_worker(app, backend=backend) as harness:
                await _wait(handler.started)
                assert harness.supervisor.snapshot().abandoned_threads == 0  # still held
        assert harness.supervisor.snapshot().abandoned_threads == 1  # given up, still running
        assert backend.of("release") == []
        snapshot = backend.inner.engine.peek("jobs", message_id)
        assert snapshot is not None and snapshot.state.value == "in_flight"
        assert snapshot.receive_count == 1
        [handled] = harness.handled
        assert handled.outcome is Outcome.SHUTDOWN
        assert handled.settlement == Settlement(Action.FORGET)
        assert not harness.supervisor.handlers_running  # the thread, not a task, runs on
    finally:
        handler.finish.set()


async def test_a_sync_handler_at_its_lease_cap_is_forgotten_not_released() -> None:
    # The cap comes 1 s after the receive: the handler is cancelled as TIMED_OUT while its
    # thread runs on, and its error policy (release) must not hand the message back.
    lease = LeaseConfig(visibility_s=2, extension_s=2, renew_margin_s=1, max_lease_s=2.5)
    app = _app(lease)
    handler = BlockedHandler()
    app.handler("jobs")(handler)
    backend, message_id = await _backend()
    try:
        async with run_worker(app, backend=backend) as harness:
            with anyio.fail_after(10):
                [handled] = await harness.wait_for_handled(1)
            assert handled.outcome is Outcome.TIMED_OUT
            assert handled.settlement == Settlement(Action.FORGET)
            snapshot = backend.inner.engine.peek("jobs", message_id)
            assert snapshot is not None and snapshot.state.value == "in_flight"
            assert backend.of("release") == []
    finally:
        handler.finish.set()


async def test_sync_handlers_under_looptime_run_at_the_real_pace() -> None:
    # The loop idles while a thread runs; looptime used to take that for "nothing to do"
    # and race the clock from timer to timer, here to the 12 h cap in a fraction of a second.
    app = _app()

    @app.handler("jobs")
    def takes_a_moment(message: Message) -> None:
        time.sleep(0.3)

    backend, _ = await _backend()
    async with run_worker(app, backend=backend) as harness:
        started = anyio.current_time()
        with anyio.fail_after(60):
            [handled] = await harness.wait_for_handled(1)
        took = anyio.current_time() - started
    assert handled.outcome is Outcome.SUCCEEDED
    # The loop's clock moved no faster than the real one: no renewal fell due meanwhile.
    assert took < 1
    assert backend.of("extend") == []


async def test_a_redelivery_waits_for_the_thread_still_running_its_first_delivery() -> None:
    # The first delivery is renewed once (at 1 s), cancelled at its cap (2 s) and forgotten;
    # the lease lapses (3 s) and the message comes back while the thread still runs: the
    # second run waits for it. (The cap leaves room for the second delivery, dated from its
    # long poll's send up to a second before the hand-out, to be renewed.)
    lease = LeaseConfig(visibility_s=2, extension_s=2, renew_margin_s=1, max_lease_s=3.4)
    shutdown = ShutdownConfig(grace_s=GRACE_S, flush_timeout_s=FLUSH_S)
    config = WorkerConfig(
        lease=lease,
        max_in_flight=4,
        sync_threads=1,
        wait_s=1,
        call_timeout_s=0.2,  # a delete's call fits in the 2 s lease
        shutdown=shutdown,
    )
    app = Worker(config)
    finish, lock = threading.Event(), threading.Lock()
    running: dict[str, int] = {}
    worst = [0, 0]  # the same message at once, threads at once

    @app.handler("jobs")
    def job(message: Message) -> None:
        with lock:
            running[message.message_id] = running.get(message.message_id, 0) + 1
            worst[0] = max(worst[0], running[message.message_id])
            worst[1] = max(worst[1], sum(running.values()))
        finish.wait(10)
        with lock:
            running[message.message_id] -= 1

    backend, message_id = await _backend()
    try:
        async with run_worker(app, backend=backend) as harness:
            with anyio.fail_after(10):
                await harness.wait_for_handled(1)
                while _receive_count(backend, message_id) < 2:  # noqa: ASYNC110 (polls the engine)
                    await anyio.sleep(0.05)
            finish.set()
            with anyio.fail_after(10):
                records = await harness.wait_for_handled(2)
    finally:
        finish.set()
    assert [(r.outcome, r.message.receive_count) for r in records] == [
        (Outcome.TIMED_OUT, 1),
        (Outcome.SUCCEEDED, 2),
    ]
    assert worst == [1, 1]
