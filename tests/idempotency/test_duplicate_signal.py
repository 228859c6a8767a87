"""`Duplicate`: a handler (or the idempotency guard) says its message was handled before.

The message is deleted, counted as the outcome `duplicate` (not `discarded`), and on a FIFO
queue the rest of its group goes on in order.
"""

from __future__ import annotations

import pytest

from worker import Duplicate, LeaseConfig, Message, Outcome, Worker, WorkerConfig
from worker.config import ErrorPolicy
from worker.core.settlement import Action, settlement_for
from worker.testing import run_worker
from worker.types import OutgoingMessage, QueueSpec

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]


async def test_a_duplicate_is_deleted() -> None:
    settlement = settlement_for(
        Outcome.DUPLICATE, policy=ErrorPolicy.parse("backoff"), receive_count=3
    )
    assert settlement.action is Action.DELETE


async def test_duplicate_deletes_and_counts_outcome_duplicate() -> None:
    app = Worker(WorkerConfig(lease=LeaseConfig(visibility_s=30)))

    @app.handler("jobs")
    async def job(message: Message) -> None:
        raise Duplicate("seen")

    async with run_worker(app) as harness:
        message_id = await harness.send("jobs", {"n": 1})
        [record] = await harness.wait_for_handled(1)
        await harness.wait_until_idle()
        assert harness.engine.peek("jobs", message_id) is None
    assert record.outcome is Outcome.DUPLICATE
    assert (
        harness.metrics.value(
            "lease_worker_messages_handled_total", queue="jobs", outcome="duplicate"
        )
        == 1
    )
    assert (
        harness.metrics.value(
            "lease_worker_messages_handled_total", queue="jobs", outcome="discarded"
        )
        == 0
    )


async def test_a_duplicate_keeps_its_fifo_group_going() -> None:
    app = Worker(WorkerConfig(lease=LeaseConfig(visibility_s=30)))
    seen: list[int] = []

    @app.handler("jobs.fifo")
    async def job(message: Message) -> None:
        seen.append(message.body["n"])
        if message.body["n"] == 1:
            raise Duplicate()

    async with run_worker(app) as harness:
        await harness.backend.create_queue(QueueSpec("jobs.fifo"))  # type: ignore[attr-defined]
        for n in (1, 2, 3):
            entry = OutgoingMessage(body=f'{{"n": {n}}}', group_id="g", deduplication_id=str(n))
            assert not (await harness.backend.send("jobs.fifo", [entry])).failed
        records = await harness.wait_for_handled(3)
    assert seen == [1, 2, 3]
    assert [r.outcome for r in records] == [Outcome.DUPLICATE, Outcome.SUCCEEDED, Outcome.SUCCEEDED]
