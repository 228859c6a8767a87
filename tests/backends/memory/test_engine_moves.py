"""Dead letters on the engine: DeadLetterQueueSourceArn, dead-letter source queues, and
message move tasks (`start_message_move_task` and its siblings) on a `ManualClock`."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from backends.memory import MemoryBackend
from backends.memory.catalog import ARN_PREFIX
from backends.memory.engine import MemoryEngine, MoveStatus
from worker.clock import LoopClock, ManualClock
from worker.errors import FatalBackendError, QueueNotFound
from worker.types import OutgoingMessage, QueueSpec, RedrivePolicy


def dead_lettered(engine: MemoryEngine, count: int, source: str = "jobs") -> list[str]:
    """`count` messages sent to `source` and dead-lettered to `dlq`; their ids."""
    for name in ("dlq", "other"):
        if name not in engine.list_queues():
            engine.create_queue(QueueSpec(name))
    engine.create_queue(QueueSpec(source, redrive=RedrivePolicy("dlq", max_receive_count=1)))
    batch = [OutgoingMessage(body=f"m{i}", entry_id=f"e{i}") for i in range(count)]
    sent = engine.send(source, batch)
    ids = [sent.message_ids[f"e{i}"] for i in range(count)]
    assert len(engine.receive(source, 10, visibility_s=0)) == count
    assert engine.receive(source, 10) == []  # over maxReceiveCount: all went to the DLQ
    return ids


def test_dead_lettered_messages_name_their_source() -> None:
    engine = MemoryEngine(ManualClock())
    ids = dead_lettered(engine, 2)
    got = engine.receive("dlq", 10, visibility_s=0)
    assert sorted(m.message_id for m in got) == sorted(ids)
    assert {m.attributes["DeadLetterQueueSourceArn"] for m in got} == {ARN_PREFIX + "jobs"}
    assert engine.dead_letter_source_queues("dlq") == ["jobs"]
    assert engine.dead_letter_source_queues("jobs") == []


def test_a_move_honours_its_rate_on_the_engine_clock() -> None:
    clock = ManualClock(100.0)
    engine = MemoryEngine(clock)
    ids = dead_lettered(engine, 5)
    handle = engine.start_message_move_task("dlq", max_per_second=2)
    progress = []
    for _ in range(4):
        [task] = engine.list_message_move_tasks("dlq")
        progress.append((task.moved, task.status))
        assert engine.next_wakeup("jobs") == (
            100.0 + (task.moved + 1) / 2 if task.moved < 5 else None
        )
        clock.advance(1.0)
    assert progress == [
        (0, MoveStatus.RUNNING),
        (2, MoveStatus.RUNNING),
        (4, MoveStatus.RUNNING),
        (5, MoveStatus.COMPLETED),
    ]
    assert task.task_handle == handle and task.to_move == 5 and task.destination is None
    back = engine.receive("jobs", 10)
    assert sorted(m.body for m in back) == [f"m{i}" for i in range(5)]
    assert not {m.message_id for m in back} & set(ids)  # new MessageIds
    assert {m.receive_count for m in back} == {1}
    assert all("DeadLetterQueueSourceArn" not in m.attributes for m in back)


def test_an_unbounded_move_to_a_destination_is_done_at_once() -> None:
    engine = MemoryEngine(ManualClock())
    dead_lettered(engine, 3)
    engine.start_message_move_task("dlq", "other")
    [task] = engine.list_message_move_tasks("dlq")
    assert (task.status, task.moved, task.destination) == (MoveStatus.COMPLETED, 3, "other")
    assert engine.counts("other").visible == 3 and engine.counts("dlq").visible == 0


def test_a_message_in_flight_waits_for_its_visibility() -> None:
    clock = ManualClock()
    engine = MemoryEngine(clock)
    dead_lettered(engine, 2)
    engine.receive("dlq", 1, visibility_s=30)
    engine.start_message_move_task("dlq")
    [task] = engine.list_message_move_tasks("dlq")
    assert (task.status, task.moved) == (MoveStatus.RUNNING, 1)
    clock.advance(30)
    [task] = engine.list_message_move_tasks("dlq")
    assert (task.status, task.moved) == (MoveStatus.COMPLETED, 2)


def test_cancel_stops_a_task_and_reports_what_moved() -> None:
    clock = ManualClock()
    engine = MemoryEngine(clock)
    dead_lettered(engine, 4)
    handle = engine.start_message_move_task("dlq", max_per_second=1)
    clock.advance(2.5)
    assert engine.cancel_message_move_task(handle) == 2
    clock.advance(10)
    [task] = engine.list_message_move_tasks("dlq")
    assert (task.status, task.moved) == (MoveStatus.CANCELLED, 2)
    assert engine.counts("dlq").visible == 2
    with pytest.raises(FatalBackendError) as caught:
        engine.cancel_message_move_task(handle)
    assert caught.value.code == "ResourceNotFoundException"


def test_a_task_fails_when_a_queue_it_needs_is_gone() -> None:
    clock = ManualClock(1000.0)
    engine = MemoryEngine(clock)
    dead_lettered(engine, 2)
    engine.start_message_move_task("dlq", "other", max_per_second=1)
    engine.delete_queue("other")
    clock.advance(5)
    [task] = engine.list_message_move_tasks("dlq")
    assert (task.status, task.moved) == (MoveStatus.FAILED, 0)
    assert task.failure_reason == "a destination queue does not exist"
    assert engine.counts("dlq").visible == 2  # nothing lost


def test_a_message_that_was_never_dead_lettered_has_nowhere_to_go_back() -> None:
    engine = MemoryEngine(ManualClock())
    dead_lettered(engine, 1)
    engine.send("dlq", [OutgoingMessage(body="direct")])
    engine.start_message_move_task("dlq")
    [task] = engine.list_message_move_tasks("dlq")
    assert (task.status, task.moved, task.to_move) == (MoveStatus.FAILED, 1, 2)


def test_start_refusals() -> None:
    engine = MemoryEngine(ManualClock())
    dead_lettered(engine, 1)
    for source, destination, rate in [("jobs", None, None), ("dlq", None, 0), ("dlq", None, 501)]:
        with pytest.raises(FatalBackendError) as caught:
            engine.start_message_move_task(source, destination, rate)
        assert caught.value.code == "InvalidParameterValue"
    with pytest.raises(QueueNotFound):
        engine.start_message_move_task("dlq", "absent")
    engine.start_message_move_task("dlq", max_per_second=1)
    with pytest.raises(FatalBackendError, match="already running"):
        engine.start_message_move_task("dlq")
    with pytest.raises(FatalBackendError):
        engine.list_message_move_tasks("dlq", max_results=11)


def test_list_shows_the_latest_first() -> None:
    engine = MemoryEngine(ManualClock())
    dead_lettered(engine, 1)
    first = engine.start_message_move_task("dlq", "other")
    second = engine.start_message_move_task("dlq", "other")
    assert [t.task_handle for t in engine.list_message_move_tasks("dlq", 10)] == [second, first]
    assert [t.task_handle for t in engine.list_message_move_tasks("dlq")] == [second]


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_a_long_poll_on_the_destination_wakes_for_a_move() -> None:
    engine = MemoryEngine(LoopClock())
    backend = MemoryBackend(engine)
    dead_lettered(engine, 1)
    start = anyio.current_time()
    engine.start_message_move_task("dlq", max_per_second=2)
    [message] = await backend.receive("jobs", max_messages=1, wait_s=20)
    assert message.body == "m0"
    assert anyio.current_time() - start == pytest.approx(0.5)
    await backend.aclose()


def test_a_stalled_move_is_not_due_until_its_message_can_move() -> None:
    # Once, a task whose messages were all in flight reported a due time in the past: every
    # long poll, on every queue, woke at once and looped (14,836 receives in one second).
    clock = ManualClock(100.0)
    engine = MemoryEngine(clock)
    dead_lettered(engine, 1)
    assert len(engine.receive("dlq", 1, visibility_s=30)) == 1  # in flight until 130 s
    engine.start_message_move_task("dlq")
    assert engine.next_move_due() == 130.0
    assert engine.next_wakeup("other") == 130.0
    clock.advance(30)
    assert engine.receive("jobs", 1)[0].body == "m0"  # visible again: moved


@pytest.mark.asyncio
async def test_a_long_poll_elsewhere_sleeps_while_a_move_is_stalled() -> None:
    engine = CountingEngine(LoopClock())
    backend = MemoryBackend(engine)
    dead_lettered(engine, 1)
    engine.receive("dlq", 1, visibility_s=60)
    engine.start_message_move_task("dlq")
    engine.receives = 0
    assert await backend.receive("other", max_messages=1, wait_s=0.3) == []
    assert engine.receives <= 3
    await backend.aclose()


class CountingEngine(MemoryEngine):
    receives = 0

    def receive(self, *args: Any, **kwargs: Any) -> Any:
        self.receives += 1
        return super().receive(*args, **kwargs)


def test_only_the_latest_ten_tasks_of_a_queue_are_kept() -> None:
    engine = MemoryEngine(ManualClock())
    dead_lettered(engine, 1)
    handles = []
    for _ in range(12):
        handles.append(engine.start_message_move_task("dlq", destination="other"))
        engine.send("dlq", [OutgoingMessage(body="again")])  # the next task has work
    listed = [t.task_handle for t in engine.list_message_move_tasks("dlq", 10)]
    assert listed == handles[::-1][:10]
    assert len(engine._moves) == 10
