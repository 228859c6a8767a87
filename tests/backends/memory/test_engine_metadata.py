"""Queue tags and permissions, AWSTraceHeader, and FIFO receive attempts on the engine."""

from __future__ import annotations

import pytest

from backends.memory.engine import MemoryEngine
from worker.clock import ManualClock
from worker.errors import FatalBackendError
from worker.types import OutgoingMessage, QueueSpec, VisibilityChange


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1000.0)


@pytest.fixture
def engine(clock: ManualClock) -> MemoryEngine:
    engine = MemoryEngine(clock)
    engine.create_queue(QueueSpec("jobs"), tags={"team": "a"})
    engine.create_queue(QueueSpec("jobs.fifo", content_based_deduplication=True))
    return engine


def code_of(call: object, *args: object) -> str | None:
    with pytest.raises(FatalBackendError) as caught:
        call(*args)  # type: ignore[operator]
    return caught.value.code


def test_tags(engine: MemoryEngine) -> None:
    assert engine.queue_tags("jobs") == {"team": "a"}
    engine.tag_queue("jobs", {"team": "b", "env": "x"})
    engine.untag_queue("jobs", ["team", "absent"])
    assert engine.queue_tags("jobs") == {"env": "x"}
    assert code_of(engine.tag_queue, "jobs", {f"k{i}": "v" for i in range(50)}) == (
        "InvalidParameterValue"
    )
    assert code_of(engine.tag_queue, "jobs", {"aws:reserved": "v"}) == "InvalidParameterValue"
    assert code_of(engine.tag_queue, "jobs", {"k": "v" * 257}) == "InvalidParameterValue"
    assert engine.queue_tags("jobs") == {"env": "x"}  # a refused call changes nothing


def test_permissions(engine: MemoryEngine) -> None:
    engine.add_permission("jobs", "send", ["111122223333"], ["SendMessage"])
    assert engine.permissions("jobs")["send"].accounts == ("111122223333",)
    assert code_of(engine.add_permission, "jobs", "send", ["111122223333"], ["*"]) == (
        "InvalidParameterValue"
    )
    for label, accounts, actions in [
        ("bad label", ["111122223333"], ["*"]),
        ("x", ["123"], ["*"]),
        ("x", ["111122223333"], ["PurgeQueue"]),
        ("x", ["111122223333"], []),
    ]:
        assert code_of(engine.add_permission, "jobs", label, accounts, actions) == (
            "InvalidParameterValue"
        )
    engine.remove_permission("jobs", "send")
    assert code_of(engine.remove_permission, "jobs", "send") == "InvalidParameterValue"


def test_trace_header_is_kept(engine: MemoryEngine) -> None:
    engine.send("jobs", [OutgoingMessage(body="a")], trace_headers={"0": "Root=1-abc"})
    engine.send("jobs", [OutgoingMessage(body="b")])
    got = {m.body: m.attributes.get("AWSTraceHeader") for m in engine.receive("jobs", 10)}
    assert got == {"a": "Root=1-abc", "b": None}


def send_fifo(engine: MemoryEngine, *bodies: str) -> None:
    batch = [OutgoingMessage(body=b, entry_id=b, group_id="g") for b in bodies]
    assert not engine.send("jobs.fifo", batch).failed


def test_a_retried_fifo_receive_gets_the_same_messages(
    engine: MemoryEngine, clock: ManualClock
) -> None:
    send_fifo(engine, "a", "b")
    first = engine.receive("jobs.fifo", 10, visibility_s=30, attempt_id="x")
    clock.advance(20)
    again = engine.receive("jobs.fifo", 10, visibility_s=30, attempt_id="x")
    assert [m.receipt_handle for m in again] == [m.receipt_handle for m in first]
    assert [m.receive_count for m in again] == [1, 1]
    clock.advance(20)  # 40 s after the first receive, 20 after the retry restarted the timeout
    assert engine.receive("jobs.fifo", 10) == []


def test_a_modified_message_ends_the_attempt(engine: MemoryEngine, clock: ManualClock) -> None:
    send_fifo(engine, "a")
    [first] = engine.receive("jobs.fifo", 1, visibility_s=30, attempt_id="x")
    change = VisibilityChange("0", first.receipt_handle, 60)
    assert not engine.change_visibility("jobs.fifo", [change]).failed
    assert engine.receive("jobs.fifo", 1, attempt_id="x") == []  # a new receive: group held


def test_an_attempt_lasts_five_minutes(engine: MemoryEngine, clock: ManualClock) -> None:
    send_fifo(engine, "a")
    [first] = engine.receive("jobs.fifo", 1, visibility_s=600, attempt_id="x")
    clock.advance(299)
    assert engine.receive("jobs.fifo", 1, visibility_s=600, attempt_id="x") == [first]
    clock.advance(2)
    assert engine.receive("jobs.fifo", 1, attempt_id="x") == []


def test_standard_queues_ignore_attempt_ids(engine: MemoryEngine) -> None:
    engine.send("jobs", [OutgoingMessage(body=b, entry_id=b) for b in "ab"])
    assert len(engine.receive("jobs", 1, attempt_id="x")) == 1
    assert len(engine.receive("jobs", 1, attempt_id="x")) == 1  # the other message
