"""`SmqBackend` against serve-smq: SMQ's operations and answers as the runtime sees them."""

from __future__ import annotations

import pytest

from backends.smq.backend import SMQ_LIMITS
from tests.backends.smq.serving import smq_pair
from worker.errors import AccessDenied, QueueNotFound, UnsupportedOperation
from worker.types import (
    Deletion,
    OutgoingMessage,
    QueueSpec,
    RedrivePolicy,
    VisibilityChange,
)

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]


async def test_queue_depth_comes_from_active_inactive_and_delay_messages() -> None:
    async with smq_pair() as (backend, engine):
        engine.create_queue(QueueSpec("dead"))
        engine.create_queue(
            QueueSpec("jobs", visibility_timeout_s=45, redrive=RedrivePolicy("dead", 4))
        )
        sent = await backend.send(
            "jobs", [OutgoingMessage(body=f"m{i}", entry_id=str(i)) for i in range(4)]
        )
        assert len(sent.succeeded) == 4 and not sent.failed
        assert not (await backend.send("jobs", [OutgoingMessage(body="later", delay_s=60)])).failed
        await backend.receive("jobs", max_messages=1, wait_s=0)
        info = await backend.queue_info("jobs")
    assert (info.approximate_visible, info.approximate_in_flight, info.approximate_delayed) == (
        3,
        1,
        1,
    )
    assert info.visibility_timeout_s == 45
    assert info.redrive == RedrivePolicy("dead", 4)


async def test_receive_maps_dequeue_count_and_an_empty_long_poll_is_empty() -> None:
    async with smq_pair() as (backend, engine):
        engine.create_queue(QueueSpec("jobs", visibility_timeout_s=60))
        await backend.send("jobs", [OutgoingMessage(body="a <&> b")])
        [first] = await backend.receive("jobs", max_messages=16, wait_s=30)
        assert await backend.receive("jobs", max_messages=16, wait_s=30) == []
        [second] = await backend.receive("jobs", max_messages=16, wait_s=30)  # at 60 s
    assert (first.body, first.receive_count, second.receive_count) == ("a <&> b", 1, 2)
    assert (
        second.attributes["ApproximateFirstReceiveTimestamp"]
        == first.attributes["ApproximateFirstReceiveTimestamp"]
    )
    assert int(first.attributes["SentTimestamp"]) > 0


async def test_an_extension_hands_back_a_new_handle_and_the_old_one_is_refused() -> None:
    async with smq_pair() as (backend, engine):
        engine.create_queue(QueueSpec("jobs", visibility_timeout_s=30))
        await backend.send("jobs", [OutgoingMessage(body="x")])
        [message] = await backend.receive("jobs", max_messages=1, wait_s=0)
        old = message.receipt_handle
        result = await backend.extend("jobs", [VisibilityChange("a", old, 120)])
        new = result.new_handles["a"]
        again = await backend.extend("jobs", [VisibilityChange("b", old, 120)])
        stale = await backend.delete("jobs", [Deletion("c", old)])
        deleted = await backend.delete("jobs", [Deletion("d", new)])
    assert result.succeeded == ("a",) and new != old
    assert [(f.entry_id, f.code) for f in again.failed] == [("b", "ReceiptHandleIsInvalid")]
    assert [(f.entry_id, f.code) for f in stale.failed] == [("c", "ReceiptHandleIsInvalid")]
    assert deleted.succeeded == ("d",)


async def test_a_receive_asking_more_than_the_queues_visibility_extends_at_once() -> None:
    async with smq_pair() as (backend, engine):
        engine.create_queue(QueueSpec("jobs", visibility_timeout_s=30))
        await backend.send("jobs", [OutgoingMessage(body="x")])
        [message] = await backend.receive("jobs", max_messages=1, wait_s=0, visibility_s=120)
        snapshot = engine.peek("jobs", message.message_id)
        assert snapshot is not None
        assert snapshot.visible_at - engine.clock.now() == pytest.approx(120, abs=0.01)
        assert snapshot.receipt_handle == message.receipt_handle  # the extension's new one
        await backend.send("jobs", [OutgoingMessage(body="y")])
        calls = backend.calls
        [other] = await backend.receive("jobs", max_messages=1, wait_s=0, visibility_s=20)
        later = engine.peek("jobs", other.message_id)
        # Asking less leaves the queue's 30 s, with no extra call (the runtime's deadline is
        # earlier than SMQ's, which is safe).
        assert later is not None and backend.calls == calls + 1
        assert later.visible_at - engine.clock.now() == pytest.approx(30, abs=0.01)


async def test_a_batch_delete_reports_failures_per_entry() -> None:
    async with smq_pair() as (backend, engine):
        engine.create_queue(QueueSpec("jobs"))
        await backend.send(
            "jobs", [OutgoingMessage(body=str(i), entry_id=str(i)) for i in range(3)]
        )
        got = await backend.receive("jobs", max_messages=16, wait_s=0)
        entries = [Deletion(str(i), m.receipt_handle) for i, m in enumerate(got)]
        entries.append(Deletion("bogus", "not-a-handle"))
        result = await backend.delete("jobs", entries)
        assert engine.counts("jobs").in_flight == 0
    assert result.succeeded == ("0", "1", "2")
    assert [(f.entry_id, f.code) for f in result.failed] == [("bogus", "ReceiptHandleIsInvalid")]


async def test_a_release_asks_for_smqs_shortest_visibility() -> None:
    async with smq_pair() as (backend, engine):
        engine.create_queue(QueueSpec("jobs"))
        await backend.send("jobs", [OutgoingMessage(body="x")])
        [message] = await backend.receive("jobs", max_messages=1, wait_s=0)
        released = await backend.release("jobs", [VisibilityChange("a", message.receipt_handle, 0)])
        assert released.succeeded == ("a",)
        snapshot = engine.peek("jobs", message.message_id)
        assert snapshot is not None
        assert snapshot.visible_at - engine.clock.now() == pytest.approx(1, abs=0.01)


async def test_peek_changes_neither_visibility_nor_receive_count() -> None:
    async with smq_pair() as (backend, engine):
        engine.create_queue(QueueSpec("jobs"))
        await backend.send(
            "jobs", [OutgoingMessage(body=str(i), entry_id=str(i)) for i in range(3)]
        )
        peeked = await backend.peek("jobs", 16)
        info = await backend.queue_info("jobs")
        got = await backend.receive("jobs", max_messages=16, wait_s=0)
    assert sorted(m.body for m in peeked) == ["0", "1", "2"]
    assert all(m.receive_count == 0 for m in peeked)
    assert (info.approximate_visible, info.approximate_in_flight) == (3, 0)
    assert sorted(m.receive_count for m in got) == [1, 1, 1]


async def test_whole_call_errors_are_the_runtimes() -> None:
    async with smq_pair() as (backend, _engine):
        with pytest.raises(QueueNotFound, match="QueueNotExist"):
            await backend.receive("missing", max_messages=1, wait_s=0)
        with pytest.raises(UnsupportedOperation):
            await backend.start_message_move_task("missing")
    async with smq_pair(secret="wrong") as (backend, _engine):
        with pytest.raises(AccessDenied, match="SignatureDoesNotMatch"):
            await backend.queue_info("jobs")


async def test_the_dead_letter_tools_find_source_queues() -> None:
    async with smq_pair() as (backend, engine):
        engine.create_queue(QueueSpec("dead"))
        engine.create_queue(QueueSpec("jobs", redrive=RedrivePolicy("dead", 3)))
        engine.create_queue(QueueSpec("other"))
        assert await backend.list_queues() == ["dead", "jobs", "other"]
        assert await backend.dead_letter_source_queues("dead") == ["jobs"]


async def test_limits() -> None:
    assert (SMQ_LIMITS.receive_batch, SMQ_LIMITS.delete_batch, SMQ_LIMITS.extend_batch) == (
        16,
        16,
        1,
    )
    assert SMQ_LIMITS.extension_returns_new_handle and SMQ_LIMITS.supports_peek
