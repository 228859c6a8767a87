"""`TimedBackend` times a long poll apart from the calls whose time is the service's
latency (issue 29, 5): with 20 s waits, idle receives buried the milliseconds of every
other call in `api_call_duration_seconds` (virtual time: looptime)."""

from __future__ import annotations

import pytest

from backends.memory import MemoryBackend, MemoryEngine
from worker.clock import LoopClock
from worker.runtime.metrics import Metrics
from worker.runtime.timed_backend import TimedBackend
from worker.types import OutgoingMessage, QueueSpec

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]

COUNT = "lease_worker_api_call_duration_seconds_count"


async def test_a_long_poll_is_its_own_series_and_other_calls_are_latency() -> None:
    engine = MemoryEngine(LoopClock())
    engine.create_queue(QueueSpec("jobs"))
    metrics = Metrics()
    backend = TimedBackend(MemoryBackend(engine), metrics)
    assert await backend.receive("jobs", max_messages=10, wait_s=20) == []  # waits 20 s
    await backend.send("jobs", [OutgoingMessage(body="{}", entry_id="1")])
    assert len(await backend.receive("jobs", max_messages=10, wait_s=0)) == 1
    await backend.queue_info("jobs")
    counts = {
        (operation, wait): metrics.value(COUNT, queue="jobs", operation=operation, wait=wait)
        for operation in ("receive", "send", "queue_info")
        for wait in ("long_poll", "none")
    }
    assert counts == {
        ("receive", "long_poll"): 1,
        ("receive", "none"): 1,
        ("send", "long_poll"): 0,
        ("send", "none"): 1,
        ("queue_info", "long_poll"): 0,
        ("queue_info", "none"): 1,
    }
