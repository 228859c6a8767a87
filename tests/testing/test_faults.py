"""`worker.testing.FaultyBackend`: the four fates of a call on both dialects of the in-memory
engine, the counting of planned faults, and stalls of the event loop.

A late or lost call has landed: the engine shows its effect before (or without) the answer.
A refused call has not: the engine is as it was. Times are the loop's (looptime), which
starts at 0 in each test, so they are compared exactly.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

import anyio
import looptime
import pytest
from anyio.abc import TaskStatus

from backends.memory import MemoryBackend, MemoryEngine
from backends.memory.dialects import SMQ_DIALECT, SQS_DIALECT, Dialect
from backends.memory.engine import QueueCounts
from backends.memory.message import MessageSnapshot
from worker import Message, Outcome, Worker
from worker.backend import Backend, DeadLetterAdmin, QueueAdmin
from worker.clock import LoopClock
from worker.errors import QueueNotFound, TransientBackendError
from worker.testing import Fate, FaultyBackend, faults, run_worker
from worker.testing.faults import FaultyCall
from worker.types import (
    BatchResult,
    Deletion,
    EntryFailure,
    OutgoingMessage,
    QueueSpec,
    ReceivedMessage,
    VisibilityChange,
)

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]

DIALECTS = pytest.mark.parametrize("dialect", [SQS_DIALECT, SMQ_DIALECT], ids=["sqs", "smq"])

STALE = EntryFailure(
    "0", "ReceiptHandleIsInvalid", "not the latest receipt handle of a stored message"
)


async def _one_received(dialect: Dialect) -> tuple[FaultyBackend[MemoryBackend], ReceivedMessage]:
    """A backend whose queue `jobs` (visibility 30 s) holds one message, just received at 0.
    Set up on the inner backend: `calls` starts empty."""
    inner = MemoryBackend(MemoryEngine(LoopClock(), dialect=dialect))
    await inner.create_queue(QueueSpec("jobs", visibility_timeout_s=30))
    await inner.send("jobs", [OutgoingMessage(body="{}")])
    [message] = await inner.receive("jobs", max_messages=1, wait_s=0)
    return FaultyBackend(inner), message


def _snapshot(backend: FaultyBackend[MemoryBackend], message: ReceivedMessage) -> MessageSnapshot:
    snapshot = backend.inner.engine.peek("jobs", message.message_id)
    assert snapshot is not None
    return snapshot


def _extension(handle: str, visibility_s: int = 120) -> list[VisibilityChange]:
    return [VisibilityChange("0", handle, visibility_s)]


async def _redelivered(backend: FaultyBackend[MemoryBackend]) -> int:
    return len(await backend.inner.receive("jobs", max_messages=10, wait_s=0))


# -- passing through ----------------------------------------------------------------------


@DIALECTS
async def test_limits_and_everything_but_the_calls_are_the_inner_backends(
    dialect: Dialect,
) -> None:
    backend, _ = await _one_received(dialect)
    # The inner's, but a receive is over a network: cancelled, it may have taken messages.
    assert backend.limits == replace(backend.inner.limits, cancelled_receive_takes_nothing=False)
    assert backend.inner.limits.cancelled_receive_takes_nothing
    assert backend.limits.extend_batch == dialect.limits.extend_batch
    assert isinstance(backend, Backend)
    assert isinstance(backend, QueueAdmin)
    assert isinstance(backend, DeadLetterAdmin)
    assert backend.engine is backend.inner.engine
    await backend.create_queue(QueueSpec("more"))
    assert await backend.list_queues() == ["jobs", "more"]
    assert backend.calls == []


@DIALECTS
async def test_answered_calls_reach_the_backend_and_are_recorded(dialect: Dialect) -> None:
    backend, message = await _one_received(dialect)
    assert (await backend.queue_info("jobs")).name == "jobs"
    await backend.send("jobs", [OutgoingMessage(body="1", entry_id="a")])
    [second] = await backend.receive("jobs", max_messages=10, wait_s=0)
    extended = await backend.extend("jobs", _extension(message.receipt_handle))
    released = await backend.release("jobs", [VisibilityChange("0", second.receipt_handle, 1)])
    handle = extended.new_handles.get("0", message.receipt_handle)
    deleted = await backend.delete("jobs", [Deletion("0", handle)])
    await backend.aclose()
    assert (extended.succeeded, released.succeeded, deleted.succeeded) == (("0",),) * 3
    assert backend.calls == [
        FaultyCall("queue_info", "jobs", 0, Fate.ANSWERED, 0.0),
        FaultyCall("send", "jobs", 1, Fate.ANSWERED, 0.0),
        FaultyCall("receive", "jobs", 10, Fate.ANSWERED, 0.0),
        FaultyCall("extend", "jobs", 1, Fate.ANSWERED, 0.0),
        FaultyCall("release", "jobs", 1, Fate.ANSWERED, 0.0),
        FaultyCall("delete", "jobs", 1, Fate.ANSWERED, 0.0),
        FaultyCall("aclose", "", 0, Fate.ANSWERED, 0.0),
    ]


# -- late -----------------------------------------------------------------------------------


@DIALECTS
async def test_a_late_extend_takes_effect_at_once_and_is_answered_by_s_later(
    dialect: Dialect,
) -> None:
    backend, message = await _one_received(dialect)
    backend.late("extend", by_s=3.0)
    answers: list[tuple[float, BatchResult]] = []

    async def extend() -> None:
        result = await backend.extend("jobs", _extension(message.receipt_handle))
        answers.append((anyio.current_time(), result))

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(extend)
        await anyio.sleep(1)
        # Landed, not answered: the engine already holds the message for 120 s.
        assert answers == []
        landed = _snapshot(backend, message)
        assert landed.visible_at == 120.0
    [(answered_at, result)] = answers
    assert answered_at == 3.0
    assert result.succeeded == ("0",)
    if dialect.rotates_handles:
        # The handle returned late is the one the engine rotated to at 0; the old one is dead.
        assert landed.receipt_handle != message.receipt_handle
        assert dict(result.new_handles) == {"0": landed.receipt_handle}
        stale = await backend.extend("jobs", _extension(message.receipt_handle))
        assert stale.failed == (STALE,)
    else:
        assert landed.receipt_handle == message.receipt_handle
        assert dict(result.new_handles) == {}
    await anyio.sleep(60)  # past the queue's 30 s: the extension holds the message
    assert backend.inner.engine.counts("jobs") == QueueCounts(visible=0, in_flight=1, delayed=0)
    assert await _redelivered(backend) == 0
    fates = [Fate.LATE, Fate.ANSWERED] if dialect.rotates_handles else [Fate.LATE]
    assert [call.fate for call in backend.calls] == fates
    assert backend.calls[0] == FaultyCall("extend", "jobs", 1, Fate.LATE, 0.0)


async def test_an_error_answer_is_held_as_late_as_a_result() -> None:
    backend, _ = await _one_received(SQS_DIALECT)
    backend.late("queue_info", by_s=5.0)
    with pytest.raises(QueueNotFound):
        await backend.queue_info("nowhere")
    assert anyio.current_time() == 5.0
    assert backend.calls == [FaultyCall("queue_info", "nowhere", 0, Fate.LATE, 0.0)]


# -- late or lost, the caller gone: the call has landed -------------------------------------


@DIALECTS
@pytest.mark.parametrize("fate", [Fate.LATE, Fate.LOST])
async def test_an_extension_whose_caller_gave_up_waiting_has_landed(
    dialect: Dialect, fate: Fate
) -> None:
    backend, message = await _one_received(dialect)
    if fate is Fate.LATE:
        backend.late("extend", by_s=10.0)
    else:
        backend.lose("extend")
    with anyio.move_on_after(2) as scope:
        await backend.extend("jobs", _extension(message.receipt_handle))
    assert scope.cancelled_caught
    assert anyio.current_time() == 2.0
    landed = _snapshot(backend, message)
    assert landed.visible_at == 120.0
    deleted = await backend.delete("jobs", [Deletion("0", message.receipt_handle)])
    if dialect.rotates_handles:
        # The engine rotated the handle; the caller never heard the new one, so its own
        # handle is refused from now on, and the message stays in flight.
        assert landed.receipt_handle != message.receipt_handle
        assert deleted.failed == (STALE,)
        assert backend.inner.engine.counts("jobs") == QueueCounts(0, 1, 0)
    else:
        assert deleted.succeeded == ("0",)
        assert backend.inner.engine.counts("jobs") == QueueCounts(0, 0, 0)
    assert [call.fate for call in backend.calls] == [fate, Fate.ANSWERED]


# -- lost -----------------------------------------------------------------------------------


@DIALECTS
async def test_a_lost_delete_deletes_and_never_answers(dialect: Dialect) -> None:
    backend, message = await _one_received(dialect)
    backend.lose("delete")
    with anyio.move_on_after(300) as scope:
        await backend.delete("jobs", [Deletion("0", message.receipt_handle)])
    assert scope.cancelled_caught
    assert anyio.current_time() == 300.0
    assert backend.inner.engine.peek("jobs", message.message_id) is None
    assert backend.inner.engine.counts("jobs") == QueueCounts(0, 0, 0)
    assert await _redelivered(backend) == 0
    assert backend.calls == [FaultyCall("delete", "jobs", 1, Fate.LOST, 0.0)]


# -- refused --------------------------------------------------------------------------------


@DIALECTS
async def test_a_refused_call_changes_nothing(dialect: Dialect) -> None:
    backend, message = await _one_received(dialect)
    before = _snapshot(backend, message)
    throttled = TransientBackendError("throttled", operation="extend", code="Throttling")
    gone = TransientBackendError("reset", operation="delete")
    backend.refuse("extend", throttled)
    backend.refuse("delete", gone)
    with pytest.raises(TransientBackendError) as extending:
        await backend.extend("jobs", _extension(message.receipt_handle))
    with pytest.raises(TransientBackendError) as deleting:
        await backend.delete("jobs", [Deletion("0", message.receipt_handle)])
    assert (extending.value, deleting.value) == (throttled, gone)
    assert _snapshot(backend, message) == before
    # The handle the refused calls carried is still the good one.
    extended = await backend.extend("jobs", _extension(message.receipt_handle))
    assert extended.succeeded == ("0",)
    assert [call.fate for call in backend.calls] == [Fate.REFUSED, Fate.REFUSED, Fate.ANSWERED]


async def test_a_refused_call_never_reaches_the_backend() -> None:
    backend, _ = await _one_received(SQS_DIALECT)
    planned = TransientBackendError("throttled")
    backend.refuse("queue_info", planned)
    with pytest.raises(TransientBackendError) as refused:
        await backend.queue_info("nowhere")  # the engine would say QueueNotFound
    assert refused.value is planned
    with pytest.raises(QueueNotFound):
        await backend.queue_info("nowhere")


# -- planning -------------------------------------------------------------------------------


@DIALECTS
async def test_times_counts_the_calls_of_that_operation_only(dialect: Dialect) -> None:
    backend, message = await _one_received(dialect)
    backend.late("extend", by_s=2.0, times=2)
    handle = message.receipt_handle
    answered_at: list[float] = []
    for _ in range(3):
        result = await backend.extend("jobs", _extension(handle))
        assert result.succeeded == ("0",)
        handle = result.new_handles.get("0", handle)
        answered_at.append(anyio.current_time())
        await backend.queue_info("jobs")
    assert answered_at == [2.0, 4.0, 4.0]
    assert [(call.operation, call.fate) for call in backend.calls] == [
        ("extend", Fate.LATE),
        ("queue_info", Fate.ANSWERED),
        ("extend", Fate.LATE),
        ("queue_info", Fate.ANSWERED),
        ("extend", Fate.ANSWERED),
        ("queue_info", Fate.ANSWERED),
    ]


async def test_times_none_faults_every_call_until_cleared() -> None:
    backend, _ = await _one_received(SQS_DIALECT)
    backend.refuse("receive", TransientBackendError("down"), times=None)
    backend.lose("delete", times=None)
    for _ in range(5):
        with pytest.raises(TransientBackendError):
            await backend.receive("jobs", max_messages=10, wait_s=0)
    backend.clear("receive")
    assert await backend.receive("jobs", max_messages=10, wait_s=0) == []
    backend.clear()
    unknown = await backend.delete("jobs", [Deletion("0", "unknown")])
    assert unknown.failed == (STALE,)
    assert [call.fate for call in backend.calls] == [Fate.REFUSED] * 5 + [Fate.ANSWERED] * 2


async def test_faults_of_one_operation_apply_in_the_order_they_were_planned() -> None:
    backend, message = await _one_received(SQS_DIALECT)
    backend.late("extend", by_s=1.0)
    backend.refuse("extend", TransientBackendError("throttled"), times=2)
    backend.lose("extend")
    await backend.extend("jobs", _extension(message.receipt_handle))
    for _ in range(2):
        with pytest.raises(TransientBackendError):
            await backend.extend("jobs", _extension(message.receipt_handle))
    with anyio.move_on_after(10):
        await backend.extend("jobs", _extension(message.receipt_handle))
    await backend.extend("jobs", _extension(message.receipt_handle))
    assert [(call.fate, call.at) for call in backend.calls] == [
        (Fate.LATE, 0.0),
        (Fate.REFUSED, 1.0),
        (Fate.REFUSED, 1.0),
        (Fate.LOST, 1.0),
        (Fate.ANSWERED, 11.0),
    ]


async def test_bad_plans_are_refused_when_made() -> None:
    backend, _ = await _one_received(SQS_DIALECT)
    with pytest.raises(ValueError, match="unknown operation 'change_visibility'"):
        backend.lose("change_visibility")
    with pytest.raises(ValueError, match="times"):
        backend.lose("delete", times=0)
    with pytest.raises(ValueError, match="by_s"):
        backend.late("delete", by_s=-1)
    with pytest.raises(TypeError, match="exception instance"):
        backend.refuse("delete", TransientBackendError)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown operation"):
        backend.clear("purge")
    with pytest.raises(ValueError, match="seconds"):
        backend.stall(-1)
    unknown = await backend.delete("jobs", [Deletion("0", "unknown")])
    assert unknown.failed == (STALE,)
    assert [call.fate for call in backend.calls] == [Fate.ANSWERED]


async def test_a_worker_runs_on_it() -> None:
    app = Worker()
    seen: list[str] = []

    @app.handler("jobs")
    async def job(message: Message) -> None:
        seen.append(message.message_id)

    backend = FaultyBackend(MemoryBackend())
    backend.late("delete", by_s=5.0)
    async with run_worker(app, backend=backend) as harness:
        message_id = await harness.send("jobs", {"n": 1})
        [handled] = await harness.wait_for_handled(1)
        await harness.wait_until_idle()
        assert backend.inner.engine.counts("jobs") == QueueCounts(0, 0, 0)
    assert handled.outcome is Outcome.SUCCEEDED
    assert seen == [message_id]
    # The first delete was the late one (whether the runtime waits for its answer or
    # retries is the runtime's business, not this fake's).
    deletes = [call for call in backend.calls if call.operation == "delete"]
    assert (deletes[0].entries, deletes[0].fate) == (1, Fate.LATE)


# -- stalls ---------------------------------------------------------------------------------


async def test_a_stall_under_looptime_jumps_the_clock_with_nothing_run_in_between(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    blocked: list[float] = []
    monkeypatch.setattr(faults, "_block_thread", blocked.append)
    backend = FaultyBackend(MemoryBackend())
    loop = asyncio.get_running_loop()
    seen: list[tuple[str, float]] = []

    def see(what: str) -> None:
        seen.append((what, loop.time()))

    async def handler(*, task_status: TaskStatus[None]) -> None:
        task_status.started()
        await asyncio.sleep(1)
        see("handler woke")

    async with anyio.create_task_group() as tasks:
        await tasks.start(handler)
        loop.call_later(0.5, see, "timer due at 0.5")
        loop.call_soon(see, "queued before the stall")
        backend.stall(9)
        loop.call_soon(see, "queued behind the stall")
    assert seen == [
        ("queued before the stall", 0.0),
        ("queued behind the stall", 9.0),
        ("timer due at 0.5", 9.0),
        ("handler woke", 9.0),
    ]
    assert loop.time() == 9.0
    assert blocked == []  # no real time spent


@pytest.mark.looptime(False)
async def test_a_stall_on_a_patched_loop_with_looptime_off_blocks_the_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[str] = []
    monkeypatch.setattr(faults, "_block_thread", lambda seconds: seen.append(f"block {seconds}"))
    loop = asyncio.get_running_loop()
    backend = FaultyBackend(MemoryBackend())
    loop.call_soon(seen.append, "queued before the stall")
    backend.stall(9)
    loop.call_soon(seen.append, "queued behind the stall")
    await asyncio.sleep(0)
    assert seen == ["queued before the stall", "block 9", "queued behind the stall"]


@pytest.mark.looptime(False)
async def test_a_stall_on_a_plain_asyncio_loop_blocks_the_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    blocked: list[float] = []
    monkeypatch.setattr(faults, "_block_thread", blocked.append)

    async def stall_once() -> bool:
        FaultyBackend(MemoryBackend()).stall(2.5)
        await asyncio.sleep(0)
        return isinstance(asyncio.get_running_loop(), looptime.LoopTimeEventLoop)

    # A loop of its own, in a thread: not one pytest-asyncio made (and looptime patched).
    on_looptime = await anyio.to_thread.run_sync(asyncio.run, stall_once())
    assert on_looptime is False
    assert blocked == [2.5]


async def test_a_looptime_that_keeps_its_time_elsewhere_is_refused_not_slept_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    blocked: list[float] = []
    monkeypatch.setattr(faults, "_block_thread", blocked.append)
    monkeypatch.setattr(faults, "_NOW", "_LoopTimeEventLoop__moved")
    with pytest.raises(RuntimeError, match="keeps its virtual time elsewhere"):
        FaultyBackend(MemoryBackend()).stall(9)
    await asyncio.sleep(0)
    assert (asyncio.get_running_loop().time(), blocked) == (0.0, [])
