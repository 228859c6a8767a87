"""The operations metrics, unchanged, on an SMQ queue: depth by state from GetQueueAttributes'
ActiveMessages / InactiveMessages / DelayMessages, and the dead-letter queue's depth from the
queue's DlqPolicy (serve-smq, through `SmqBackend`; virtual time)."""

from __future__ import annotations

import anyio
import pytest

from tests.backends.smq.serving import smq_pair
from worker import Message, Worker, WorkerConfig
from worker.testing import run_worker
from worker.types import OutgoingMessage, QueueSpec, RedrivePolicy

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]


async def test_queue_depth_and_dead_letter_depth_on_smq() -> None:
    app = Worker(WorkerConfig(wait_s=20, max_in_flight=1))
    release = anyio.Event()

    @app.handler("jobs")
    async def handle(message: Message) -> None:
        await release.wait()

    async with smq_pair() as (backend, engine):
        engine.create_queue(QueueSpec("jobs-dlq"))
        engine.create_queue(QueueSpec("jobs", redrive=RedrivePolicy("jobs-dlq", 3)))
        await backend.send(
            "jobs-dlq", [OutgoingMessage(body="{}", entry_id=str(n)) for n in range(2)]
        )
        await backend.send("jobs", [OutgoingMessage(body="{}", entry_id=str(n)) for n in range(3)])
        await backend.send("jobs", [OutgoingMessage(body="{}", delay_s=600)])
        async with run_worker(app, backend=backend, sample_queues_every_s=30) as harness:
            metrics = harness.supervisor.metrics
            await anyio.sleep(45)  # samples at 0 and 30 s, one message held since 0 s
            depth = {
                state: metrics.value("lease_worker_queue_messages", queue="jobs", state=state)
                for state in ("visible", "in_flight", "delayed")
            }
            dead = metrics.value(
                "lease_worker_dead_letter_queue_messages",
                queue="jobs",
                dead_letter_queue="jobs-dlq",
            )
            release.set()
    assert depth == {"visible": 2, "in_flight": 1, "delayed": 1}
    assert dead == 2
