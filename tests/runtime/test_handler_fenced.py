"""A handler stopped by its lease's fence is a lease event, not a crash.

`message.lease.ensure_held()` and `await message.lease.extend()` raise `LeaseLostError` once
the lease is gone (its deadline passed by the clock, or the keeper lost it). Raised out of
the handler, that is logged once as `handler.fenced` (a warning, no traceback), counted in
`lease_worker_handlers_fenced_total`, and its outcome is `lease_lost`: the message is
neither deleted nor released, and comes back. A `LeaseLostError` while the lease is in fact
still held (raised by hand) stays the handler's failure. Virtual time (looptime).
"""

from __future__ import annotations

import asyncio
from collections.abc import MutableMapping, Sequence
from typing import Any

import anyio
import pytest
import structlog

from backends.memory import MemoryBackend
from backends.memory.engine import QueueCounts
from worker import LeaseConfig, LeaseLostError, Message, Outcome, Worker, WorkerConfig
from worker.core.settlement import Action, Settlement
from worker.testing import FaultyBackend, Handled, WorkerHarness, run_worker
from worker.testing.faults import freeze
from worker.types import OutgoingMessage, QueueSpec

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]

LEASE = LeaseConfig(visibility_s=10, extension_s=10, renew_margin_s=2)
#: Longer than any lease's time left: a lease held across it lapses.
STALL_S = 15.0
FENCED = "lease_worker_handlers_fenced_total"
Logs = list[MutableMapping[str, Any]]


def _capture() -> Any:
    """structlog's capture, with each handler task's bound queue and message id."""
    return structlog.testing.capture_logs(processors=[structlog.contextvars.merge_contextvars])


def _events(logs: Sequence[MutableMapping[str, Any]], name: str) -> Logs:
    return [entry for entry in logs if entry["event"] == name]


async def _run(
    app: Worker, backend: FaultyBackend[MemoryBackend], count: int, handled: int
) -> tuple[list[Handled], WorkerHarness]:
    await backend.create_queue(QueueSpec("jobs", visibility_timeout_s=LEASE.visibility_s))
    entries = [OutgoingMessage(body='{"card": "4111"}', entry_id=str(i)) for i in range(count)]
    await backend.inner.send("jobs", entries)
    async with run_worker(app, backend=backend) as harness:
        runs = await harness.wait_for_handled(handled)
        await harness.wait_until_idle()
    return runs, harness


async def test_ensure_held_after_a_stall_is_one_fenced_warning_and_the_message_comes_back() -> None:
    """Blocking code (or a GC pause) holds the loop past the deadline; the handler's fence
    before its side effect raises. That was logged as `handler.failed`, an error with a
    traceback, like any crash."""
    backend = FaultyBackend(MemoryBackend())
    app = Worker(WorkerConfig(lease=LEASE, max_in_flight=1, wait_s=1))
    effects: list[int] = []

    @app.handler("jobs")
    async def job(message: Message) -> None:
        if message.receive_count == 1:
            freeze(asyncio.get_running_loop(), STALL_S)  # the loop stands still
        message.lease.ensure_held()  # the fence, right before the side effect
        effects.append(message.receive_count)

    with _capture() as logs:
        (first, second), harness = await _run(app, backend, count=1, handled=2)
    assert (first.outcome, first.settlement) == (Outcome.LEASE_LOST, Settlement(Action.FORGET))
    assert (second.message.receive_count, second.outcome) == (2, Outcome.SUCCEEDED)
    assert effects == [2]
    assert [e["log_level"] for e in _events(logs, "handler.failed")] == []
    [fenced] = _events(logs, "handler.fenced")
    assert fenced == {
        "event": "handler.fenced",
        "log_level": "warning",
        "queue": "jobs",
        "message_id": first.message.message_id,
        "handler": job.__qualname__,
        "reason": "lapsed",
    }
    assert harness.metrics.value(FENCED, queue="jobs") == 1
    lost = harness.metrics.value("lease_worker_leases_lost_total", queue="jobs", reason="lapsed")
    assert lost == 1
    assert [call.entries for call in backend.calls if call.operation == "delete"] == [1]
    assert [call for call in backend.calls if call.operation == "release"] == []
    assert backend.inner.engine.counts("jobs") == QueueCounts(0, 0, 0)


async def test_extend_on_a_lease_lost_in_a_stall_is_fenced_too() -> None:
    """The keeper loses the lease after a stall and cancels the handler; the handler asks
    for more time in its clean-up, and `extend()` raises `LeaseLostError` out of it."""
    backend = FaultyBackend(MemoryBackend())
    app = Worker(WorkerConfig(lease=LEASE, max_in_flight=1, wait_s=1))

    @app.handler("jobs")
    async def job(message: Message) -> None:
        if message.receive_count > 1:
            return
        backend.stall(STALL_S)
        try:
            await anyio.sleep(5)
        except asyncio.CancelledError:
            await message.lease.extend(30)  # raises: the lease is lost
            raise

    with _capture() as logs:
        (first, second), harness = await _run(app, backend, count=1, handled=2)
    assert (first.outcome, second.outcome) == (Outcome.LEASE_LOST, Outcome.SUCCEEDED)
    assert [e["log_level"] for e in _events(logs, "handler.failed")] == []
    assert [(e["log_level"], e["reason"]) for e in _events(logs, "handler.fenced")] == [
        ("warning", "lapsed")
    ]
    assert harness.metrics.value(FENCED, queue="jobs") == 1


async def test_a_lease_lost_error_raised_by_hand_on_a_held_lease_is_a_failure() -> None:
    """The lease is still held, with time left: the error is the handler's own, not a fence
    (the message can still be handed back, so its error policy applies)."""
    backend = FaultyBackend(MemoryBackend())
    app = Worker(WorkerConfig(lease=LEASE, max_in_flight=1, wait_s=1))

    @app.handler("jobs", on_error="release")
    async def job(message: Message) -> None:
        if message.receive_count == 1:
            raise LeaseLostError("some other lease")

    with _capture() as logs:
        (first, second), harness = await _run(app, backend, count=1, handled=2)
    assert (first.outcome, first.settlement) == (Outcome.FAILED, Settlement(Action.RELEASE, 0))
    assert second.outcome is Outcome.SUCCEEDED
    assert len(_events(logs, "handler.failed")) == 1
    assert _events(logs, "handler.fenced") == []
    assert harness.metrics.value(FENCED, queue="jobs") == 0


async def test_a_batch_handler_fenced_after_a_stall_loses_its_batch_once() -> None:
    """A batch handler's fence raises for its first message after a stall: one warning for
    the batch, every lapsed message lease-lost (none deleted or released), all back again."""
    backend = FaultyBackend(MemoryBackend())
    app = Worker(WorkerConfig(lease=LEASE, max_in_flight=2, wait_s=1))
    batches: list[list[int]] = []

    @app.batch_handler("jobs", max_size=2, max_wait_s=1)
    async def jobs(messages: list[Message]) -> None:
        batches.append([m.receive_count for m in messages])
        if messages[0].receive_count == 1:
            freeze(asyncio.get_running_loop(), STALL_S)
        for message in messages:
            message.lease.ensure_held()

    with _capture() as logs:
        runs, harness = await _run(app, backend, count=2, handled=4)
    assert batches == [[1, 1], [2, 2]]
    assert [run.outcome for run in runs] == [Outcome.LEASE_LOST] * 2 + [Outcome.SUCCEEDED] * 2
    assert [e["log_level"] for e in _events(logs, "handler.failed")] == []
    [fenced] = _events(logs, "handler.fenced")
    assert fenced == {
        "event": "handler.fenced",
        "log_level": "warning",
        "queue": "jobs",
        "handler": jobs.__qualname__,
        "messages": 2,
        "reason": "lapsed",
    }
    assert harness.metrics.value(FENCED, queue="jobs") == 1
    assert [call.entries for call in backend.calls if call.operation == "delete"] == [2]
    assert [call for call in backend.calls if call.operation == "release"] == []
