"""Deletes go out ten to a call as soon as ten are waiting, and what is left waits out the
linger (`settle_linger_s`) for company, never longer. Virtual time (looptime)."""

from __future__ import annotations

import anyio
import pytest

from tests.recording import RecordingBackend
from worker import Message, Worker, WorkerConfig
from worker.testing import run_worker
from worker.types import OutgoingMessage, QueueSpec

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]


async def test_a_full_batch_goes_at_once_and_the_rest_after_the_linger() -> None:
    app = Worker(WorkerConfig(max_in_flight=10, wait_s=20, settle_linger_s=1.0))

    @app.handler("jobs")
    async def job(message: Message) -> None:
        await anyio.sleep(0.01 * int(message.body["n"]))  # they end one after another

    backend = RecordingBackend()
    await backend.create_queue(QueueSpec("jobs"))
    for first, count in ((1, 10), (1, 3)):
        entries = [
            OutgoingMessage(entry_id=str(i), body=f'{{"n": {first + i}}}') for i in range(count)
        ]
        await backend.inner.send("jobs", entries)
    start = anyio.current_time()
    async with run_worker(app, backend=backend) as harness:
        await harness.wait_for_handled(13)
        await harness.wait_until_idle()
    deletes = [
        (call.entries, call.at - start) for call in backend.calls if call.operation == "delete"
    ]
    # The first receive's ten handlers end 10 ms apart: the tenth delete fills the batch,
    # which leaves at once (0.1 s), not at the first one's linger (1 s). The next receive
    # (at 0.1 s) brings three, done by 0.13 s; they wait the linger out from the first of
    # them (0.11 s + 1 s), then go.
    assert [(entries, round(at, 3)) for entries, at in deletes] == [(10, 0.1), (3, 1.11)]
