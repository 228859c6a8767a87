"""A release whose answer never came may have landed, and is not sent again.

A release makes the message visible: once it has landed, another consumer may receive the
message, and a second release with the old handle could end that consumer's lease (SQS does
not always refuse a stale handle). So a release that got no answer is given up on; its
renewals have stopped, so the message is visible at its deadline at the latest.
"""

from __future__ import annotations

import anyio
import pytest

from backends.memory import MemoryBackend
from worker import (
    LeaseConfig,
    Message,
    Outcome,
    Retry,
    TransientBackendError,
    Worker,
    WorkerConfig,
)
from worker.config import FlowControl, TenantCap
from worker.testing import FaultyBackend, run_worker
from worker.types import OutgoingMessage, QueueSpec

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]


async def _run(
    backend: FaultyBackend[MemoryBackend], *, wait_s: int = 1
) -> tuple[list[Outcome], list[int]]:
    """A message whose first run fails (released at once) and second succeeds: the outcomes,
    and the receive count each run saw."""
    config = WorkerConfig(lease=LeaseConfig(visibility_s=10), call_timeout_s=1, wait_s=wait_s)
    app = Worker(config)
    runs: list[int] = []

    @app.handler("jobs", on_error="release")
    async def job(message: Message) -> None:
        runs.append(message.receive_count)
        if len(runs) == 1:
            raise RuntimeError("the first run fails")

    await backend.create_queue(QueueSpec("jobs", visibility_timeout_s=10))
    await backend.inner.send("jobs", [OutgoingMessage(body="{}")])
    async with run_worker(app, backend=backend) as harness:
        handled = await harness.wait_for_handled(2)
        await anyio.sleep(15)  # any retry would have gone out by now
    return [record.outcome for record in handled], runs


async def test_a_release_whose_answer_was_lost_is_not_sent_again() -> None:
    backend = FaultyBackend(MemoryBackend())
    backend.lose("release")  # lands (the message is visible at once), never answered
    outcomes, _ = await _run(backend)
    assert outcomes == [Outcome.FAILED, Outcome.SUCCEEDED]
    assert [call.operation for call in backend.calls].count("release") == 1


async def test_a_release_refused_before_it_was_sent_is_retried() -> None:
    backend = FaultyBackend(MemoryBackend())
    backend.refuse("release", TransientBackendError("throttled", code="Throttling"))
    outcomes, _ = await _run(backend)
    assert outcomes == [Outcome.FAILED, Outcome.SUCCEEDED]
    assert [call.operation for call in backend.calls].count("release") == 2


async def test_a_released_message_received_again_before_the_answer_runs_on_that_receive() -> None:
    """The worker's own long poll takes the message its release just made visible, before
    the release's answer is back: that receive is a new delivery, run at once, not adopted
    into the releasing lease and released again (which would cost each failure two receives
    toward the dead-letter queue)."""
    backend = FaultyBackend(MemoryBackend())
    backend.late("release", by_s=1.0)  # lands at once; its answer comes a second later
    outcomes, receive_counts = await _run(backend, wait_s=5)  # a long poll waits meanwhile
    assert outcomes == [Outcome.FAILED, Outcome.SUCCEEDED]
    assert receive_counts == [1, 2]
    assert [call.operation for call in backend.calls].count("release") == 1


async def test_a_copy_run_during_its_release_leaves_the_tenant_cap_counting_true() -> None:
    """The releasing lease ends when its copy arrives, so the tenant cap (which counts by
    message id) sees one lease of the message at a time: once the copy has run, the tenant
    has nothing running, and its next message runs at once instead of being released."""
    backend = FaultyBackend(MemoryBackend())
    backend.late("release", by_s=1.0)
    cap = FlowControl(tenants=TenantCap(per_tenant=1, release_s=30))
    app = Worker(WorkerConfig(lease=LeaseConfig(visibility_s=10), wait_s=5, flow=cap))
    runs: list[str] = []

    @app.handler("jobs", on_error="release")
    async def job(message: Message) -> None:
        runs.append(message.body["n"])
        if len(runs) == 1:
            raise RuntimeError("the first run fails")

    await backend.create_queue(QueueSpec("jobs", visibility_timeout_s=10))
    first = OutgoingMessage(body='{"n": "first"}', group_id="t")
    await backend.inner.send("jobs", [first])
    async with run_worker(app, backend=backend) as harness:
        await harness.wait_for_handled(2)  # failed, then its copy succeeded
        await anyio.sleep(2)  # the late release answer has come back
        await backend.inner.send("jobs", [OutgoingMessage(body='{"n": "next"}', group_id="t")])
        handled = await harness.wait_for_handled(3)
        released = harness.metrics.value("lease_worker_flow_tenant_released_total", queue="jobs")
    assert runs == ["first", "first", "next"]
    assert handled[-1].outcome is Outcome.SUCCEEDED
    assert released == 0


async def test_a_release_on_the_wire_when_the_worker_is_cancelled_is_not_sent_again() -> None:
    """Cancelled from outside, the worker flushes what it has not sent; a release already on
    the wire may have landed, and is not sent again with its handle."""
    backend = FaultyBackend(MemoryBackend())
    backend.lose("release")  # lands, never answered: still on the wire at the cancel
    app = Worker(WorkerConfig(lease=LeaseConfig(visibility_s=10), wait_s=1))

    @app.handler("jobs")
    async def job(message: Message) -> None:
        raise Retry(after_s=60)  # released for a minute: no copy comes back meanwhile

    await backend.create_queue(QueueSpec("jobs", visibility_timeout_s=10))
    await backend.inner.send("jobs", [OutgoingMessage(body="{}")])
    with anyio.move_on_after(3):  # the release goes out at once; cancelled 3 s later
        async with run_worker(app, backend=backend):
            await anyio.sleep_forever()
    assert [call.operation for call in backend.calls].count("release") == 1
