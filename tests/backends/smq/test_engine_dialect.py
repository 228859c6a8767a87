"""The engine's SMQ dialect (`backends.memory.dialects.SMQ_DIALECT`): a new receipt handle per
receive and per visibility change with the old one refused, visibility 1-43,200 s, batches of
16, DequeueCount, peek, the dead-letter policy, no FIFO queues."""

from __future__ import annotations

import pytest

from backends.memory.dialects import SMQ_DIALECT
from backends.memory.engine import MemoryEngine, MessageState
from worker.clock import ManualClock
from worker.errors import FatalBackendError
from worker.types import (
    Deletion,
    OutgoingMessage,
    QueueSpec,
    ReceivedMessage,
    RedrivePolicy,
    VisibilityChange,
)


def make(count: int = 1) -> tuple[MemoryEngine, ManualClock]:
    clock = ManualClock(1000.0)
    engine = MemoryEngine(clock, dialect=SMQ_DIALECT)
    engine.create_queue(QueueSpec("jobs", visibility_timeout_s=30))
    for i in range(count):
        assert not engine.send("jobs", [OutgoingMessage(body=f"m{i}")]).failed
    return engine, clock


def receive_one(engine: MemoryEngine) -> ReceivedMessage:
    (got,) = engine.receive("jobs", 1)
    return got


def test_limits_are_smqs() -> None:
    limits = SMQ_DIALECT.limits
    assert (limits.receive_batch, limits.delete_batch, limits.extend_batch) == (16, 16, 1)
    assert (limits.release_batch, limits.send_batch, limits.max_wait_s) == (1, 16, 30)
    assert limits.min_release_visibility_s == 1
    assert limits.max_visibility_s == 43_200
    assert limits.extension_returns_new_handle is True
    assert limits.supports_peek is True


def test_each_visibility_change_hands_out_a_new_handle_and_retires_the_old() -> None:
    engine, _clock = make()
    first = receive_one(engine).receipt_handle
    result = engine.change_visibility("jobs", [VisibilityChange("a", first, 60)])
    assert result.succeeded == ("a",)
    second = result.new_handles["a"]
    assert second != first
    again = engine.change_visibility("jobs", [VisibilityChange("b", first, 60)])
    assert [f.code for f in again.failed] == ["ReceiptHandleIsInvalid"]
    third = engine.change_visibility("jobs", [VisibilityChange("c", second, 60)])
    assert third.succeeded == ("c",) and third.new_handles["c"] not in (first, second)
    stale = engine.delete("jobs", [Deletion("d", second)])
    assert [f.code for f in stale.failed] == ["ReceiptHandleIsInvalid"]
    assert engine.counts("jobs").in_flight == 1
    assert engine.delete("jobs", [Deletion("e", third.new_handles["c"])]).succeeded == ("e",)
    assert engine.counts("jobs").in_flight == 0 and engine.counts("jobs").visible == 0


def test_every_receive_hands_out_a_new_handle_and_dequeue_count_counts() -> None:
    engine, clock = make()
    first = receive_one(engine)
    clock.advance(30)
    second = receive_one(engine)
    assert (first.receive_count, second.receive_count) == (1, 2)
    assert second.receipt_handle != first.receipt_handle
    stale = engine.delete("jobs", [Deletion("x", first.receipt_handle)])
    assert [f.code for f in stale.failed] == ["ReceiptHandleIsInvalid"]


def test_a_handle_is_good_only_until_the_visibility_ends() -> None:
    engine, clock = make()
    handle = receive_one(engine).receipt_handle
    clock.advance(30)
    late = engine.delete("jobs", [Deletion("x", handle)])
    assert [f.code for f in late.failed] == ["MessageNotInflight"]
    assert engine.counts("jobs").visible == 1


@pytest.mark.parametrize(("visibility", "ok"), [(0, False), (1, True), (43_200, True)])
def test_visibility_is_1_to_43200(visibility: int, ok: bool) -> None:
    engine, _clock = make()
    handle = receive_one(engine).receipt_handle
    result = engine.change_visibility("jobs", [VisibilityChange("a", handle, visibility)])
    assert (result.succeeded == ("a",)) is ok
    if not ok:
        assert [f.code for f in result.failed] == ["InvalidParameterValue"]


def test_a_release_makes_the_message_visible_after_one_second() -> None:
    engine, clock = make()
    handle = receive_one(engine).receipt_handle
    assert engine.change_visibility("jobs", [VisibilityChange("a", handle, 1)]).succeeded
    clock.advance(0.999)
    assert engine.receive("jobs", 1) == []
    clock.advance(0.001)
    assert receive_one(engine).receive_count == 2


def test_batches_hold_16() -> None:
    engine, _clock = make(17)
    got = engine.receive("jobs", 16)
    assert len(got) == 16
    with pytest.raises(FatalBackendError):
        engine.receive("jobs", 17)
    deleted = engine.delete("jobs", [Deletion(str(i), m.receipt_handle) for i, m in enumerate(got)])
    assert len(deleted.succeeded) == 16
    too_many = [Deletion(str(i), "h") for i in range(17)]
    with pytest.raises(FatalBackendError):
        engine.delete("jobs", too_many)


def test_peek_changes_neither_visibility_nor_receive_count() -> None:
    engine, _clock = make(3)
    peeked = engine.browse("jobs", 16)
    assert [m.body for m in peeked] == ["m0", "m1", "m2"]
    assert all(m.receive_count == 0 and m.receipt_handle == "" for m in peeked)
    assert engine.counts("jobs").visible == 3
    snapshot = engine.peek("jobs", peeked[0].message_id)
    assert snapshot is not None
    assert (snapshot.state, snapshot.receive_count) == (MessageState.VISIBLE, 0)
    assert len(engine.receive("jobs", 16)) == 3


def test_the_dead_letter_policy_moves_a_message_on_receive_max_plus_one() -> None:
    clock = ManualClock(1000.0)
    engine = MemoryEngine(clock, dialect=SMQ_DIALECT)
    engine.create_queue(QueueSpec("dead"))
    engine.create_queue(QueueSpec("jobs", visibility_timeout_s=5, redrive=RedrivePolicy("dead", 2)))
    engine.send("jobs", [OutgoingMessage(body="poison")])
    counts = []
    for _ in range(3):
        counts += [m.receive_count for m in engine.receive("jobs", 1)]
        clock.advance(5)
    assert counts == [1, 2]
    (dead,) = engine.receive("dead", 1)
    # It keeps its DequeueCount (2 in the source); this receive from the DLQ is the third.
    assert (dead.body, dead.receive_count) == ("poison", 3)


def test_no_fifo_queues_and_no_zero_visibility_queue() -> None:
    engine = MemoryEngine(ManualClock(), dialect=SMQ_DIALECT)
    with pytest.raises(FatalBackendError, match="no FIFO"):
        engine.create_queue(QueueSpec("jobs.fifo"))
    with pytest.raises(FatalBackendError, match="VisibilityTimeout=0"):
        engine.create_queue(QueueSpec("jobs", visibility_timeout_s=0))
