"""The runtime's lease and error-policy rules on the engine's SMQ dialect: one extension per
call that hands back a new receipt handle, releases to 1 s, the dead-letter policy.

The same scenarios as `test_leases` and `test_error_policy`, with SMQ's numbers: each
extension must use the handle the previous one returned (the engine refuses any other).
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import anyio
import pytest

from backends.memory import MemoryBackend, MemoryEngine
from backends.memory.dialects import SMQ_DIALECT
from backends.memory.engine import QueueCounts
from tests.recording import RecordingBackend
from worker import LeaseConfig, Message, Outcome, Worker, WorkerConfig
from worker.clock import LoopClock
from worker.testing import run_worker
from worker.types import (
    BatchResult,
    Deletion,
    OutgoingMessage,
    QueueSpec,
    RedrivePolicy,
    VisibilityChange,
)

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]

LEASE = LeaseConfig(visibility_s=30, extension_s=30, renew_margin_s=10, coalesce_window_s=5)


@dataclass
class HandleLog:
    """Every handle the worker sent to extend, release or delete, and every new handle the
    engine answered, in order."""

    sent: list[tuple[str, str]] = field(default_factory=list)
    answered: list[str] = field(default_factory=list)


def _smq_backend() -> tuple[RecordingBackend, HandleLog]:
    backend = RecordingBackend(MemoryBackend(MemoryEngine(LoopClock(), dialect=SMQ_DIALECT)))
    log = HandleLog()
    extend, release, delete = backend.extend, backend.release, backend.delete

    async def logged_extend(queue: str, entries: Sequence[VisibilityChange]) -> BatchResult:
        log.sent += [("extend", e.receipt_handle) for e in entries]
        result = await extend(queue, entries)
        log.answered += list(result.new_handles.values())
        return result

    async def logged_release(queue: str, entries: Sequence[VisibilityChange]) -> BatchResult:
        log.sent += [("release", e.receipt_handle) for e in entries]
        return await release(queue, entries)

    async def logged_delete(queue: str, entries: Sequence[Deletion]) -> BatchResult:
        log.sent += [("delete", e.receipt_handle) for e in entries]
        return await delete(queue, entries)

    backend.extend = logged_extend  # type: ignore[method-assign]
    backend.release = logged_release  # type: ignore[method-assign]
    backend.delete = logged_delete  # type: ignore[method-assign]
    return backend, log


def _app(max_in_flight: int = 1) -> Worker:
    return Worker(WorkerConfig(lease=LEASE, max_in_flight=max_in_flight, wait_s=20))


async def _prepare(backend: RecordingBackend, count: int) -> list[str]:
    await backend.create_queue(QueueSpec("jobs", visibility_timeout_s=30))
    result = await backend.inner.send(
        "jobs", [OutgoingMessage(body=f'{{"n": {i}}}', entry_id=str(i)) for i in range(count)]
    )
    return [result.message_ids[str(i)] for i in range(count)]


async def test_the_limits_the_runtime_reads_are_smqs() -> None:
    backend, _ = _smq_backend()
    assert backend.limits.extend_batch == 1
    assert backend.limits.extension_returns_new_handle is True
    assert backend.limits.min_release_visibility_s == 1


@pytest.mark.parametrize("count", [1, 3])
async def test_long_handlers_are_never_redelivered_and_each_extension_uses_the_last_handle(
    count: int,
) -> None:
    app = _app(max_in_flight=count)
    starts: Counter[str] = Counter()

    @app.handler("jobs")
    async def job(message: Message) -> None:
        starts[message.message_id] += 1
        await anyio.sleep(295)  # ~10x the visibility timeout

    backend, log = _smq_backend()
    ids = await _prepare(backend, count)
    async with run_worker(app, backend=backend) as harness:
        handled = await harness.wait_for_handled(count)
        await harness.wait_until_idle()
    assert [h.outcome for h in handled] == [Outcome.SUCCEEDED] * count
    assert starts == Counter({message_id: 1 for message_id in ids})
    # One lease a call (SMQ has no batch extension), at 20, 40, ... 280 s: 14 each.
    assert [call.entries for call in backend.of("extend")] == [1] * (14 * count)
    assert backend.inner.engine.counts("jobs") == QueueCounts(0, 0, 0)
    # Every extension and the final delete used a handle the engine had just handed out,
    # each one once: none of them was refused.
    by_message: dict[str, list[tuple[str, str]]] = {}
    for operation, handle in log.sent:
        by_message.setdefault(handle.partition(".")[2], []).append((operation, handle))
    assert sorted(by_message) == sorted(ids)
    answered = set(log.answered)
    for calls in by_message.values():
        assert [op for op, _ in calls] == ["extend"] * 14 + ["delete"]
        handles = [h for _, h in calls]
        assert len(set(handles)) == 15
        assert set(handles[1:]) <= answered  # all but the receive's came from an extension
    assert (
        harness.metrics.value(
            "lease_worker_lease_renewal_failures_total", queue="jobs", code="ReceiptHandleIsInvalid"
        )
        == 0
    )


async def test_a_delete_racing_an_extension_uses_the_newest_handle() -> None:
    app = _app()
    on_wire = anyio.Event()
    finish = anyio.Event()

    @app.handler("jobs")
    async def job(message: Message) -> None:
        await finish.wait()  # ends while its lease's extension is on the wire

    backend, log = _smq_backend()
    extend = backend.extend

    async def slow_extend(queue: str, entries: Sequence[VisibilityChange]) -> BatchResult:
        on_wire.set()
        finish.set()
        await anyio.sleep(1)
        return await extend(queue, entries)

    backend.extend = slow_extend  # type: ignore[method-assign]
    [message_id] = await _prepare(backend, 1)
    async with run_worker(app, backend=backend) as harness:
        [record] = await harness.wait_for_handled(1)
        await harness.wait_until_idle()
    assert on_wire.is_set() and record.outcome is Outcome.SUCCEEDED
    assert [op for op, _ in log.sent] == ["extend", "delete"]
    assert log.sent[1][1] == log.answered[0]  # the delete used the extension's new handle
    assert len(backend.of("delete")) == 1
    assert backend.inner.engine.peek("jobs", message_id) is None


async def test_release_makes_the_message_visible_again_after_one_second() -> None:
    app = _app()
    seen: list[tuple[int, float]] = []

    @app.handler("jobs", on_error="release")
    async def flaky(message: Message) -> None:
        seen.append((message.receive_count, anyio.current_time()))
        if message.receive_count == 1:
            raise RuntimeError("first try fails")

    backend, _ = _smq_backend()
    await _prepare(backend, 1)
    async with run_worker(app, backend=backend) as harness:
        records = await harness.wait_for_handled(2)
        await harness.wait_until_idle()
    assert [r.outcome for r in records] == [Outcome.FAILED, Outcome.SUCCEEDED]
    assert [count for count, _ in seen] == [1, 2]
    assert [call.visibility for call in backend.of("release")] == [(1,)]
    assert 1 <= seen[1][1] - seen[0][1] < 1.1  # SMQ's shortest release, not 30 s


async def test_a_poison_message_lands_in_the_dead_letter_queue_at_receive_max_plus_one() -> None:
    app = _app()
    seen: list[tuple[int, float]] = []

    @app.handler("jobs", on_error="expire")
    async def broken(message: Message) -> None:
        seen.append((message.receive_count, anyio.current_time()))
        raise RuntimeError("always fails")

    backend, _ = _smq_backend()
    await backend.create_queue(QueueSpec("jobs-dlq"))
    await backend.create_queue(
        QueueSpec("jobs", visibility_timeout_s=30, redrive=RedrivePolicy("jobs-dlq", 3))
    )
    async with run_worker(app, backend=backend) as harness:
        await harness.send("jobs", {"n": 1})
        await harness.wait_for_handled(3)
        with anyio.fail_after(120):
            dead: list[object] = []
            while not dead:
                dead = list(await backend.inner.receive("jobs-dlq", max_messages=1, wait_s=20))
    assert [count for count, _ in seen] == [1, 2, 3]
    gaps = [b - a for (_, a), (_, b) in itertools.pairwise(seen)]
    assert gaps == [pytest.approx(30, abs=0.1)] * 2
    assert len(dead) == 1


async def test_a_superseded_handle_loses_the_lease_and_cancels_the_handler() -> None:
    app = _app()
    started = anyio.Event()
    cancelled = anyio.Event()

    @app.handler("jobs")
    async def job(message: Message) -> None:
        started.set()
        try:
            await anyio.sleep(3_600)
        except anyio.get_cancelled_exc_class():
            cancelled.set()
            raise

    backend, _ = _smq_backend()
    [message_id] = await _prepare(backend, 1)
    engine = backend.inner.engine
    async with run_worker(app, backend=backend) as harness:
        await started.wait()
        snapshot = engine.peek("jobs", message_id)
        assert snapshot is not None and snapshot.receipt_handle is not None
        # Another client changes the visibility behind the worker's back: new handle.
        other = engine.change_visibility(
            "jobs", [VisibilityChange("x", snapshot.receipt_handle, 5)]
        )
        assert other.succeeded == ("x",)
        await cancelled.wait()
        [record] = await harness.wait_for_handled(1)
    assert record.outcome is Outcome.LEASE_LOST
    assert backend.of("delete") == []
