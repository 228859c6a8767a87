"""Receipt-handle rules per queue type (`backends.memory.handles`): SQS's documented
behaviour under `HandleRules.SQS`, and `STRICT` (the default) refusing what SQS accepts."""

from __future__ import annotations

import pytest

from backends.memory.engine import HandleRules, MemoryEngine, QueueCounts
from worker.clock import ManualClock
from worker.types import BatchResult, Deletion, OutgoingMessage, QueueSpec, VisibilityChange


def make(rules: HandleRules, name: str) -> tuple[MemoryEngine, ManualClock]:
    clock = ManualClock(1000.0)
    engine = MemoryEngine(clock, handle_rules=rules)
    engine.create_queue(QueueSpec(name, content_based_deduplication=name.endswith(".fifo")))
    group = "g" if name.endswith(".fifo") else None
    result = engine.send(name, [OutgoingMessage(body="a", group_id=group)])
    assert not result.failed
    return engine, clock


def outcome(result: BatchResult) -> tuple[str, str] | None:
    assert len(result.succeeded) + len(result.failed) == 1
    return (result.failed[0].code, result.failed[0].message) if result.failed else None


def delete(engine: MemoryEngine, queue: str, handle: str) -> tuple[str, str] | None:
    return outcome(engine.delete(queue, [Deletion("x", handle)]))


EXPIRED = ("InvalidParameterValue", "The receipt handle has expired.")


def test_strict_is_the_engine_default() -> None:
    assert MemoryEngine(ManualClock()).handle_rules is HandleRules.STRICT


@pytest.mark.parametrize(
    ("rules", "repeat"),
    [(HandleRules.SQS, None), (HandleRules.STRICT, "ReceiptHandleIsInvalid")],
)
def test_standard_second_delete(rules: HandleRules, repeat: str | None) -> None:
    engine, _ = make(rules, "jobs")
    [message] = engine.receive("jobs")
    assert delete(engine, "jobs", message.receipt_handle) is None
    again = delete(engine, "jobs", message.receipt_handle)
    assert (again and again[0]) == repeat


@pytest.mark.parametrize(
    ("rules", "stale"),
    [(HandleRules.SQS, None), (HandleRules.STRICT, "ReceiptHandleIsInvalid")],
)
def test_standard_stale_handle_deletes_nothing(rules: HandleRules, stale: str | None) -> None:
    engine, clock = make(rules, "jobs")
    [old] = engine.receive("jobs", visibility_s=1)
    clock.advance(1)
    [new] = engine.receive("jobs")
    answer = delete(engine, "jobs", old.receipt_handle)
    assert (answer and answer[0]) == stale
    # Either way the message received again is still there, and its latest handle works.
    assert engine.counts("jobs") == QueueCounts(0, 1, 0)
    assert delete(engine, "jobs", new.receipt_handle) is None
    assert engine.counts("jobs") == QueueCounts(0, 0, 0)


@pytest.mark.parametrize("rules", list(HandleRules))
def test_a_handle_never_issued_is_refused(rules: HandleRules) -> None:
    engine, _ = make(rules, "jobs")
    assert delete(engine, "jobs", "garbage")[0] == "ReceiptHandleIsInvalid"  # type: ignore[index]


@pytest.mark.parametrize("rules", list(HandleRules))
def test_standard_latest_handle_deletes_after_the_lease_lapsed(rules: HandleRules) -> None:
    engine, clock = make(rules, "jobs")
    [message] = engine.receive("jobs", visibility_s=5)
    clock.advance(10)
    assert delete(engine, "jobs", message.receipt_handle) is None
    assert engine.counts("jobs") == QueueCounts(0, 0, 0)


@pytest.mark.parametrize("rules", list(HandleRules))
def test_fifo_refuses_an_expired_handle(rules: HandleRules) -> None:
    engine, clock = make(rules, "jobs.fifo")
    [message] = engine.receive("jobs.fifo", visibility_s=5)
    clock.advance(5)
    assert delete(engine, "jobs.fifo", message.receipt_handle) == EXPIRED
    assert engine.counts("jobs.fifo") == QueueCounts(1, 0, 0)  # nothing lost
    [again] = engine.receive("jobs.fifo")
    # Received again: the first handle stays expired, the new one deletes.
    assert delete(engine, "jobs.fifo", message.receipt_handle) == EXPIRED
    assert delete(engine, "jobs.fifo", again.receipt_handle) is None


@pytest.mark.parametrize(
    ("rules", "repeat"),
    [(HandleRules.SQS, None), (HandleRules.STRICT, "ReceiptHandleIsInvalid")],
)
def test_fifo_second_delete(rules: HandleRules, repeat: str | None) -> None:
    engine, _ = make(rules, "jobs.fifo")
    [message] = engine.receive("jobs.fifo")
    assert delete(engine, "jobs.fifo", message.receipt_handle) is None
    again = delete(engine, "jobs.fifo", message.receipt_handle)
    assert (again and again[0]) == repeat


@pytest.mark.parametrize("rules", list(HandleRules))
def test_visibility_changes_keep_one_rule(rules: HandleRules) -> None:
    engine, clock = make(rules, "jobs")
    [old] = engine.receive("jobs", visibility_s=1)
    clock.advance(1)
    change = [VisibilityChange("x", old.receipt_handle, 10)]
    assert outcome(engine.change_visibility("jobs", change))[0] == "MessageNotInflight"  # type: ignore[index]
    engine.receive("jobs")
    assert outcome(engine.change_visibility("jobs", change))[0] == "ReceiptHandleIsInvalid"  # type: ignore[index]
