"""Receivers: with several receiving side by side (`receive_concurrency`), every one of them
goes back to long-polling once slots are free again.

Virtual time (looptime), the whole runtime on the in-memory engine.
"""

from __future__ import annotations

import anyio
import pytest

from backends.memory import MemoryBackend
from tests.recording import RecordingBackend
from worker import Message, OutgoingMessage, TransientBackendError, Worker, WorkerConfig
from worker.testing import Fate, FaultyBackend, run_worker
from worker.types import QueueSpec

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]


async def _prepare(backend: RecordingBackend, queue: str, count: int) -> list[str]:
    await backend.create_queue(QueueSpec(queue, visibility_timeout_s=30))
    ids = []
    for i in range(count):
        result = await backend.inner.send(queue, [OutgoingMessage(body=f'{{"n": {i}}}')])
        ids.append(result.message_ids["0"])
    return ids


# Found by review (slots): with receive_concurrency > 1, receivers that waited for a free
# slot together are never all woken: all but one stay blocked for good.
async def test_every_receiver_resumes_after_the_queue_was_full() -> None:
    app = Worker(WorkerConfig(max_in_flight=40, receive_concurrency=4, wait_s=20))
    polling = [0]
    most = [0]

    class Counting(RecordingBackend):
        async def receive(self, queue, **kw):  # type: ignore[no-untyped-def]
            polling[0] += 1
            most[0] = max(most[0], polling[0])
            try:
                return await super().receive(queue, **kw)
            finally:
                polling[0] -= 1

    @app.handler("jobs")
    async def job(message: Message) -> None:
        await anyio.sleep(5)

    backend = Counting()
    await _prepare(backend, "jobs", 40)  # fills all slots: every receiver waits for a slot
    async with run_worker(app, backend=backend) as harness:
        await harness.wait_for_handled(40)
        await anyio.sleep(1)  # slots free, queue empty: every receiver should be long-polling
        now_polling = polling[0]
        harness.shutdown()
    assert now_polling == 4, (now_polling, most[0])


async def test_readiness_returns_within_one_receive_of_the_service_coming_back() -> None:
    """Issue 28 (9): after failed receives the next poll was a long one again, so readiness
    (`reachable`, behind /readyz) came back only when that empty poll answered, `wait_s`
    (20 s) after the service did."""
    backend = FaultyBackend(MemoryBackend())
    await backend.create_queue(QueueSpec("jobs"))
    backend.refuse("receive", TransientBackendError("down", code="ServiceUnavailable"), times=3)
    app = Worker(WorkerConfig(wait_s=20))

    @app.handler("jobs")
    async def job(message: Message) -> None:
        pass

    async with run_worker(app, backend=backend) as harness:
        receiver = harness.supervisor.receivers["jobs"]
        with anyio.fail_after(60):
            while len(backend.calls) < 4 or not receiver.reachable:  # noqa: ASYNC110
                await anyio.sleep(0.05)  # virtual time; readiness has no event to wait on
        refused = [c for c in backend.calls if c.fate is Fate.REFUSED]
        back_at = anyio.current_time()
    assert len(refused) == 3
    assert back_at - refused[-1].at < 5  # the pause after the last failure, then one answer
