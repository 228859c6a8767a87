"""Defects found by reviewing this session's runtime changes; each test fails before its fix.

Virtual time (looptime), the whole runtime on the in-memory engine.
"""

from __future__ import annotations

from collections.abc import Sequence

import anyio
import pytest
from structlog.testing import capture_logs

from tests.recording import RecordingBackend
from worker import LeaseConfig, Message, ShutdownConfig, Worker, WorkerConfig
from worker.clock import LoopClock
from worker.core.lease import Lease
from worker.runtime.lease_keeper import LeaseKeeper
from worker.runtime.metrics import Metrics
from worker.testing import run_worker
from worker.types import BatchResult, OutgoingMessage, QueueSpec, VisibilityChange

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]


class Poison(BaseException):
    """A BaseException out of the backend: a bug, not a queue-service answer."""


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


async def test_a_settler_crash_during_the_flush_leaves_nothing_else_unsent() -> None:
    """The settler crashed during the final flush: what its cancelled calls put back, and
    what was still pending, waited for a flush that could not end, and stayed in flight."""
    lease = LeaseConfig(visibility_s=30, extension_s=30, renew_margin_s=10)
    shutdown = ShutdownConfig(grace_s=1, flush_timeout_s=4)
    app = Worker(WorkerConfig(lease=lease, max_in_flight=15, wait_s=20, shutdown=shutdown))
    all_started = anyio.Event()
    started = 0

    @app.handler("jobs")
    async def job(message: Message) -> None:
        nonlocal started
        started += 1
        if started == 15:
            all_started.set()
        await anyio.sleep(3600)

    class FirstReleaseExplodes(RecordingBackend):
        calls_made = 0

        async def release(self, queue: str, entries: Sequence[VisibilityChange]) -> BatchResult:
            self.calls_made += 1
            if self.calls_made == 1:
                await anyio.sleep(0.1)
                raise Poison()
            await anyio.sleep(0.5)
            return await super().release(queue, entries)

    backend = FirstReleaseExplodes()
    await backend.create_queue(QueueSpec("jobs", visibility_timeout_s=30))
    for _ in range(15):
        await backend.inner.send("jobs", [OutgoingMessage(body="{}")])
    with capture_logs() as logs, pytest.raises(BaseExceptionGroup):
        async with run_worker(app, backend=backend) as harness:
            await all_started.wait()
            harness.supervisor.request_shutdown()
            await anyio.sleep_forever()
    assert "shutdown.flush_timed_out" not in [e["event"] for e in logs]
    counts = backend.inner.engine.counts("jobs")
    # The ten of the call that crashed are lost with it (they lapse); the other five are
    # released at once.
    assert (counts.visible, counts.in_flight) == (5, 10)
