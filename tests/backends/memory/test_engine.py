"""The in-memory SQS model, driven synchronously by a `ManualClock`: one test per rule."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import pytest

from backends.memory.engine import (
    QUEUE_URL_PREFIX,
    SQS_DIALECT,
    MemoryEngine,
    MessageState,
    QueueCounts,
)
from worker.clock import ManualClock
from worker.errors import FatalBackendError, OverLimit, QueueNotFound
from worker.types import (
    BatchResult,
    Deletion,
    MessageAttribute,
    OutgoingMessage,
    QueueSpec,
    ReceivedMessage,
    RedrivePolicy,
    VisibilityChange,
)

WALL = 1_700_000_000.0


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1000.0, wall_offset_s=WALL - 1000.0)


@pytest.fixture
def engine(clock: ManualClock) -> MemoryEngine:
    return MemoryEngine(clock)


def send(engine: MemoryEngine, queue: str, *bodies: str, **fields: object) -> list[str]:
    """Send `bodies` in batches; returns the message ids, failing on any failed entry."""
    ids: list[str] = []
    for start in range(0, len(bodies), 10):
        batch = [
            OutgoingMessage(body=body, entry_id=f"e{i}", **fields)  # type: ignore[arg-type]
            for i, body in enumerate(bodies[start : start + 10])
        ]
        result = engine.send(queue, batch)
        assert not result.failed, result.failed
        ids.extend(result.message_ids[m.entry_id] for m in batch)
    return ids


def extend(engine: MemoryEngine, queue: str, handle: str, visibility_s: int) -> BatchResult:
    return engine.change_visibility(queue, [VisibilityChange("x", handle, visibility_s)])


def delete(engine: MemoryEngine, queue: str, handle: str) -> BatchResult:
    return engine.delete(queue, [Deletion("x", handle)])


def only_code(result: BatchResult) -> str | None:
    """The single entry's failure code, or None when it succeeded."""
    assert len(result.succeeded) + len(result.failed) == 1
    return result.failed[0].code if result.failed else None


def bodies(messages: Sequence[ReceivedMessage]) -> list[str]:
    return [m.body for m in messages]


# -- queues ----------------------------------------------------------------------------------


def test_create_is_idempotent_and_returns_the_url(engine: MemoryEngine) -> None:
    url = engine.create_queue(QueueSpec("jobs"))
    assert url == "http://memory.invalid/000000000000/jobs" == QUEUE_URL_PREFIX + "jobs"
    assert engine.create_queue(QueueSpec("jobs")) == url
    assert engine.queue_url("jobs") == url
    assert engine.list_queues() == ["jobs"]


def test_create_with_other_attributes_fails(engine: MemoryEngine) -> None:
    engine.create_queue(QueueSpec("jobs", visibility_timeout_s=30))
    with pytest.raises(FatalBackendError) as caught:
        engine.create_queue(QueueSpec("jobs", visibility_timeout_s=60))
    assert caught.value.code == "QueueAlreadyExists"


def test_fifo_suffix_makes_a_fifo_queue(engine: MemoryEngine) -> None:
    engine.create_queue(QueueSpec("jobs"))
    engine.create_queue(QueueSpec("jobs.fifo"))
    assert not engine.queue_info("jobs").fifo
    assert engine.queue_info("jobs.fifo").fifo


def test_a_queue_is_accepted_by_name_or_url(engine: MemoryEngine) -> None:
    url = engine.create_queue(QueueSpec("jobs"))
    [message_id] = send(engine, url, "a")
    [message] = engine.receive("jobs")
    assert message.message_id == message_id
    assert message.queue == "jobs"
    assert delete(engine, url, message.receipt_handle).succeeded == ("x",)
    assert engine.queue_info(url).name == "jobs"


@pytest.mark.parametrize(
    ("operation", "call"),
    [
        ("GetQueueUrl", lambda e: e.queue_url("nope")),
        ("SendMessageBatch", lambda e: e.send("nope", [OutgoingMessage(body="a")])),
        ("ReceiveMessage", lambda e: e.receive("nope")),
        ("ChangeMessageVisibilityBatch", lambda e: extend(e, "nope", "h", 1)),
        ("DeleteMessageBatch", lambda e: delete(e, QUEUE_URL_PREFIX + "nope", "h")),
        ("GetQueueAttributes", lambda e: e.queue_info("nope")),
        ("PurgeQueue", lambda e: e.purge("nope")),
        ("DeleteQueue", lambda e: e.delete_queue("nope")),
    ],
)
def test_unknown_queue_raises_queue_not_found(
    engine: MemoryEngine, operation: str, call: object
) -> None:
    with pytest.raises(QueueNotFound) as caught:
        call(engine)  # type: ignore[operator]
    assert caught.value.code == "AWS.SimpleQueueService.NonExistentQueue"
    assert caught.value.operation == operation
    assert caught.value.queue == "nope"


def test_delete_queue_then_the_name_is_reserved_for_60_s(
    engine: MemoryEngine, clock: ManualClock
) -> None:
    engine.create_queue(QueueSpec("jobs"))
    engine.delete_queue("jobs")
    with pytest.raises(QueueNotFound):
        engine.receive("jobs")
    with pytest.raises(FatalBackendError) as caught:
        engine.create_queue(QueueSpec("jobs"))
    assert caught.value.code == "AWS.SimpleQueueService.QueueDeletedRecently"
    clock.advance(60)
    engine.create_queue(QueueSpec("jobs"))


def test_purge_drops_everything_once_per_60_s(engine: MemoryEngine, clock: ManualClock) -> None:
    engine.create_queue(QueueSpec("jobs", delay_s=5))
    send(engine, "jobs", "a", "b")
    engine.purge("jobs")
    assert engine.counts("jobs") == QueueCounts(0, 0, 0)
    with pytest.raises(FatalBackendError) as caught:
        engine.purge("jobs")
    assert caught.value.code == "AWS.SimpleQueueService.PurgeQueueInProgress"
    clock.advance(60)
    engine.purge("jobs")


@pytest.mark.parametrize("name", ["", "a b", "x" * 81, "jobs.fifo.fifo", "ü"])
def test_invalid_queue_names_are_refused(engine: MemoryEngine, name: str) -> None:
    with pytest.raises(FatalBackendError) as caught:
        engine.create_queue(QueueSpec(name))
    assert caught.value.code == "InvalidParameterValue"


def test_an_80_character_name_is_fine(engine: MemoryEngine) -> None:
    engine.create_queue(QueueSpec("x" * 75 + ".fifo"))
    engine.create_queue(QueueSpec("x" * 80))


@pytest.mark.parametrize(
    "attributes",
    [
        {"visibility_timeout_s": 43_201},
        {"visibility_timeout_s": -1},
        {"delay_s": 901},
        {"retention_s": 59},
        {"retention_s": 1_209_601},
    ],
)
def test_queue_attributes_out_of_range_are_refused(
    engine: MemoryEngine, attributes: dict[str, int]
) -> None:
    with pytest.raises(FatalBackendError) as caught:
        engine.create_queue(QueueSpec("jobs", **attributes))  # type: ignore[arg-type]
    assert caught.value.code == "InvalidAttributeValue"


def test_content_based_deduplication_is_for_fifo_queues(engine: MemoryEngine) -> None:
    with pytest.raises(FatalBackendError) as caught:
        engine.create_queue(QueueSpec("jobs", content_based_deduplication=True))
    assert caught.value.code == "InvalidAttributeName"


def test_redrive_needs_an_existing_dlq_of_the_same_kind(engine: MemoryEngine) -> None:
    engine.create_queue(QueueSpec("dlq"))
    with pytest.raises(FatalBackendError, match="no such DLQ"):
        engine.create_queue(QueueSpec("jobs", redrive=RedrivePolicy("missing", 3)))
    with pytest.raises(FatalBackendError, match="another type"):
        engine.create_queue(QueueSpec("jobs.fifo", redrive=RedrivePolicy("dlq", 3)))
    with pytest.raises(FatalBackendError) as caught:
        engine.create_queue(QueueSpec("jobs", redrive=RedrivePolicy("dlq", 0)))
    assert caught.value.code == "InvalidAttributeValue"


# -- per-queue settings ----------------------------------------------------------------------


def test_default_visibility_timeout_hides_a_received_message(
    engine: MemoryEngine, clock: ManualClock
) -> None:
    engine.create_queue(QueueSpec("jobs", visibility_timeout_s=30))
    send(engine, "jobs", "a")
    assert len(engine.receive("jobs")) == 1
    assert engine.counts("jobs") == QueueCounts(visible=0, in_flight=1, delayed=0)
    clock.advance(29.9)
    assert engine.receive("jobs") == []
    clock.advance(0.1)
    assert bodies(engine.receive("jobs")) == ["a"]


def test_receive_can_override_the_visibility_timeout(
    engine: MemoryEngine, clock: ManualClock
) -> None:
    engine.create_queue(QueueSpec("jobs", visibility_timeout_s=30))
    send(engine, "jobs", "a")
    engine.receive("jobs", visibility_s=5)
    clock.advance(5)
    assert bodies(engine.receive("jobs")) == ["a"]


def test_queue_delay_holds_messages_back(engine: MemoryEngine, clock: ManualClock) -> None:
    engine.create_queue(QueueSpec("jobs", delay_s=10))
    send(engine, "jobs", "a")
    assert engine.counts("jobs") == QueueCounts(visible=0, in_flight=0, delayed=1)
    assert engine.receive("jobs") == []
    clock.advance(10)
    assert engine.counts("jobs") == QueueCounts(visible=1, in_flight=0, delayed=0)
    assert bodies(engine.receive("jobs")) == ["a"]


def test_message_delay_overrides_the_queue_delay(engine: MemoryEngine, clock: ManualClock) -> None:
    engine.create_queue(QueueSpec("jobs", delay_s=100))
    send(engine, "jobs", "a", delay_s=3)
    clock.advance(3)
    assert bodies(engine.receive("jobs")) == ["a"]


def test_an_explicit_zero_delay_overrides_the_queue_delay(
    engine: MemoryEngine, clock: ManualClock
) -> None:
    engine.create_queue(QueueSpec("jobs", delay_s=100))
    send(engine, "jobs", "now", delay_s=0)
    send(engine, "jobs", "later")  # no delay given: the queue's 100 s
    assert bodies(engine.receive("jobs", 10, visibility_s=1000)) == ["now"]
    clock.advance(100)
    assert bodies(engine.receive("jobs", 10)) == ["later"]


def test_expired_messages_disappear(engine: MemoryEngine, clock: ManualClock) -> None:
    engine.create_queue(QueueSpec("jobs", retention_s=60))
    [first] = send(engine, "jobs", "old")
    clock.advance(30)
    send(engine, "jobs", "new")
    [received] = engine.receive("jobs")
    assert received.body == "old"
    clock.advance(30)
    assert engine.peek("jobs", first) is None
    assert engine.counts("jobs") == QueueCounts(visible=1, in_flight=0, delayed=0)
    assert only_code(delete(engine, "jobs", received.receipt_handle)) == "ReceiptHandleIsInvalid"
    clock.advance(30)
    assert engine.counts("jobs") == QueueCounts(0, 0, 0)


# -- redrive ---------------------------------------------------------------------------------


def test_redrive_moves_a_message_on_receive_max_plus_one(
    engine: MemoryEngine, clock: ManualClock
) -> None:
    engine.create_queue(QueueSpec("dlq"))
    engine.create_queue(QueueSpec("jobs", redrive=RedrivePolicy("dlq", max_receive_count=2)))
    [message_id] = send(engine, "jobs", "poison")
    for count in (1, 2):
        [message] = engine.receive("jobs", visibility_s=1)
        assert message.receive_count == count
        clock.advance(1)
    assert engine.receive("jobs") == []
    assert engine.counts("jobs") == QueueCounts(0, 0, 0)
    [dead] = engine.receive("dlq")
    assert (dead.message_id, dead.body) == (message_id, "poison")
    # The receive count carries over: the DLQ's consumer sees how often it was tried.
    assert dead.receive_count == 3
    assert dead.queue == "dlq"


def test_redrive_by_url_and_delivers_the_next_message(engine: MemoryEngine) -> None:
    dlq = engine.create_queue(QueueSpec("dlq"))
    engine.create_queue(QueueSpec("jobs", redrive=RedrivePolicy(dlq, max_receive_count=1)))
    send(engine, "jobs", "first", "second")
    engine.receive("jobs", visibility_s=0)
    # "first" was received once: this receive delivers "second" and moves "first".
    assert bodies(engine.receive("jobs", 10)) == ["second"]
    assert bodies(engine.receive("dlq")) == ["first"]


def test_redrive_on_fifo_keeps_group_and_dedup_id(engine: MemoryEngine) -> None:
    engine.create_queue(QueueSpec("dlq.fifo"))
    engine.create_queue(
        QueueSpec(
            "jobs.fifo",
            redrive=RedrivePolicy("dlq.fifo", max_receive_count=1),
            content_based_deduplication=True,
        )
    )
    send(engine, "jobs.fifo", "a", "b", group_id="g")
    [first] = engine.receive("jobs.fifo", 1, visibility_s=0)
    assert first.body == "a"
    assert bodies(engine.receive("jobs.fifo", 10)) == ["b"]
    [dead] = engine.receive("dlq.fifo")
    assert dead.body == "a"
    assert dead.group_id == "g"
    assert dead.attributes["MessageDeduplicationId"] == first.attributes["MessageDeduplicationId"]


def test_released_message_is_not_redriven_until_received(engine: MemoryEngine) -> None:
    engine.create_queue(QueueSpec("dlq"))
    engine.create_queue(QueueSpec("jobs", redrive=RedrivePolicy("dlq", max_receive_count=1)))
    send(engine, "jobs", "a")
    [message] = engine.receive("jobs")
    assert only_code(extend(engine, "jobs", message.receipt_handle, 0)) is None
    assert engine.counts("jobs") == QueueCounts(visible=1, in_flight=0, delayed=0)
    assert engine.counts("dlq") == QueueCounts(0, 0, 0)


def test_without_its_dlq_a_message_is_delivered(engine: MemoryEngine, clock: ManualClock) -> None:
    engine.create_queue(QueueSpec("dlq"))
    engine.create_queue(QueueSpec("jobs", redrive=RedrivePolicy("dlq", max_receive_count=1)))
    send(engine, "jobs", "a")
    engine.receive("jobs", visibility_s=0)
    engine.delete_queue("dlq")
    assert [m.receive_count for m in engine.receive("jobs")] == [2]


def test_standard_dlq_keeps_the_retention_clock(engine: MemoryEngine, clock: ManualClock) -> None:
    engine.create_queue(QueueSpec("dlq", retention_s=100))
    engine.create_queue(QueueSpec("jobs", redrive=RedrivePolicy("dlq", max_receive_count=1)))
    send(engine, "jobs", "a")
    engine.receive("jobs", visibility_s=0)
    clock.advance(60)
    engine.receive("jobs")
    assert engine.counts("dlq").visible == 1
    clock.advance(40)  # 100 s after the original send
    assert engine.counts("dlq").visible == 0


# -- attributes and handles ------------------------------------------------------------------


def test_received_attributes_are_spelled_like_sqs(engine: MemoryEngine, clock: ManualClock) -> None:
    engine.create_queue(QueueSpec("jobs"))
    send(engine, "jobs", "a")
    sent_ms = int(WALL * 1000)
    clock.advance(2)
    [first] = engine.receive("jobs", visibility_s=0)
    clock.advance(3)
    [second] = engine.receive("jobs")
    assert first.attributes["SentTimestamp"] == str(sent_ms)
    assert first.attributes["ApproximateReceiveCount"] == "1"
    assert first.attributes["ApproximateFirstReceiveTimestamp"] == str(sent_ms + 2000)
    assert second.attributes["ApproximateReceiveCount"] == "2"
    assert second.receive_count == 2
    assert second.attributes["ApproximateFirstReceiveTimestamp"] == str(sent_ms + 2000)
    assert "MessageGroupId" not in first.attributes
    assert first.receipt_handle != second.receipt_handle


def test_message_attributes_come_back(engine: MemoryEngine) -> None:
    engine.create_queue(QueueSpec("jobs"))
    attributes = {"kind": MessageAttribute("String", string_value="invoice")}
    send(engine, "jobs", "a", message_attributes=attributes)
    [message] = engine.receive("jobs")
    assert dict(message.message_attributes) == attributes


def test_fifo_attributes(engine: MemoryEngine) -> None:
    engine.create_queue(QueueSpec("jobs.fifo"))
    send(engine, "jobs.fifo", "a", group_id="g", deduplication_id="d1")
    send(engine, "jobs.fifo", "b", group_id="g", deduplication_id="d2")
    first, second = engine.receive("jobs.fifo", 10)
    assert first.attributes["MessageGroupId"] == first.group_id == "g"
    assert first.attributes["MessageDeduplicationId"] == "d1"
    assert len(first.attributes["SequenceNumber"]) == 20
    assert int(first.attributes["SequenceNumber"]) < int(second.attributes["SequenceNumber"])


def test_visibility_out_of_range_fails_per_entry(engine: MemoryEngine) -> None:
    engine.create_queue(QueueSpec("jobs"))
    send(engine, "jobs", "a")
    [message] = engine.receive("jobs")
    result = engine.change_visibility(
        "jobs",
        [
            VisibilityChange("low", message.receipt_handle, -1),
            VisibilityChange("high", message.receipt_handle, 43_201),
            VisibilityChange("ok", message.receipt_handle, 60),
        ],
    )
    assert result.succeeded == ("ok",)
    assert {f.entry_id: f.code for f in result.failed} == {
        "low": "InvalidParameterValue",
        "high": "InvalidParameterValue",
    }
    assert all(f.sender_fault for f in result.failed)


def test_receive_visibility_out_of_range_fails_the_call(engine: MemoryEngine) -> None:
    engine.create_queue(QueueSpec("jobs"))
    with pytest.raises(FatalBackendError) as caught:
        engine.receive("jobs", visibility_s=43_201)
    assert caught.value.code == "InvalidParameterValue"


def test_twelve_hour_cap_counts_from_the_receive(engine: MemoryEngine, clock: ManualClock) -> None:
    engine.create_queue(QueueSpec("jobs"))
    send(engine, "jobs", "a")
    [message] = engine.receive("jobs", visibility_s=600)
    handle = message.receipt_handle
    clock.advance(100)
    assert only_code(extend(engine, "jobs", handle, 43_200)) == "InvalidParameterValue"
    assert only_code(extend(engine, "jobs", handle, 43_100)) is None
    clock.advance(43_000)
    assert only_code(extend(engine, "jobs", handle, 101)) == "InvalidParameterValue"
    assert only_code(extend(engine, "jobs", handle, 100)) is None
    clock.advance(100)
    assert bodies(engine.receive("jobs")) == ["a"]


def test_a_new_receive_restarts_the_twelve_hours(engine: MemoryEngine, clock: ManualClock) -> None:
    engine.create_queue(QueueSpec("jobs"))
    send(engine, "jobs", "a")
    engine.receive("jobs", visibility_s=40_000)
    clock.advance(40_000)
    [again] = engine.receive("jobs")
    assert only_code(extend(engine, "jobs", again.receipt_handle, 43_200)) is None


def test_visibility_zero_makes_it_visible_at_once(engine: MemoryEngine) -> None:
    engine.create_queue(QueueSpec("jobs"))
    send(engine, "jobs", "a")
    [message] = engine.receive("jobs")
    assert only_code(extend(engine, "jobs", message.receipt_handle, 0)) is None
    assert engine.counts("jobs") == QueueCounts(visible=1, in_flight=0, delayed=0)
    assert [m.receive_count for m in engine.receive("jobs")] == [2]


def test_only_the_latest_handle_is_valid(engine: MemoryEngine, clock: ManualClock) -> None:
    engine.create_queue(QueueSpec("jobs"))
    send(engine, "jobs", "a")
    [old] = engine.receive("jobs", visibility_s=1)
    clock.advance(1)
    [new] = engine.receive("jobs")
    assert only_code(extend(engine, "jobs", old.receipt_handle, 10)) == "ReceiptHandleIsInvalid"
    assert only_code(delete(engine, "jobs", old.receipt_handle)) == "ReceiptHandleIsInvalid"
    assert only_code(extend(engine, "jobs", "garbage", 10)) == "ReceiptHandleIsInvalid"
    assert only_code(delete(engine, "jobs", "garbage")) == "ReceiptHandleIsInvalid"
    assert only_code(extend(engine, "jobs", new.receipt_handle, 10)) is None


def test_handles_do_not_cross_queues(engine: MemoryEngine) -> None:
    engine.create_queue(QueueSpec("a"))
    engine.create_queue(QueueSpec("b"))
    send(engine, "a", "x")
    [message] = engine.receive("a")
    assert only_code(delete(engine, "b", message.receipt_handle)) == "ReceiptHandleIsInvalid"


def test_lapsed_lease_is_not_in_flight(engine: MemoryEngine, clock: ManualClock) -> None:
    engine.create_queue(QueueSpec("jobs"))
    send(engine, "jobs", "a")
    [message] = engine.receive("jobs", visibility_s=5)
    clock.advance(5)
    assert only_code(extend(engine, "jobs", message.receipt_handle, 10)) == "MessageNotInflight"


def test_released_message_is_not_in_flight(engine: MemoryEngine) -> None:
    engine.create_queue(QueueSpec("jobs"))
    send(engine, "jobs", "a")
    [message] = engine.receive("jobs")
    extend(engine, "jobs", message.receipt_handle, 0)
    assert only_code(extend(engine, "jobs", message.receipt_handle, 10)) == "MessageNotInflight"


def test_delete_with_the_latest_handle_after_the_lease_lapsed(
    engine: MemoryEngine, clock: ManualClock
) -> None:
    engine.create_queue(QueueSpec("jobs"))
    send(engine, "jobs", "a")
    [message] = engine.receive("jobs", visibility_s=5)
    clock.advance(10)
    assert only_code(delete(engine, "jobs", message.receipt_handle)) is None
    assert engine.counts("jobs") == QueueCounts(0, 0, 0)
    # Stricter than SQS: a repeated delete is refused too.
    assert only_code(delete(engine, "jobs", message.receipt_handle)) == "ReceiptHandleIsInvalid"


# -- batches ---------------------------------------------------------------------------------

BATCH_CALLS = {
    "send": lambda e, ids: e.send("jobs", [OutgoingMessage(body="a", entry_id=i) for i in ids]),
    "visibility": lambda e, ids: e.change_visibility(
        "jobs", [VisibilityChange(i, "h", 1) for i in ids]
    ),
    "delete": lambda e, ids: e.delete("jobs", [Deletion(i, "h") for i in ids]),
}


@pytest.mark.parametrize("call", BATCH_CALLS.values(), ids=BATCH_CALLS.keys())
@pytest.mark.parametrize(
    ("ids", "code"),
    [
        ([f"e{i}" for i in range(11)], "AWS.SimpleQueueService.TooManyEntriesInBatchRequest"),
        ([], "AWS.SimpleQueueService.EmptyBatchRequest"),
        (["a", "b", "a"], "AWS.SimpleQueueService.BatchEntryIdsNotDistinct"),
        (["a b"], "AWS.SimpleQueueService.InvalidBatchEntryId"),
        (["x" * 81], "AWS.SimpleQueueService.InvalidBatchEntryId"),
    ],
)
def test_bad_batches_fail_the_whole_call(
    engine: MemoryEngine, call: object, ids: list[str], code: str
) -> None:
    engine.create_queue(QueueSpec("jobs"))
    with pytest.raises(FatalBackendError) as caught:
        call(engine, ids)  # type: ignore[operator]
    assert caught.value.code == code
    assert caught.value.queue == "jobs"
    assert engine.counts("jobs") == QueueCounts(0, 0, 0)


@pytest.mark.parametrize("call", BATCH_CALLS.values(), ids=BATCH_CALLS.keys())
def test_ten_entries_are_fine(engine: MemoryEngine, call: object) -> None:
    engine.create_queue(QueueSpec("jobs"))
    result = call(engine, [f"e{i}" for i in range(10)])  # type: ignore[operator]
    assert len(result.succeeded) + len(result.failed) == 10


def test_partial_failure_is_a_value(engine: MemoryEngine) -> None:
    engine.create_queue(QueueSpec("jobs"))
    send(engine, "jobs", "a")
    [message] = engine.receive("jobs")
    result = engine.delete("jobs", [Deletion("ok", message.receipt_handle), Deletion("bad", "h")])
    assert result.succeeded == ("ok",)
    failure = result.failure("bad")
    assert failure is not None
    assert (failure.code, failure.sender_fault) == ("ReceiptHandleIsInvalid", True)


def test_send_returns_message_ids_by_entry(engine: MemoryEngine) -> None:
    engine.create_queue(QueueSpec("jobs"))
    result = engine.send(
        "jobs", [OutgoingMessage(body="a", entry_id="x"), OutgoingMessage(body="b", entry_id="y")]
    )
    assert result.succeeded == ("x", "y")
    assert len(set(result.message_ids.values())) == 2
    got = {m.body: m.message_id for m in engine.receive("jobs", 10)}
    assert got == {"a": result.message_ids["x"], "b": result.message_ids["y"]}


@pytest.mark.parametrize(
    ("message", "code"),
    [
        (OutgoingMessage(body=""), "MissingParameter"),
        (OutgoingMessage(body="bell \x07"), "InvalidMessageContents"),
        (OutgoingMessage(body="lone \ud800"), "InvalidMessageContents"),
        (OutgoingMessage(body="a", delay_s=901), "InvalidParameterValue"),
        (OutgoingMessage(body="a", delay_s=-1), "InvalidParameterValue"),
        (OutgoingMessage(body="a", deduplication_id="d"), "InvalidParameterValue"),
    ],
)
def test_invalid_messages_fail_per_entry(
    engine: MemoryEngine, message: OutgoingMessage, code: str
) -> None:
    engine.create_queue(QueueSpec("jobs"))
    result = engine.send("jobs", [message, OutgoingMessage(body="fine", entry_id="ok")])
    assert result.succeeded == ("ok",)
    assert [f.code for f in result.failed] == [code]
    assert engine.counts("jobs").visible == 1


@pytest.mark.parametrize("sizes", [[1_048_577], [600_000, 500_000]])
def test_a_batch_over_the_size_limit_fails_the_call(engine: MemoryEngine, sizes: list[int]) -> None:
    engine.create_queue(QueueSpec("jobs"))
    batch = [OutgoingMessage(body="x" * size, entry_id=f"e{i}") for i, size in enumerate(sizes)]
    with pytest.raises(FatalBackendError) as caught:
        engine.send("jobs", batch)
    assert caught.value.code == "AWS.SimpleQueueService.BatchRequestTooLong"
    send(engine, "jobs", "x" * 1_048_576)


def test_standard_queues_take_a_group_id(engine: MemoryEngine) -> None:
    engine.create_queue(QueueSpec("jobs"))
    send(engine, "jobs", "a", group_id="tenant-1")
    [message] = engine.receive("jobs")
    assert message.group_id == "tenant-1"


# -- receive ---------------------------------------------------------------------------------


@pytest.mark.parametrize("count", [0, 11])
def test_receive_takes_one_to_ten(engine: MemoryEngine, count: int) -> None:
    engine.create_queue(QueueSpec("jobs"))
    with pytest.raises(FatalBackendError) as caught:
        engine.receive("jobs", count)
    assert caught.value.code == "InvalidParameterValue"
    assert caught.value.operation == "ReceiveMessage"


def test_standard_queue_delivers_in_order_of_visibility(
    engine: MemoryEngine, clock: ManualClock
) -> None:
    engine.create_queue(QueueSpec("jobs"))
    send(engine, "jobs", *[f"m{i}" for i in range(15)])
    assert bodies(engine.receive("jobs", 10)) == [f"m{i}" for i in range(10)]
    assert bodies(engine.receive("jobs", 1, visibility_s=3)) == ["m10"]
    clock.advance(3)
    assert bodies(engine.receive("jobs", 10)) == ["m11", "m12", "m13", "m14", "m10"]


def test_fifo_group_is_delivered_in_order_and_blocked_while_in_flight(
    engine: MemoryEngine, clock: ManualClock
) -> None:
    engine.create_queue(QueueSpec("jobs.fifo", content_based_deduplication=True))
    send(engine, "jobs.fifo", "a1", "a2", "a3", group_id="a")
    send(engine, "jobs.fifo", "b1", group_id="b")
    first = engine.receive("jobs.fifo", 2)
    assert bodies(first) == ["a1", "a2"]
    # Group a is blocked while a1 and a2 are in flight; group b is not.
    assert bodies(engine.receive("jobs.fifo", 10)) == ["b1"]
    assert engine.receive("jobs.fifo", 10) == []
    delete(engine, "jobs.fifo", first[0].receipt_handle)
    assert engine.receive("jobs.fifo", 10) == []  # a2 still in flight
    extend(engine, "jobs.fifo", first[1].receipt_handle, 0)
    assert bodies(engine.receive("jobs.fifo", 10)) == ["a2", "a3"]


def test_fifo_lapsed_lease_redelivers_the_same_head(
    engine: MemoryEngine, clock: ManualClock
) -> None:
    engine.create_queue(QueueSpec("jobs.fifo", content_based_deduplication=True))
    send(engine, "jobs.fifo", "1", "2", "3", group_id="g")
    assert bodies(engine.receive("jobs.fifo", 1, visibility_s=5)) == ["1"]
    clock.advance(5)
    assert bodies(engine.receive("jobs.fifo", 10)) == ["1", "2", "3"]


def test_fifo_deduplicates_for_five_minutes(engine: MemoryEngine, clock: ManualClock) -> None:
    engine.create_queue(QueueSpec("jobs.fifo"))
    [first] = send(engine, "jobs.fifo", "a", group_id="g", deduplication_id="d")
    clock.advance(299)
    assert send(engine, "jobs.fifo", "other", group_id="g", deduplication_id="d") == [first]
    assert engine.counts("jobs.fifo").visible == 1
    clock.advance(1)
    [second] = send(engine, "jobs.fifo", "a", group_id="g", deduplication_id="d")
    assert second != first
    assert engine.counts("jobs.fifo").visible == 2


def test_fifo_dedup_survives_the_delete(engine: MemoryEngine) -> None:
    engine.create_queue(QueueSpec("jobs.fifo"))
    [first] = send(engine, "jobs.fifo", "a", group_id="g", deduplication_id="d")
    [message] = engine.receive("jobs.fifo")
    delete(engine, "jobs.fifo", message.receipt_handle)
    assert send(engine, "jobs.fifo", "a", group_id="g", deduplication_id="d") == [first]
    assert engine.counts("jobs.fifo") == QueueCounts(0, 0, 0)


def test_content_based_deduplication_hashes_the_body(engine: MemoryEngine) -> None:
    engine.create_queue(QueueSpec("jobs.fifo", content_based_deduplication=True))
    [first] = send(engine, "jobs.fifo", "same", group_id="g")
    assert send(engine, "jobs.fifo", "same", group_id="other") == [first]
    send(engine, "jobs.fifo", "different", group_id="g")
    [message, _] = engine.receive("jobs.fifo", 10)
    assert message.attributes["MessageDeduplicationId"] == hashlib.sha256(b"same").hexdigest()


@pytest.mark.parametrize(
    ("message", "code"),
    [
        (OutgoingMessage(body="a", deduplication_id="d"), "MissingParameter"),
        (OutgoingMessage(body="a", group_id="g"), "InvalidParameterValue"),
        (
            OutgoingMessage(body="a", group_id="g", deduplication_id="d", delay_s=1),
            "InvalidParameterValue",
        ),
        (
            OutgoingMessage(body="a", group_id="g" * 129, deduplication_id="d"),
            "InvalidParameterValue",
        ),
        (OutgoingMessage(body="a", group_id="g", deduplication_id="d\n"), "InvalidParameterValue"),
    ],
)
def test_fifo_send_rules_fail_per_entry(
    engine: MemoryEngine, message: OutgoingMessage, code: str
) -> None:
    engine.create_queue(QueueSpec("jobs.fifo"))
    result = engine.send("jobs.fifo", [message])
    assert [(f.code, f.sender_fault) for f in result.failed] == [(code, True)]
    assert engine.counts("jobs.fifo") == QueueCounts(0, 0, 0)


def test_fifo_queue_delay_applies(engine: MemoryEngine, clock: ManualClock) -> None:
    engine.create_queue(QueueSpec("jobs.fifo", delay_s=4))
    send(engine, "jobs.fifo", "a", group_id="g", deduplication_id="d")
    assert engine.receive("jobs.fifo") == []
    clock.advance(4)
    assert bodies(engine.receive("jobs.fifo")) == ["a"]


# -- in-flight quota -------------------------------------------------------------------------


def test_in_flight_limit(clock: ManualClock) -> None:
    engine = MemoryEngine(clock, max_in_flight=50)
    engine.create_queue(QueueSpec("jobs"))
    send(engine, "jobs", *[str(i) for i in range(60)])
    for _ in range(4):
        assert len(engine.receive("jobs", 10)) == 10
    engine.receive("jobs", 8)
    assert len(engine.receive("jobs", 10)) == 2  # only room for two more
    with pytest.raises(OverLimit) as caught:
        engine.receive("jobs", 10)
    assert (caught.value.code, caught.value.queue) == ("OverLimit", "jobs")
    assert engine.receive("jobs", 10, long_poll=True) == []
    clock.advance(30)
    assert len(engine.receive("jobs", 10)) == 10


def test_in_flight_limit_on_fifo(clock: ManualClock) -> None:
    engine = MemoryEngine(clock, max_in_flight=3)
    engine.create_queue(QueueSpec("jobs.fifo", content_based_deduplication=True))
    for group in "abcd":
        send(engine, "jobs.fifo", f"{group}1", f"{group}2", group_id=group)
    assert len(engine.receive("jobs.fifo", 10)) == 3
    with pytest.raises(OverLimit):
        engine.receive("jobs.fifo", 10)


# -- adapter support and test hooks ----------------------------------------------------------


def test_next_wakeup_reports_delay_and_visibility_ends(
    engine: MemoryEngine, clock: ManualClock
) -> None:
    engine.create_queue(QueueSpec("jobs"))
    assert engine.next_wakeup("jobs") is None
    send(engine, "jobs", "a", delay_s=7)
    assert engine.next_wakeup("jobs") == 1007.0
    clock.advance(7)
    [message] = engine.receive("jobs", visibility_s=20)
    assert engine.next_wakeup("jobs") == 1027.0
    extend(engine, "jobs", message.receipt_handle, 5)
    assert engine.next_wakeup("jobs") == 1012.0
    delete(engine, "jobs", message.receipt_handle)
    assert engine.next_wakeup("jobs") is None


def test_listeners_hear_changes(engine: MemoryEngine) -> None:
    heard: list[str] = []
    unsubscribe = engine.subscribe(heard.append)
    engine.create_queue(QueueSpec("dlq"))
    engine.create_queue(QueueSpec("jobs", redrive=RedrivePolicy("dlq", 1)))
    send(engine, "jobs", "a")
    assert heard == ["jobs"]
    engine.receive("jobs", visibility_s=0)
    engine.receive("jobs")
    assert heard == ["jobs", "dlq"]
    [dead] = engine.receive("dlq")
    extend(engine, "dlq", dead.receipt_handle, 0)
    assert heard[-1] == "dlq"
    unsubscribe()
    unsubscribe()
    send(engine, "jobs", "b")
    assert heard == ["jobs", "dlq", "dlq"]


def test_failed_calls_do_not_notify(engine: MemoryEngine) -> None:
    heard: list[str] = []
    engine.subscribe(heard.append)
    engine.create_queue(QueueSpec("jobs"))
    delete(engine, "jobs", "garbage")
    extend(engine, "jobs", "garbage", 0)
    assert heard == []


def test_peek_shows_a_message_without_receiving_it(
    engine: MemoryEngine, clock: ManualClock
) -> None:
    engine.create_queue(QueueSpec("jobs", delay_s=2))
    [message_id] = send(engine, "jobs", "a")
    snapshot = engine.peek("jobs", message_id)
    assert snapshot is not None
    assert (snapshot.state, snapshot.visible_at, snapshot.received_at) == (
        MessageState.DELAYED,
        1002.0,
        None,
    )
    clock.advance(2)
    [message] = engine.receive("jobs")
    snapshot = engine.peek("jobs", message_id)
    assert snapshot is not None
    assert snapshot.state is MessageState.IN_FLIGHT
    assert (snapshot.receive_count, snapshot.received_at) == (1, 1002.0)
    assert snapshot.receipt_handle == message.receipt_handle
    assert engine.peek("jobs", "unknown") is None


def test_expire_simulates_a_lapsed_lease(engine: MemoryEngine) -> None:
    heard: list[str] = []
    engine.create_queue(QueueSpec("jobs"))
    [message_id] = send(engine, "jobs", "a")
    [first] = engine.receive("jobs", visibility_s=600)
    engine.subscribe(heard.append)
    engine.expire("jobs", message_id)
    assert heard == ["jobs"]
    assert engine.counts("jobs") == QueueCounts(visible=1, in_flight=0, delayed=0)
    assert only_code(extend(engine, "jobs", first.receipt_handle, 10)) == "MessageNotInflight"
    [second] = engine.receive("jobs")
    assert second.receive_count == 2
    assert only_code(extend(engine, "jobs", first.receipt_handle, 10)) == "ReceiptHandleIsInvalid"
    engine.delete("jobs", [Deletion("x", second.receipt_handle)])
    with pytest.raises(ValueError, match="not in flight"):
        engine.expire("jobs", message_id)


def test_expire_refuses_a_visible_message(engine: MemoryEngine) -> None:
    engine.create_queue(QueueSpec("jobs"))
    [message_id] = send(engine, "jobs", "a")
    with pytest.raises(ValueError, match="not in flight"):
        engine.expire("jobs", message_id)


def test_the_default_dialect_is_sqs(engine: MemoryEngine) -> None:
    assert engine.dialect is SQS_DIALECT
    assert (SQS_DIALECT.max_batch_entries, SQS_DIALECT.min_visibility_s) == (10, 0)
    with pytest.raises(ValueError, match="max_in_flight"):
        MemoryEngine(ManualClock(), max_in_flight=0)


# -- scale -----------------------------------------------------------------------------------


def test_one_hundred_thousand_messages_in_flight(engine: MemoryEngine, clock: ManualClock) -> None:
    total = 100_000
    engine.create_queue(QueueSpec("jobs", visibility_timeout_s=60))
    for start in range(0, total, 10):
        engine.send(
            "jobs", [OutgoingMessage(body=str(start + i), entry_id=str(i)) for i in range(10)]
        )
    received: list[ReceivedMessage] = []
    while len(received) < total:
        got = engine.receive("jobs", 10)
        assert got, "the queue ran dry early"
        received.extend(got)
    assert engine.counts("jobs") == QueueCounts(visible=0, in_flight=total, delayed=0)
    clock.advance(30)
    for start in range(0, total, 10):
        chunk = received[start : start + 10]
        result = engine.change_visibility(
            "jobs", [VisibilityChange(str(i), m.receipt_handle, 600) for i, m in enumerate(chunk)]
        )
        assert len(result.succeeded) == len(chunk)
    clock.advance(100)  # past the original 60 s: every extension must hold
    assert engine.receive("jobs", 10, long_poll=True) == []
    assert engine.next_wakeup("jobs") == pytest.approx(1630.0)
    for start in range(0, total, 10):
        chunk = received[start : start + 10]
        result = engine.delete(
            "jobs", [Deletion(str(i), m.receipt_handle) for i, m in enumerate(chunk)]
        )
        assert len(result.succeeded) == len(chunk)
    assert engine.counts("jobs") == QueueCounts(0, 0, 0)
    assert sorted(int(m.body) for m in received) == list(range(total))
    assert engine.next_wakeup("jobs") is None


def test_stale_heap_entries_do_not_pile_up(engine: MemoryEngine, clock: ManualClock) -> None:
    engine.create_queue(QueueSpec("jobs"))
    send(engine, "jobs", "a")
    [message] = engine.receive("jobs", visibility_s=600)
    for _ in range(1_000):
        clock.advance(1)
        assert only_code(extend(engine, "jobs", message.receipt_handle, 600)) is None
    for _ in range(1_000):
        send(engine, "jobs", "b")
        [got] = engine.receive("jobs", visibility_s=1)
        delete(engine, "jobs", got.receipt_handle)
    queue = engine._queues["jobs"]
    assert len(queue._timers) < 100
    assert len(queue._expiries) < 100
    assert engine.counts("jobs") == QueueCounts(visible=0, in_flight=1, delayed=0)
