"""A message that always fails, on a queue without a dead-letter queue (issue 28, item 1).

The default error policy released every failure with visibility 0: one undecodable body came
back as fast as the engine answered (3,604 receives in 192 s), an error line each, and the
start-up check said nothing for the default policy. Now the default backs off (the first
retry at once, then a growing, jittered delay) and start-up warns, once, in one line, for any
policy on a queue without a dead-letter queue. Virtual time (looptime): a minute is instant.
"""

from __future__ import annotations

import itertools
from collections.abc import MutableMapping, Sequence
from typing import Any

import anyio
import pytest
from structlog.testing import capture_logs

from backends.memory import MemoryBackend, MemoryEngine
from backends.memory.dialects import SMQ_DIALECT
from worker import (
    ErrorPolicy,
    LeaseConfig,
    Message,
    Outcome,
    ShutdownConfig,
    Worker,
    WorkerConfig,
)
from worker.clock import LoopClock
from worker.core.settlement import settlement_for
from worker.testing import Handled, run_worker
from worker.types import QueueSpec, ReceivedMessage, RedrivePolicy

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]

LEASE = LeaseConfig(visibility_s=30, extension_s=30, renew_margin_s=10)
NO_DLQ = (
    "queue 'jobs' has no dead-letter queue: a message that always fails is received again "
    "and again until the retention period ends (error policy {}); give the queue a "
    "RedrivePolicy (a dead-letter queue and maxReceiveCount)"
)


class TimedBackend(MemoryBackend):
    """The in-memory backend, noting when each message was handed out."""

    def __init__(self, engine: MemoryEngine | None = None) -> None:
        super().__init__(engine)
        self.received_at: list[float] = []

    async def receive(
        self, queue: str, *, max_messages: int, wait_s: float, visibility_s: int | None = None
    ) -> Sequence[ReceivedMessage]:
        got = await super().receive(
            queue, max_messages=max_messages, wait_s=wait_s, visibility_s=visibility_s
        )
        self.received_at += [anyio.current_time()] * len(got)
        return got


def _app(**handler: Any) -> Worker:
    # grace_s=0: the poll in flight at the end is cut, not waited for to its 20 s deadline.
    # The engine's long poll can spin under looptime when its deadline (now + 20 in floats)
    # falls between two ticks of the virtual clock.
    shutdown = ShutdownConfig(grace_s=0)
    app = Worker(WorkerConfig(lease=LEASE, max_in_flight=1, wait_s=20, shutdown=shutdown))

    @app.handler("jobs", **handler)
    async def handle(message: Message) -> None:
        raise AssertionError("an undecodable body never reaches the handler")

    return app


async def _poison_for(
    app: Worker, seconds: float, *, backend: TimedBackend | None = None, enough: int = 11
) -> tuple[list[Handled], list[float], list[MutableMapping[str, Any]]]:
    """Send one undecodable body; the runs of its first `seconds` (or of `enough` receives:
    a hot loop is cut short), the times of its receives from the send, and the log."""
    backend = backend or TimedBackend()
    with capture_logs() as logs:
        async with run_worker(app, backend=backend) as harness:
            start = anyio.current_time()
            await harness.send("jobs", "this body is not JSON")
            with anyio.move_on_after(seconds):
                await harness.wait_for_handled(enough)
            records = list(harness.handled)
    times = [t - start for t in backend.received_at if t - start <= seconds]
    return records[: len(times)], times, logs


def _warnings(logs: Sequence[MutableMapping[str, Any]]) -> list[str]:
    return [e["warning"] for e in logs if e["event"] == "queue.config_warning"]


async def test_one_undecodable_body_is_received_at_most_10_times_in_its_first_minute() -> None:
    records, times, logs = await _poison_for(_app(), 60)
    # Before: 11 receives within 0.6 s (the loop was cut short there), each released at 0.
    assert len(records) <= 10, f"{len(records)} receives, the last at {times[-1]:.2f} s"
    assert all(r.outcome is Outcome.FAILED for r in records)
    assert [r.message.receive_count for r in records] == list(range(1, len(records) + 1))
    released = [r.settlement.visibility_s for r in records]
    assert released[0] == 0  # the first retry comes at once
    assert 3 <= released[1] <= 5 and 5 <= released[2] <= 10 and 10 <= released[3] <= 20
    # Each receive came when its release ran out, not before.
    for (a, b), visibility in zip(itertools.pairwise(times), released, strict=False):
        assert b - a == pytest.approx(visibility, abs=0.2)
    # 0, 0, +3..5, +5..10, +10..20, +20..40, +40..80: never a 7th within the minute.
    assert 5 <= len(records) <= 6
    assert len([e for e in logs if e["event"] == "handler.undecodable_body"]) == len(records)


async def test_start_up_warns_once_in_one_line_about_the_missing_dlq() -> None:
    _, _, logs = await _poison_for(_app(), 60)
    assert _warnings(logs) == [NO_DLQ.format("'default': backing off to once every 450-900 s")]
    [event] = [e for e in logs if e["event"] == "queue.config_warning"]
    assert event["log_level"] == "warning" and "\n" not in event["warning"]


async def test_the_jitter_comes_from_the_message_id_and_receive_count_alone() -> None:
    # The engine's ids differ between runs; for one id and receive count, the delay does not.
    records, _, _ = await _poison_for(_app(), 60)
    for record in records:
        message = record.message
        again = settlement_for(
            Outcome.FAILED,
            policy=ErrorPolicy(),
            receive_count=message.receive_count,
            message_id=message.message_id,
        )
        assert record.settlement == again


async def test_an_explicit_release_still_releases_at_once_and_is_warned_about() -> None:
    records, times, logs = await _poison_for(_app(on_error="release"), 5, enough=20)
    assert len(records) == 20 and times[-1] < 5  # what 'release' says: at once, every time
    assert {r.settlement.visibility_s for r in records} == {0}
    assert _warnings(logs) == [NO_DLQ.format("'release': at once, as fast as the service answers")]


async def test_on_smq_the_immediate_retry_is_its_shortest_release() -> None:
    backend = TimedBackend(MemoryEngine(LoopClock(), dialect=SMQ_DIALECT))
    records, _, _ = await _poison_for(_app(), 60, backend=backend)
    assert len(records) <= 10 and records[0].settlement.visibility_s == 1


async def test_the_default_policy_is_quiet_on_a_queue_with_a_dlq() -> None:
    backend = TimedBackend()
    await backend.create_queue(QueueSpec("jobs-dlq"))
    redrive = RedrivePolicy("jobs-dlq", max_receive_count=3)
    await backend.create_queue(QueueSpec("jobs", visibility_timeout_s=30, redrive=redrive))
    records, _, logs = await _poison_for(_app(), 60, backend=backend)
    assert _warnings(logs) == []
    assert len(records) == 3  # then the dead-letter queue: its 4th receive moves it there
    assert (await backend.queue_info("jobs-dlq")).approximate_visible == 1
