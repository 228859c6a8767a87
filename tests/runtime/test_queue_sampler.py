"""Queue depth, dead-letter depth, oldest age and the in-flight quota, sampled at a bounded
rate (virtual time: looptime)."""

from __future__ import annotations

from dataclasses import replace

import anyio
import pytest

from backends.memory import MemoryBackend
from worker import Message, Worker, WorkerConfig
from worker.testing import run_worker
from worker.types import OutgoingMessage, QueueInfo, QueueSpec, RedrivePolicy

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]


async def test_depths_age_and_quota_every_interval_one_call_per_queue() -> None:
    app = Worker(WorkerConfig(wait_s=20))
    release = anyio.Event()

    @app.handler("jobs")
    async def handle(message: Message) -> None:
        await release.wait()

    backend = MemoryBackend()
    await backend.create_queue(QueueSpec("jobs-dlq"))
    await backend.create_queue(QueueSpec("jobs", redrive=RedrivePolicy("jobs-dlq", 3)))
    await backend.send("jobs-dlq", [OutgoingMessage(body="{}", entry_id=str(n)) for n in range(2)])
    async with run_worker(app, backend=backend, sample_queues_every_s=30) as harness:
        metrics = harness.supervisor.metrics
        await anyio.sleep(100)  # samples at 0, 30, 60 and 90 s
        await harness.send("jobs", {"n": 1})
        await anyio.sleep(45)  # the message sits in flight 45 s: samples at 120 s
        held = metrics.value("lease_worker_queue_messages", queue="jobs", state="in_flight")
        dead = metrics.value(
            "lease_worker_dead_letter_queue_messages", queue="jobs", dead_letter_queue="jobs-dlq"
        )
        age = metrics.value("lease_worker_queue_oldest_message_age_seconds", queue="jobs")
        quota = metrics.value("lease_worker_queue_in_flight_quota", queue="jobs")
        calls = metrics.value(
            "lease_worker_api_call_duration_seconds_count",
            queue="jobs",
            operation="queue_info",
            wait="none",
        )
        dlq_calls = metrics.value(
            "lease_worker_api_call_duration_seconds_count",
            queue="jobs-dlq",
            operation="queue_info",
            wait="none",
        )
        release.set()
    assert (held, dead, quota) == (1, 2, 120_000)
    assert 20 <= age <= 25  # sent at 100 s, sampled at 120 s
    assert calls == 1 + 5  # the start-up check, then samples at 0, 30, 60, 90, 120 s
    assert dlq_calls == 5


class LikeSqs(MemoryBackend):
    """The engine, telling queue attributes as SQS does: no oldest message age."""

    async def queue_info(self, queue: str) -> QueueInfo:
        return replace(await super().queue_info(queue), oldest_message_age_s=None)


async def test_without_the_services_figure_the_age_is_the_oldest_received() -> None:
    app = Worker(WorkerConfig(wait_s=20))
    release = anyio.Event()

    @app.handler("jobs")
    async def handle(message: Message) -> None:
        await release.wait()

    backend = LikeSqs()
    await backend.create_queue(QueueSpec("jobs"))
    await backend.send("jobs", [OutgoingMessage(body="{}")])
    async with run_worker(app, backend=backend, sample_queues_every_s=30) as harness:
        # Under virtual time a LoopClock's wall offset depends on the virtual time of its
        # first use: fix the worker's now, at 0 s, as the engine's was at the send.
        harness.supervisor.clock.wall_offset_s()
        metrics = harness.supervisor.metrics
        await anyio.sleep(31)  # received at 0 s; the sample at 30 s takes it
        age = metrics.value("lease_worker_queue_oldest_message_age_seconds", queue="jobs")
        await anyio.sleep(30)  # nothing received since: the last value stays
        kept = metrics.value("lease_worker_queue_oldest_message_age_seconds", queue="jobs")
        release.set()
    assert 29 <= age <= 31 and kept == age
