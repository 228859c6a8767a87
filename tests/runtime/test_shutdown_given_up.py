"""Issue 27, defect 5: a handler given up on at shutdown is left to lapse, never released.

At the end of a shutdown the supervisor stops waiting for a handler that will not end (it
swallows every cancellation). Its message used to be released (visibility 0) while the
handler's coroutine still existed and could go on acting on it, so that another consumer
received it and the two overlapped; a synchronous handler's message was already left to
lapse. Now both are: forgotten (no more renewals), visible again when its last extension
runs out, and `shutdown.gave_up_waiting` counts them in `left_to_lapse`. A message whose
handler never started (a FIFO group's later message, queued behind the stuck one) has
nothing that could overlap it and is still released at once.

Virtual time (looptime); the handlers here swallow every cancellation until the test's end.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, MutableMapping
from typing import Any

import anyio
import pytest
import pytest_asyncio
from structlog.testing import capture_logs

from backends.memory import MemoryBackend
from worker import LeaseConfig, Message, ShutdownConfig, Worker, WorkerConfig
from worker.testing import WorkerHarness, run_worker
from worker.types import OutgoingMessage, QueueSpec

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]

GRACE_S, FLUSH_S = 5.0, 4.0
LEASE = LeaseConfig(visibility_s=30, extension_s=30, renew_margin_s=10)


def _app(grace_s: float = GRACE_S) -> Worker:
    shutdown = ShutdownConfig(grace_s=grace_s, flush_timeout_s=FLUSH_S)
    return Worker(WorkerConfig(lease=LEASE, max_in_flight=10, wait_s=20, shutdown=shutdown))


async def _backend(queue: str, count: int, *, groups: str = "") -> tuple[MemoryBackend, list[str]]:
    backend = MemoryBackend()
    await backend.create_queue(QueueSpec(queue, visibility_timeout_s=30))
    ids = []
    for n in range(count):
        body = f'{{"n": {n}}}'
        message = OutgoingMessage(body=body)
        if groups:
            message = OutgoingMessage(body=body, group_id=groups[n], deduplication_id=str(n))
        ids.append((await backend.send(queue, [message])).message_ids["0"])
    return backend, ids


class Stubborn:
    """Handler bodies that will not end before `release()`; counts starts and ends."""

    def __init__(self) -> None:
        self.started = 0
        self.ended = 0
        self._changed = anyio.Event()
        self._released = anyio.Event()

    async def run(self) -> None:
        """Swallows every cancellation."""
        self.started += 1
        self._changed.set()
        while not self._released.is_set():
            try:
                await self._released.wait()
            except anyio.get_cancelled_exc_class():
                pass
        self.ended += 1

    async def run_shielded(self) -> None:
        """Shields itself from every cancellation (a batch's scope would re-deliver one at
        every loop iteration to a handler that swallows them: looptime's clock would stand
        still)."""
        self.started += 1
        self._changed.set()
        with anyio.CancelScope(shield=True):
            await self._released.wait()
        self.ended += 1

    async def wait_started(self, count: int) -> None:
        while self.started < count:
            self._changed = anyio.Event()
            await self._changed.wait()

    def release(self) -> None:
        self._released.set()


async def _given_up(
    app: Worker, backend: MemoryBackend, stubborn: Stubborn, started: int, *, hurry: bool = False
) -> tuple[WorkerHarness, list[MutableMapping[str, Any]]]:
    """Run until `started` stubborn handlers run, shut down (twice with `hurry`), and return
    once the worker has: bounded by grace + flush."""
    with capture_logs() as logs, anyio.fail_after(GRACE_S + FLUSH_S + 1):
        async with run_worker(app, backend=backend) as harness:
            await stubborn.wait_started(started)
            if hurry:
                harness.shutdown()
                harness.shutdown()
    assert harness.supervisor.handlers_running  # the coroutines still exist
    assert stubborn.ended == 0
    return harness, [e for e in logs if e["event"] == "shutdown.gave_up_waiting"]


def _assert_left_to_lapse(backend: MemoryBackend, queue: str, message_ids: list[str]) -> None:
    """Still invisible (received once), visible again within one extension from now."""
    now = anyio.current_time()
    for message_id in message_ids:
        snapshot = backend.engine.peek(queue, message_id)
        assert snapshot is not None
        assert (snapshot.state.value, snapshot.receive_count) == ("in_flight", 1)
        assert now < snapshot.visible_at <= now + LEASE.extension_s


@pytest_asyncio.fixture
async def stubborn() -> AsyncIterator[Stubborn]:
    handlers = Stubborn()
    try:
        yield handlers
    finally:
        handlers.release()  # so that the loop's own teardown can end them


@pytest.mark.parametrize("hurry", [False, True], ids=["one request", "a second request"])
async def test_an_async_handler_given_up_on_is_left_to_lapse_not_released(
    stubborn: Stubborn, hurry: bool
) -> None:
    app = _app(grace_s=120 if hurry else GRACE_S)

    @app.handler("jobs")
    async def handle(message: Message) -> None:
        await stubborn.run()

    backend, ids = await _backend("jobs", 3)
    _, gave_up = await _given_up(app, backend, stubborn, 3, hurry=hurry)
    assert [(e["released"], e["left_to_lapse"]) for e in gave_up] == [(0, 3)]
    counts = backend.engine.counts("jobs")
    assert (counts.visible, counts.in_flight) == (0, 3)
    _assert_left_to_lapse(backend, "jobs", ids)
    # Another consumer gets none of them while the given-up coroutines exist.
    assert await backend.receive("jobs", max_messages=10, wait_s=0) == []
    # Until they lapse, after their last extension, with no release from this worker.
    await anyio.sleep(LEASE.extension_s)
    counts = backend.engine.counts("jobs")
    assert (counts.visible, counts.in_flight) == (3, 0)


async def test_a_batch_given_up_on_is_left_to_lapse_not_released(stubborn: Stubborn) -> None:
    app = _app()

    @app.batch_handler("jobs", max_size=3, max_wait_s=1)
    async def handle(messages: list[Message]) -> None:
        await stubborn.run_shielded()

    backend, ids = await _backend("jobs", 3)
    _, gave_up = await _given_up(app, backend, stubborn, 1)
    assert [(e["released"], e["left_to_lapse"]) for e in gave_up] == [(0, 3)]
    _assert_left_to_lapse(backend, "jobs", ids)
    assert await backend.receive("jobs", max_messages=10, wait_s=0) == []


async def test_a_fifo_groups_stuck_message_lapses_and_the_ones_behind_it_are_released(
    stubborn: Stubborn,
) -> None:
    app = _app()

    @app.handler("jobs.fifo")
    async def handle(message: Message) -> None:
        await stubborn.run()

    # Group a: n=0 stuck, n=1 and n=2 queued behind it, never started; group b: n=3 stuck.
    backend, ids = await _backend("jobs.fifo", 4, groups="aaab")
    _, gave_up = await _given_up(app, backend, stubborn, 2)
    assert [(e["released"], e["left_to_lapse"]) for e in gave_up] == [(2, 2)]
    _assert_left_to_lapse(backend, "jobs.fifo", [ids[0], ids[3]])
    for message_id in ids[1:3]:
        snapshot = backend.engine.peek("jobs.fifo", message_id)
        assert snapshot is not None and snapshot.state.value == "visible"
    counts = backend.engine.counts("jobs.fifo")
    assert (counts.visible, counts.in_flight) == (2, 2)
    # The group stays blocked behind its stuck message: nothing of it is delivered.
    assert await backend.receive("jobs.fifo", max_messages=10, wait_s=0) == []
