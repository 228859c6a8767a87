"""Issue 12, defect 15 (start-up): a transient failure reading the queues' attributes is
retried with a doubling pause, within a bound; a fatal one is raised at once.

It used to end the worker at the first try (`lease-worker run` printed a 114-line traceback),
and a queue service that never answered hung start-up for ever.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

import anyio
import pytest
from structlog.testing import capture_logs

from tests.recording import RecordingBackend
from worker import (
    Message,
    QueueNotFound,
    Supervisor,
    TransientBackendError,
    Worker,
    WorkerConfig,
)
from worker.runtime.queues import STARTUP_CALL_TIMEOUTS
from worker.types import QueueInfo, QueueSpec

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]

CALL_TIMEOUT_S = 5.0


def _throttled() -> Exception:
    return TransientBackendError(
        "Rate exceeded", operation="GetQueueAttributes", queue="jobs", code="ThrottlingException"
    )


class StartupBackend(RecordingBackend):
    """The memory backend, with `queue_info` answered by `answer` for its first calls."""

    def __init__(
        self, answer: Callable[[], Coroutine[Any, Any, None]], failures: int | None
    ) -> None:
        super().__init__()
        self._answer = answer
        self._failures = failures
        self.attempts: list[float] = []

    async def queue_info(self, queue: str) -> QueueInfo:
        self.attempts.append(anyio.current_time())
        if self._failures is None or len(self.attempts) <= self._failures:
            await self._answer()
        return await super().queue_info(queue)


async def _supervisor(
    answer: Callable[[], Coroutine[Any, Any, None]], failures: int | None
) -> tuple[Supervisor, StartupBackend]:
    app = Worker(WorkerConfig(call_timeout_s=CALL_TIMEOUT_S))

    @app.handler("jobs")
    async def job(message: Message) -> None:
        return None

    backend = StartupBackend(answer, failures)
    await backend.create_queue(QueueSpec("jobs"))
    return Supervisor(app, backend), backend


async def _raise_throttled() -> None:
    raise _throttled()


async def test_a_transient_failure_at_start_up_is_retried_with_a_doubling_pause() -> None:
    supervisor, backend = await _supervisor(_raise_throttled, failures=3)
    started = anyio.current_time()
    with capture_logs() as logs:
        await supervisor.prepare()
    assert supervisor.queues["jobs"].name == "jobs"
    assert [round(at - started, 3) for at in backend.attempts] == [0, 0.5, 1.5, 3.5]
    retries = [e for e in logs if e["event"] == "queue.check_failed"]
    assert [(e["attempt"], e["retry_in_s"]) for e in retries] == [(1, 0.5), (2, 1.0), (3, 2.0)]
    assert {e["code"] for e in retries} == {"ThrottlingException"}


async def test_start_up_gives_up_after_its_bound_with_one_clear_error() -> None:
    supervisor, backend = await _supervisor(_raise_throttled, failures=None)
    started = anyio.current_time()
    with pytest.raises(TransientBackendError) as caught:
        await supervisor.prepare()
    took = anyio.current_time() - started
    # Pauses 0.5, 1, 2, 4, 8, 16 s; the next (30 s) would end past 12 call timeouts (60 s).
    assert len(backend.attempts) == 7
    assert took == pytest.approx(31.5)
    assert took <= STARTUP_CALL_TIMEOUTS * CALL_TIMEOUT_S
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("queue 'jobs': no answer from the queue service after 7 attempts")
    assert caught.value.code == "ThrottlingException"


async def test_a_queue_service_that_never_answers_at_start_up_is_bounded_too() -> None:
    supervisor, backend = await _supervisor(anyio.sleep_forever, failures=None)
    started = anyio.current_time()
    with anyio.fail_after(600), pytest.raises(TransientBackendError) as caught:
        await supervisor.prepare()
    # Each attempt is abandoned after the call timeout: 0-5, 5.5-10.5, 11.5-16.5, 18.5-23.5,
    # 27.5-32.5, 40.5-45.5; the next pause (16 s) would end past 60 s.
    assert [round(at - started, 3) for at in backend.attempts] == [0, 5.5, 11.5, 18.5, 27.5, 40.5]
    assert anyio.current_time() - started == pytest.approx(45.5)
    assert caught.value.code == "Timeout"


async def test_a_fatal_error_at_start_up_is_raised_at_once() -> None:
    async def missing() -> None:
        raise QueueNotFound("no such queue", operation="GetQueueAttributes", queue="jobs")

    supervisor, backend = await _supervisor(missing, failures=None)
    started = anyio.current_time()
    with pytest.raises(QueueNotFound):
        await supervisor.prepare()
    assert backend.attempts == [started]


async def test_a_shutdown_request_ends_the_start_up_retries() -> None:
    supervisor, backend = await _supervisor(_raise_throttled, failures=None)
    started = anyio.current_time()
    raised: list[BaseException] = []

    async def prepare() -> None:
        try:
            await supervisor.prepare()
        except TransientBackendError as error:
            raised.append(error)

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(prepare)
        await anyio.sleep(2)  # in the pause after the third attempt (at 1.5, for 2 s)
        supervisor.request_shutdown()
    assert len(raised) == 1
    assert anyio.current_time() - started == pytest.approx(2)
    assert len(backend.attempts) == 3
