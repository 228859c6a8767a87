"""A delete or release goes on the wire only while its lease is still the worker's.

The settler checks each entry's lease against the clock right before each call goes out,
retries included: a settlement that waited through a stall of the process (SIGSTOP, a long
GC) past its lease's deadline is dropped, never sent, since the message may be another
consumer's by then, and the service could honour the stale handle (make that consumer's
message visible again, or delete it). The message simply comes back at the service.
Virtual time (looptime); `FaultyBackend.stall` freezes the event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import MutableMapping, Sequence
from typing import Any

import anyio
import pytest
import structlog

from backends.memory import MemoryBackend, MemoryEngine
from backends.memory.dialects import SMQ_DIALECT
from backends.memory.engine import QueueCounts
from worker import LeaseConfig, Message, Outcome, Worker, WorkerConfig
from worker.clock import LoopClock
from worker.testing import FaultyBackend, run_worker
from worker.types import BatchResult, Deletion, OutgoingMessage, QueueSpec, VisibilityChange

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]

LEASE = LeaseConfig(visibility_s=10, extension_s=10, renew_margin_s=2)
#: Longer than any lease's time left: every lease held across it lapses.
STALL_S = 15.0
DROPPED = "lease_worker_settlements_dropped_total"


class HandleLog(FaultyBackend[MemoryBackend]):
    """A `FaultyBackend` that also records the receipt handle of every delete and release
    entry put on the wire, and can stall the process once a delete's answer was given up."""

    def __init__(self, dialect: str = "sqs") -> None:
        engine = MemoryEngine(LoopClock(), dialect=SMQ_DIALECT) if dialect == "smq" else None
        super().__init__(MemoryBackend(engine) if engine is not None else MemoryBackend())
        #: (operation, loop time, receipt handle), one per entry sent.
        self.sent: list[tuple[str, float, str]] = []
        #: Seconds to stall right after the first delete call is abandoned (no answer).
        self.stall_after_abandoned_delete_s = 0.0

    async def delete(self, queue: str, entries: Sequence[Deletion]) -> BatchResult:
        self.sent.extend(("delete", anyio.current_time(), e.receipt_handle) for e in entries)
        try:
            return await super().delete(queue, entries)
        except asyncio.CancelledError:  # the settler gave up waiting for the answer
            if self.stall_after_abandoned_delete_s:
                self.stall(self.stall_after_abandoned_delete_s)
                self.stall_after_abandoned_delete_s = 0.0
            raise

    async def release(self, queue: str, entries: Sequence[VisibilityChange]) -> BatchResult:
        self.sent.extend(("release", anyio.current_time(), e.receipt_handle) for e in entries)
        return await super().release(queue, entries)


async def _one_message(backend: HandleLog) -> None:
    await backend.create_queue(QueueSpec("jobs", visibility_timeout_s=LEASE.visibility_s))
    await backend.inner.send("jobs", [OutgoingMessage(body='{"card": "4111"}', entry_id="0")])


def _dropped_events(logs: Sequence[MutableMapping[str, Any]]) -> list[MutableMapping[str, Any]]:
    return [entry for entry in logs if entry["event"] == "settle.dropped"]


@pytest.mark.parametrize("dialect", ["sqs", "smq"])
@pytest.mark.parametrize(("first_run", "action"), [("fails", "release"), ("succeeds", "delete")])
async def test_a_settlement_queued_before_a_stall_past_its_deadline_is_never_sent(
    first_run: str, action: str, dialect: str
) -> None:
    """The first run ends (a failure queues a release, a success a delete), and the process
    stalls before the settler sends it, past the lease's deadline: the stale handle never
    goes out; the message comes back and its next delivery is handled and deleted."""
    backend = HandleLog(dialect)
    app = Worker(WorkerConfig(lease=LEASE, max_in_flight=1, wait_s=1))

    @app.handler("jobs", on_error="release")
    async def job(message: Message) -> None:
        if message.receive_count == 1:
            backend.stall(STALL_S)  # the process stops once this run has ended
            if first_run == "fails":
                raise RuntimeError("first run fails")

    await _one_message(backend)
    with structlog.testing.capture_logs() as logs:
        async with run_worker(app, backend=backend) as harness:
            [first] = await harness.wait_for_handled(1)  # the stall is over by now
            await harness.supervisor.settler.flush()  # what was queued: sent, or dropped
            stale = first.message.receipt_handle
            assert [entry for entry in backend.sent if entry[2] == stale] == []
            first, second = await harness.wait_for_handled(2)  # the message came back
            await harness.wait_until_idle()
            dropped = harness.metrics.value(DROPPED, queue="jobs", action=action, reason="lapsed")
            others = sum(
                harness.metrics.value(DROPPED, queue="jobs", action=other, reason="lapsed")
                for other in ("delete", "release")
                if other != action
            )
            lost = harness.metrics.value(
                "lease_worker_leases_lost_total", queue="jobs", reason="lapsed"
            )
    assert [(operation, handle) for operation, _, handle in backend.sent] == [
        ("delete", second.message.receipt_handle)
    ]
    assert first.settlement.action.value == action  # what was decided, and then dropped
    assert (second.message.receive_count, second.outcome) == (2, Outcome.SUCCEEDED)
    assert (dropped, others, lost) == (1.0, 0.0, 1.0)
    [event] = _dropped_events(logs)
    assert event == {
        "event": "settle.dropped",
        "log_level": "warning",
        "queue": "jobs",
        "message_id": first.message.message_id,
        "action": action,
        "reason": "lapsed",
    }
    assert backend.inner.engine.counts("jobs") == QueueCounts(0, 0, 0)


async def test_a_delete_whose_answer_was_lost_is_not_retried_after_its_deadline() -> None:
    """The delete lands but its answer never comes; the settler gives up on it and waits
    out its retry pause, and the process stalls past the lease's deadline meanwhile: the
    retry must not go out with the lapsed handle (the message may be someone else's)."""
    backend = HandleLog()
    backend.lose("delete", times=1)
    backend.stall_after_abandoned_delete_s = STALL_S
    app = Worker(WorkerConfig(lease=LEASE, max_in_flight=1, wait_s=1))
    runs: list[int] = []

    @app.handler("jobs")
    async def job(message: Message) -> None:
        runs.append(message.receive_count)

    await _one_message(backend)
    with structlog.testing.capture_logs() as logs:
        async with run_worker(app, backend=backend) as harness:
            [handled] = await harness.wait_for_handled(1)
            await harness.wait_until_idle()
            dropped = harness.metrics.value(DROPPED, queue="jobs", action="delete", reason="lapsed")
            calls = harness.metrics.value(
                "lease_worker_settle_calls_total", queue="jobs", action="delete"
            )
    assert backend.stall_after_abandoned_delete_s == 0.0  # the stall did happen
    handle = handled.message.receipt_handle
    # The first call only: its retry never went out.
    assert [(operation, sent) for operation, _, sent in backend.sent] == [("delete", handle)]
    assert calls == 1.0
    assert dropped == 1.0
    assert [e["action"] for e in _dropped_events(logs)] == ["delete"]
    assert runs == [1]
    # The first call landed: the message is gone, as at-least-once allows either way.
    assert backend.inner.engine.counts("jobs") == QueueCounts(0, 0, 0)
