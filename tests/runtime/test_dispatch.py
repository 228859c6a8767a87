"""Dispatch: a received message reaches the handler registered for its queue, by name or by
queue URL, and a failure while dispatching one message releases that message alone, once.

Virtual time (looptime), the whole runtime on the in-memory engine.
"""

from __future__ import annotations

from typing import Any

import pytest
from structlog.testing import capture_logs

from tests.recording import RecordingBackend
from worker import Message, Outcome, OutgoingMessage, Worker, WorkerConfig
from worker.testing import run_worker
from worker.types import QueueSpec

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]


async def _send(backend: RecordingBackend, queue: str, count: int) -> list[str]:
    ids = []
    for i in range(count):
        result = await backend.inner.send(queue, [OutgoingMessage(body=f'{{"n": {i}}}')])
        ids.append(result.message_ids["0"])
    return ids


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
