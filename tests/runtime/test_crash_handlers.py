"""What a handler raises is its own message's failure, never the worker's end.

Issue 12, defect 5: a BaseException that is not a cancellation (SystemExit, KeyboardInterrupt,
a custom one) went through the runtime and ended the worker, stranding every message in
flight; `sys.exit()` in a synchronous handler ended `lease-worker run` with status 0.
Defect 12: a handler raising CancelledError itself (not a cancellation the runtime asked
for) was released every time, without a log line, until the DLQ. A synchronous handler
raising StopIteration fails its message like any other exception.
"""

from __future__ import annotations

import asyncio
import sys

import anyio
import pytest
from structlog.testing import capture_logs

from backends.memory import MemoryBackend
from tests.recording import RecordingBackend
from worker import (
    Backoff,
    ErrorPolicy,
    LeaseConfig,
    Message,
    OnError,
    Outcome,
    Worker,
    WorkerConfig,
)
from worker.core.settlement import Action, Settlement
from worker.testing import run_worker
from worker.types import OutgoingMessage, QueueSpec

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]

LEASE = LeaseConfig(visibility_s=30, extension_s=30, renew_margin_s=10)
#: The failed message comes back after 60 s: long enough to see the next one handled first.
POLICY = ErrorPolicy(on_error=OnError.BACKOFF, backoff=Backoff(base_s=60))


class Poison(BaseException):
    """An application's own BaseException subclass."""


def _raise_system_exit() -> None:
    sys.exit(3)


def _raise_keyboard_interrupt() -> None:
    raise KeyboardInterrupt


def _raise_poison() -> None:
    raise Poison("not an Exception")


RAISERS = {
    "SystemExit": _raise_system_exit,
    "KeyboardInterrupt": _raise_keyboard_interrupt,
    "custom BaseException": _raise_poison,
}


async def _backend(count: int) -> MemoryBackend:
    backend = MemoryBackend()
    await backend.create_queue(QueueSpec("jobs", visibility_timeout_s=30))
    for n in range(count):
        await backend.send("jobs", [OutgoingMessage(body=f'{{"n": {n}}}')])
    return backend


def _app(max_in_flight: int = 2) -> Worker:
    return Worker(WorkerConfig(lease=LEASE, max_in_flight=max_in_flight, wait_s=20))


async def _prepare(backend: RecordingBackend, queue: str, count: int) -> list[str]:
    await backend.create_queue(QueueSpec(queue, visibility_timeout_s=30))
    ids = []
    for i in range(count):
        result = await backend.inner.send(queue, [OutgoingMessage(body=f'{{"n": {i}}}')])
        ids.append(result.message_ids["0"])
    return ids


@pytest.mark.parametrize("raiser", list(RAISERS))
@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_a_base_exception_from_a_handler_fails_only_its_message(
    raiser: str, kind: str
) -> None:
    app = _app()
    finished: list[int] = []

    async def handle_async(message: Message) -> None:
        if message.body["n"] == 0:
            RAISERS[raiser]()
        await anyio.sleep(1)  # the innocent one is still running when the other fails
        finished.append(message.body["n"])

    def handle_sync(message: Message) -> None:
        if message.body["n"] == 0:
            RAISERS[raiser]()
        finished.append(message.body["n"])

    app.handler("jobs", on_error=POLICY)(handle_async if kind == "async" else handle_sync)
    backend = await _backend(3)
    with capture_logs() as logs:
        async with run_worker(app, backend=backend) as harness:
            with anyio.fail_after(30):
                records = await harness.wait_for_handled(3)
                await harness.wait_until_idle()
    by_n = {record.message.raw_body: record for record in records}
    poisoned = by_n['{"n": 0}']
    assert poisoned.outcome is Outcome.FAILED
    assert poisoned.settlement == Settlement(Action.RELEASE, 60)
    assert sorted(finished) == [1, 2]
    assert [by_n[f'{{"n": {n}}}'].outcome for n in (1, 2)] == [Outcome.SUCCEEDED] * 2
    counts = backend.engine.counts("jobs")
    assert (counts.visible, counts.in_flight) == (0, 1)  # the poisoned one, for 60 s
    failures = [e for e in logs if e["event"] == "handler.failed"]
    assert len(failures) == 1
    assert failures[0]["log_level"] == "error"


@pytest.mark.parametrize("how", ["raised", "awaited a cancelled future"])
async def test_a_cancelled_error_the_handler_raised_itself_is_a_failure_with_a_log_line(
    how: str,
) -> None:
    app = _app()

    @app.handler("jobs", on_error=POLICY)
    async def cancels_itself(message: Message) -> None:
        if how == "raised":
            raise asyncio.CancelledError
        future = asyncio.get_running_loop().create_future()
        future.cancel()  # e.g. a library's request, cancelled by the library itself
        await future

    backend = await _backend(1)
    with capture_logs() as logs:
        async with run_worker(app, backend=backend) as harness:
            with anyio.fail_after(30):
                [record] = await harness.wait_for_handled(1)
                await harness.wait_until_idle()
    assert record.outcome is Outcome.FAILED
    assert record.settlement == Settlement(Action.RELEASE, 60)
    lines = [e for e in logs if e["event"] == "handler.raised_cancelled_error"]
    assert len(lines) == 1
    assert lines[0]["log_level"] == "error"
    assert lines[0]["handler"].endswith(".cancels_itself")
    assert lines[0]["receive_count"] == 1
    snapshot = backend.engine.peek("jobs", record.message.message_id)
    assert snapshot is not None and snapshot.receive_count == 1


# Found by review: a synchronous handler raising StopIteration never finishes.
async def test_sync_handler_raising_stop_iteration_fails_normally() -> None:
    app = _app(max_in_flight=1)

    @app.handler("jobs")
    def job(message: Message) -> None:
        next(iter([]))

    backend = RecordingBackend()
    await _prepare(backend, "jobs", 1)
    async with run_worker(app, backend=backend) as harness:
        with anyio.fail_after(600):
            [record] = await harness.wait_for_handled(1)
    assert record.outcome is Outcome.FAILED
