"""Engine snapshots (`backends.memory.snapshot`): everything comes back, through JSON, into a
new engine whose clock has another monotonic origin, with the time that passed between."""

from __future__ import annotations

import json
from typing import Any

import pytest

from backends.memory.engine import MemoryEngine, MessageState, MoveStatus, QueueCounts
from backends.memory.snapshot import dump, restore
from worker.clock import ManualClock
from worker.types import (
    Deletion,
    MessageAttribute,
    OutgoingMessage,
    QueueSpec,
    RedrivePolicy,
    VisibilityChange,
)

WALL = 1_700_000_000.0


def clock_at(monotonic: float, wall: float) -> ManualClock:
    return ManualClock(monotonic, wall_offset_s=wall - monotonic)


def through_json(engine: MemoryEngine, clock: ManualClock) -> MemoryEngine:
    data: Any = json.loads(json.dumps(dump(engine)))
    restored = MemoryEngine(clock)
    restore(restored, data)
    return restored


def test_queues_and_messages_come_back_with_time_passed() -> None:
    engine = MemoryEngine(clock_at(1000.0, WALL))
    engine.create_queue(QueueSpec("dlq"))
    engine.create_queue(
        QueueSpec("jobs", visibility_timeout_s=60, redrive=RedrivePolicy("dlq", 5)),
        max_message_bytes=4096,
        tags={"team": "a"},
    )
    engine.keep_attributes("jobs", {"Policy": "{}"})
    engine.add_permission("jobs", "send", ["111122223333"], ["SendMessage"])
    attribute = {"b": MessageAttribute("Binary", binary_value=b"\x00\xff")}
    sent = engine.send(
        "jobs",
        [
            OutgoingMessage(body="flying", entry_id="f", message_attributes=attribute),
            OutgoingMessage(body="waiting", entry_id="w"),
            OutgoingMessage(body="later", entry_id="l", delay_s=100),
        ],
        trace_headers={"f": "Root=1"},
    )
    [flying] = engine.receive("jobs", 1, visibility_s=50)

    # Saved at wall WALL, restored 20 s later (wall) on a clock with another origin.
    restored = through_json(engine, clock_at(7.0, WALL + 20))
    assert restored.list_queues() == ["dlq", "jobs"]
    assert restored.queue_tags("jobs") == {"team": "a"}
    assert restored.kept_attributes("jobs") == {"Policy": "{}"}
    assert restored.permissions("jobs")["send"].actions == ("SendMessage",)
    config = restored.describe_queue("jobs").config
    assert (config.max_message_bytes, config.redrive) == (4096, RedrivePolicy("dlq", 5))
    assert restored.counts("jobs") == QueueCounts(1, 1, 1)
    snapshot = restored.peek("jobs", flying.message_id)
    assert snapshot is not None and snapshot.state is MessageState.IN_FLIGHT
    assert snapshot.visible_at == pytest.approx(7.0 + 30)  # 50 s visibility, 20 s gone
    extend = [VisibilityChange("x", flying.receipt_handle, 10)]
    assert not restored.change_visibility("jobs", extend).failed  # its handle still works
    [waiting] = restored.receive("jobs", 1)
    assert waiting.message_id == sent.message_ids["w"]
    assert not restored.delete("jobs", [Deletion("x", flying.receipt_handle)]).failed
    new_ids = restored.send("jobs", [OutgoingMessage(body="new")]).message_ids
    assert set(new_ids.values()).isdisjoint(sent.message_ids.values())


def test_fifo_sequence_and_deduplication_carry_on() -> None:
    clock = clock_at(1000.0, WALL)
    engine = MemoryEngine(clock)
    engine.create_queue(QueueSpec("jobs.fifo", content_based_deduplication=True))
    first = engine.send("jobs.fifo", [OutgoingMessage(body="a", group_id="g")])
    restored = through_json(engine, clock_at(5.0, WALL + 100))
    again = restored.send("jobs.fifo", [OutgoingMessage(body="a", group_id="g")])
    assert again.message_ids == first.message_ids  # still inside the 5 minutes
    other = restored.send("jobs.fifo", [OutgoingMessage(body="b", group_id="g")])
    number = restored.sequence_number("jobs.fifo", other.message_ids["0"])
    assert number == f"{2:020d}"
    later = through_json(restored, clock_at(5.0, WALL + 301))
    assert later.send("jobs.fifo", [OutgoingMessage(body="a", group_id="g")]).message_ids != (
        first.message_ids
    )


def test_a_move_task_runs_on_after_a_restart() -> None:
    clock = clock_at(1000.0, WALL)
    engine = MemoryEngine(clock)
    engine.create_queue(QueueSpec("dlq"))
    engine.create_queue(QueueSpec("jobs", redrive=RedrivePolicy("dlq", 1)))
    engine.send("jobs", [OutgoingMessage(body=f"m{i}", entry_id=f"e{i}") for i in range(4)])
    engine.receive("jobs", 10, visibility_s=0)
    assert engine.receive("jobs", 10) == []
    handle = engine.start_message_move_task("dlq", max_per_second=1)
    clock.advance(1.5)
    restored = through_json(engine, clock_at(0.0, WALL + 3.5))
    [task] = restored.list_message_move_tasks("dlq")
    assert (task.task_handle, task.moved, task.status) == (handle, 3, MoveStatus.RUNNING)
    assert restored.counts("jobs").visible == 3


def test_a_snapshot_that_does_not_read_is_refused_whole() -> None:
    engine = MemoryEngine(ManualClock())
    engine.create_queue(QueueSpec("jobs"))
    data = dump(engine)
    broken = {**data, "queues": [{**data["queues"][0], "config": {"name": "jobs"}}]}
    fresh = MemoryEngine(ManualClock())
    bad: list[Any] = [broken, {"format": "other"}, []]
    for snapshot in bad:
        with pytest.raises(ValueError):
            restore(fresh, snapshot)
        assert fresh.list_queues() == []
    with pytest.raises(ValueError, match="no queues"):
        restore(engine, data)
