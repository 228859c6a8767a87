"""The console's status shows each queue's adaptive concurrency limit (issue 31)."""

from __future__ import annotations

import anyio
import pytest

from worker import Message, Worker, WorkerConfig
from worker.config import AdaptiveConcurrency, FlowControl
from worker.ops.history import History
from worker.ops.status import status
from worker.testing import run_worker

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]


async def test_the_status_names_the_adaptive_limit_of_each_queue() -> None:
    app = Worker(WorkerConfig(max_in_flight=40))

    @app.handler("adaptive", flow=FlowControl(adaptive=AdaptiveConcurrency(initial=12)))
    async def adaptive(message: Message) -> None:
        await anyio.sleep(0.1)

    @app.handler("plain")
    async def plain(message: Message) -> None:
        return None

    async with run_worker(app) as harness:
        queues = {
            row["queue"]: row
            for row in status(harness.supervisor, History(), started_at=0.0)["queues"]
        }
        flow = harness.supervisor.flows["adaptive"]
        assert flow.limit is not None
        assert queues["adaptive"]["concurrency_limit"] == flow.limit.current == 12
        assert queues["plain"]["concurrency_limit"] is None
