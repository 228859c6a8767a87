"""Issue 12, defect 5: a crash releases everything held, then the worker stops with an error.

A background task raising, or a task of the runtime (here: the lease keeper and the settler,
met with a BaseException from the backend), used to end the worker without releasing
anything: innocent co-held messages waited out their visibility and, after restarts that
died on the same poison, reached the DLQ. Now the supervisor releases what it holds (without
waiting for the drain), within the flush timeout, and `run()` raises `WorkerCrashed`. A
settler that crashes during the final flush of a shutdown leaves nothing else unsent.
"""

from __future__ import annotations

from collections.abc import Sequence

import anyio
import pytest
from structlog.testing import capture_logs

from tests.recording import RecordingBackend
from worker import LeaseConfig, Message, ShutdownConfig, Worker, WorkerConfig, WorkerContext
from worker.errors import WorkerCrashed
from worker.testing import run_worker
from worker.types import BatchResult, Deletion, OutgoingMessage, QueueSpec, VisibilityChange

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]

LEASE = LeaseConfig(visibility_s=30, extension_s=30, renew_margin_s=10)
HELD, SENT, GRACE_S, FLUSH_S = 3, 5, 60.0, 4.0


class Poison(BaseException):
    """An application's own BaseException subclass."""


def _app() -> Worker:
    shutdown = ShutdownConfig(grace_s=GRACE_S, flush_timeout_s=FLUSH_S)
    return Worker(WorkerConfig(lease=LEASE, max_in_flight=HELD, wait_s=20, shutdown=shutdown))


class Started:
    def __init__(self) -> None:
        self.count = 0
        self.all = anyio.Event()

    def __call__(self) -> None:
        self.count += 1
        if self.count == HELD:
            self.all.set()


async def _fill(backend: RecordingBackend) -> None:
    await backend.create_queue(QueueSpec("jobs", visibility_timeout_s=30))
    for n in range(SENT):
        await backend.inner.send("jobs", [OutgoingMessage(body=f'{{"n": {n}}}')])


def _long_handler(app: Worker, started: Started) -> None:
    @app.handler("jobs")
    async def long(message: Message) -> None:
        started()
        await anyio.sleep(3600)


async def _run_until_crash(app: Worker, backend: RecordingBackend) -> tuple[BaseException, float]:
    """Run until the worker ends on its own; its error and the virtual time it ran."""
    started_at = anyio.current_time()
    with anyio.fail_after(GRACE_S), pytest.raises(BaseExceptionGroup) as caught:
        async with run_worker(app, backend=backend):
            await anyio.sleep_forever()
    [error] = caught.value.exceptions
    return error, anyio.current_time() - started_at


def _assert_every_message_visible(backend: RecordingBackend) -> None:
    engine = backend.inner.engine
    counts = engine.counts("jobs")
    assert (counts.visible, counts.in_flight, counts.delayed) == (SENT, 0, 0)
    assert [call.visibility for call in backend.of("release")] == [(0,) * HELD]


@pytest.mark.parametrize(
    "raised",
    [RuntimeError("a bug"), SystemExit(0), Poison()],
    ids=["RuntimeError", "SystemExit(0)", "custom BaseException"],
)
async def test_a_crashing_background_task_releases_every_held_message(
    raised: BaseException,
) -> None:
    app = _app()
    started = Started()
    _long_handler(app, started)

    @app.background
    async def buggy(context: WorkerContext) -> None:
        await started.all.wait()
        await anyio.sleep(7)
        raise raised

    backend = RecordingBackend()
    await _fill(backend)
    with capture_logs() as logs:
        error, ran_s = await _run_until_crash(app, backend)

    assert isinstance(error, WorkerCrashed)
    assert error.__cause__ is raised
    assert "background task" in str(error) and type(raised).__name__ in str(error)
    assert ran_s == pytest.approx(7, abs=0.1)  # no drain: released at once
    _assert_every_message_visible(backend)
    [crashed] = [e for e in logs if e["event"] == "worker.crashed"]
    assert crashed["log_level"] == "error"


async def test_a_crashing_lease_keeper_releases_every_held_message() -> None:
    app = _app()
    started = Started()
    _long_handler(app, started)

    class ExplodingExtend(RecordingBackend):
        async def extend(self, queue: str, entries: Sequence[VisibilityChange]) -> BatchResult:
            raise Poison("a BaseException from the backend")

    backend = ExplodingExtend()
    await _fill(backend)
    error, ran_s = await _run_until_crash(app, backend)

    assert isinstance(error, WorkerCrashed)
    assert error.task == "the lease keeper"
    # The first renewal is due at visibility - margin: the crash, then the releases.
    assert ran_s == pytest.approx(LEASE.visibility_s - LEASE.renew_margin_s, abs=0.1)
    _assert_every_message_visible(backend)


async def test_a_crashing_settler_still_releases_the_other_held_messages() -> None:
    app = _app()
    started = Started()

    @app.handler("jobs")
    async def first_succeeds(message: Message) -> None:
        started()
        if message.body["n"] != 0:
            await anyio.sleep(3600)

    class ExplodingDelete(RecordingBackend):
        async def delete(self, queue: str, entries: Sequence[Deletion]) -> BatchResult:
            raise Poison("a BaseException from the backend")

    backend = ExplodingDelete()
    await _fill(backend)
    error, _ = await _run_until_crash(app, backend)

    assert isinstance(error, WorkerCrashed)
    assert error.task == "the settler"
    counts = backend.inner.engine.counts("jobs")
    # The succeeded one's delete died with the settler: it lapses. The two others running
    # beside it, and the two never received, are visible again at once.
    assert (counts.visible, counts.in_flight, counts.delayed) == (SENT - 1, 1, 0)
    assert [call.visibility for call in backend.of("release")] == [(0, 0)]


async def test_cancelled_from_outside_background_tasks_outlive_the_handlers() -> None:
    # Found by review: cancelled from outside (an embedding application going down), the
    # background tasks ended with the services, before the handlers were cancelled. The
    # idempotency heartbeat is one: it ended its beat (its claims stale at once, its
    # deferred completions dropped) while the handlers guarded by those claims still ran.
    app, started = _app(), Started()
    order: list[str] = []

    @app.handler("jobs")
    async def long(message: Message) -> None:
        started()
        try:
            await anyio.sleep(3600)
        finally:
            order.append("handler")

    @app.background
    async def heartbeat(context: WorkerContext) -> None:
        try:
            await anyio.sleep_forever()
        finally:
            order.append("background")

    backend = RecordingBackend()
    await _fill(backend)
    with anyio.CancelScope() as outside:
        async with run_worker(app, backend=backend):
            await started.all.wait()
            outside.cancel()
    assert order == ["handler"] * HELD + ["background"]
    _assert_every_message_visible(backend)


async def test_a_settler_crash_during_the_flush_ends_it_and_sends_nothing_twice() -> None:
    """The settler crashed during the final flush: what was still pending waited for a flush
    that could not end. Now the flush ends at once, and sends nothing a second time: the
    releases on the wire when it crashed may have landed (`calls.may_have_landed`), and a
    release sent again with the same handle could end another consumer's lease."""
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
    # The ten of the call that crashed are lost with it, and the five of the call cut short
    # on the wire are given up on: all lapse at their deadline, none is released twice.
    assert (counts.visible, counts.in_flight) == (0, 15)
    assert backend.calls_made == 2
