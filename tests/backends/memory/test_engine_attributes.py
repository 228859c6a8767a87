"""The engine's queue attributes after creation: `set_queue_attributes`, `describe_queue`,
`list_queues(prefix)`, `check_batch` and `sequence_number`, driven by a `ManualClock`."""

from __future__ import annotations

import pytest

from backends.memory.engine import UNCHANGED, MemoryEngine
from worker.clock import ManualClock
from worker.errors import FatalBackendError, QueueNotFound
from worker.types import OutgoingMessage, QueueSpec, RedrivePolicy

WALL = 1_700_000_000.0


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1000.0, wall_offset_s=WALL - 1000.0)


@pytest.fixture
def engine(clock: ManualClock) -> MemoryEngine:
    return MemoryEngine(clock)


def send(engine: MemoryEngine, queue: str, body: str, **fields: object) -> str:
    result = engine.send(queue, [OutgoingMessage(body=body, **fields)])  # type: ignore[arg-type]
    assert not result.failed, result.failed
    return result.message_ids["0"]


def test_new_visibility_timeout_applies_to_later_receives(
    engine: MemoryEngine, clock: ManualClock
) -> None:
    engine.create_queue(QueueSpec("q", visibility_timeout_s=30))
    send(engine, "q", "a")
    engine.set_queue_attributes("q", visibility_timeout_s=5)
    assert engine.queue_info("q").visibility_timeout_s == 5
    [message] = engine.receive("q")
    clock.advance(5)
    [again] = engine.receive("q")
    assert again.message_id == message.message_id


def test_new_delay_applies_to_later_sends_only(engine: MemoryEngine, clock: ManualClock) -> None:
    engine.create_queue(QueueSpec("q"))
    send(engine, "q", "before")
    engine.set_queue_attributes("q", delay_s=10)
    send(engine, "q", "after")
    assert [m.body for m in engine.receive("q", 10)] == ["before"]
    clock.advance(10)
    assert [m.body for m in engine.receive("q", 10)] == ["after"]


def test_shorter_retention_expires_stored_messages(
    engine: MemoryEngine, clock: ManualClock
) -> None:
    engine.create_queue(QueueSpec("q", retention_s=3600))
    send(engine, "q", "old")
    clock.advance(120)
    send(engine, "q", "new")
    engine.set_queue_attributes("q", retention_s=100)
    assert [m.body for m in engine.receive("q", 10)] == ["new"]
    clock.advance(100)
    assert engine.counts("q").in_flight == 0


def test_longer_retention_keeps_stored_messages(engine: MemoryEngine, clock: ManualClock) -> None:
    engine.create_queue(QueueSpec("q", retention_s=60))
    send(engine, "q", "m")
    engine.set_queue_attributes("q", retention_s=600)
    clock.advance(300)
    assert [m.body for m in engine.receive("q")] == ["m"]


def test_redrive_policy_added_then_removed(engine: MemoryEngine) -> None:
    engine.create_queue(QueueSpec("dlq"))
    engine.create_queue(QueueSpec("q"))
    engine.set_queue_attributes("q", redrive=RedrivePolicy("dlq", 1))
    send(engine, "q", "m")
    engine.receive("q", visibility_s=0)
    assert engine.receive("q") == []
    assert [m.body for m in engine.receive("dlq")] == ["m"]

    engine.set_queue_attributes("q", visibility_timeout_s=0)
    assert engine.queue_info("q").redrive == RedrivePolicy("dlq", 1), "kept when not given"
    engine.set_queue_attributes("q", redrive=None)
    send(engine, "q", "n")
    for count in (1, 2, 3):
        [message] = engine.receive("q")
        assert message.receive_count == count


def test_unchanged_is_the_default(engine: MemoryEngine) -> None:
    engine.create_queue(QueueSpec("dlq"))
    engine.create_queue(QueueSpec("q", redrive=RedrivePolicy("dlq", 3)))
    engine.set_queue_attributes("q", redrive=UNCHANGED, delay_s=1)
    info = engine.queue_info("q")
    assert info.redrive == RedrivePolicy("dlq", 3)
    assert info.delay_s == 1


@pytest.mark.parametrize(
    ("changes", "code"),
    [
        ({"visibility_timeout_s": 43_201}, "InvalidAttributeValue"),
        ({"delay_s": -1}, "InvalidAttributeValue"),
        ({"retention_s": 59}, "InvalidAttributeValue"),
        ({"redrive": RedrivePolicy("dlq", 0)}, "InvalidAttributeValue"),
        ({"redrive": RedrivePolicy("missing", 3)}, "InvalidParameterValue"),
        ({"redrive": RedrivePolicy("q", 3)}, "InvalidParameterValue"),
        ({"redrive": RedrivePolicy("dlq.fifo", 3)}, "InvalidParameterValue"),
        ({"content_based_deduplication": True}, "InvalidAttributeName"),
    ],
)
def test_invalid_changes_are_refused_and_change_nothing(
    engine: MemoryEngine, changes: dict[str, object], code: str
) -> None:
    engine.create_queue(QueueSpec("dlq"))
    engine.create_queue(QueueSpec("dlq.fifo"))
    engine.create_queue(QueueSpec("q", visibility_timeout_s=7))
    before = engine.describe_queue("q")
    with pytest.raises(FatalBackendError) as caught:
        engine.set_queue_attributes("q", **changes)  # type: ignore[arg-type]
    assert caught.value.code == code
    assert caught.value.operation == "SetQueueAttributes"
    assert engine.describe_queue("q") == before


def test_content_based_deduplication_can_be_switched_on_a_fifo_queue(
    engine: MemoryEngine,
) -> None:
    engine.create_queue(QueueSpec("f.fifo"))
    engine.set_queue_attributes("f.fifo", content_based_deduplication=True)
    first = send(engine, "f.fifo", "same", group_id="g")
    assert send(engine, "f.fifo", "same", group_id="g") == first


def test_unknown_queue(engine: MemoryEngine) -> None:
    with pytest.raises(QueueNotFound):
        engine.set_queue_attributes("nope", delay_s=1)
    with pytest.raises(QueueNotFound):
        engine.describe_queue("nope")


def test_describe_queue(engine: MemoryEngine, clock: ManualClock) -> None:
    engine.create_queue(QueueSpec("q"))
    send(engine, "q", "a")
    send(engine, "q", "b")
    send(engine, "q", "later", delay_s=60)
    engine.receive("q")
    clock.advance(20.5)
    engine.set_queue_attributes("q", delay_s=2)
    description = engine.describe_queue("q")
    assert (description.counts.visible, description.counts.in_flight) == (1, 1)
    assert description.counts.delayed == 1
    assert description.created_timestamp == int(WALL)
    assert description.last_modified_timestamp == int(WALL + 20.5)
    assert description.config.delay_s == 2


def test_list_queues_with_a_prefix(engine: MemoryEngine) -> None:
    for name in ("orders", "orders-dlq", "emails", "orders.fifo"):
        engine.create_queue(QueueSpec(name))
    assert engine.list_queues() == ["emails", "orders", "orders-dlq", "orders.fifo"]
    assert engine.list_queues("orders") == ["orders", "orders-dlq", "orders.fifo"]
    assert engine.list_queues("x") == []


@pytest.mark.parametrize(
    ("ids", "code"),
    [
        ([], "AWS.SimpleQueueService.EmptyBatchRequest"),
        ([f"e{i}" for i in range(11)], "AWS.SimpleQueueService.TooManyEntriesInBatchRequest"),
        (["a b"], "AWS.SimpleQueueService.InvalidBatchEntryId"),
        (["a", "a"], "AWS.SimpleQueueService.BatchEntryIdsNotDistinct"),
    ],
)
def test_check_batch(engine: MemoryEngine, ids: list[str], code: str) -> None:
    with pytest.raises(FatalBackendError) as caught:
        engine.check_batch("SendMessageBatch", "q", ids)
    assert caught.value.code == code
    engine.check_batch("SendMessageBatch", "q", ["a", "b"])


def test_sequence_numbers(engine: MemoryEngine) -> None:
    engine.create_queue(QueueSpec("f.fifo", content_based_deduplication=True))
    engine.create_queue(QueueSpec("q"))
    first = send(engine, "f.fifo", "a", group_id="g")
    second = send(engine, "f.fifo", "b", group_id="g")
    one, two = engine.sequence_number("f.fifo", first), engine.sequence_number("f.fifo", second)
    assert one is not None and two is not None and int(one) < int(two)
    assert engine.sequence_number("q", send(engine, "q", "m")) is None
    assert engine.sequence_number("q", "gone") is None
