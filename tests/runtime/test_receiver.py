"""Receivers: with several receiving side by side (`receive_concurrency`), every one of them
goes back to long-polling once slots are free again.

Virtual time (looptime), the whole runtime on the in-memory engine.
"""

from __future__ import annotations

import anyio
import pytest

from tests.recording import RecordingBackend
from worker import Message, OutgoingMessage, Worker, WorkerConfig
from worker.testing import run_worker
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
