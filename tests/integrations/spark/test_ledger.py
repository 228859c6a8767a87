"""The streaming source's ledger, pure: offsets, batches, commits, replays, renewals."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")  # the package's __init__ imports it

from worker.core.lease import held_for
from worker.integrations.spark.ledger import Ledger
from worker.types import ReceivedMessage


def _message(n: int) -> ReceivedMessage:
    return ReceivedMessage(
        queue="q", message_id=f"m{n}", receipt_handle=f"h{n}", body="{}", receive_count=1
    )


def _ledger() -> Ledger:
    return Ledger(run="r1", visibility_s=30, extension_s=30, margin_s=10)


def test_a_batch_is_its_offsets_messages_and_only_a_commit_makes_them_deletable() -> None:
    ledger = _ledger()
    start = ledger.initial()
    end = ledger.latest([_message(1), _message(2)], now=0, start=start)
    assert end == {"run": "r1", "n": 1}
    assert [m.message_id for m in ledger.batch(start, end) or []] == ["m1", "m2"]
    assert ledger.committed(start) == []
    assert [h.message.message_id for h in ledger.committed(end)] == ["m1", "m2"]
    assert ledger.held == {}


def test_an_idle_queue_moves_the_offset_once_so_the_last_batch_is_committed() -> None:
    ledger = _ledger()
    first = ledger.latest([_message(1)], now=0, start=ledger.initial())
    ledger.batch(ledger.initial(), first)  # planned and run; its commit is still to come
    forced = ledger.latest([], now=1, start=first)
    assert forced == {"run": "r1", "n": 2}  # an empty batch, so that Spark commits `first`
    ledger.batch(first, forced)
    ledger.committed(first)
    assert ledger.latest([], now=2, start=forced) == forced  # nothing waits: no batch


def test_a_message_received_again_while_held_is_not_taken_twice() -> None:
    ledger = _ledger()
    first = ledger.latest([_message(1)], now=0, start=None)
    again = ledger.latest([_message(1)], now=1, start=first)
    assert again == first  # m1 was not planned yet: nothing new, nothing waiting
    assert list(ledger.held) == ["m1"]


def test_a_replay_of_another_runs_range_is_served_once_from_what_arrives_now() -> None:
    ledger = _ledger()
    old_start, old_end = {"run": "r0", "n": 4}, {"run": "r0", "n": 5}
    assert ledger.batch(old_start, old_end) is None  # unknown: receive for it
    ledger.serve_replay(old_end, [_message(7)], now=0)
    assert [m.message_id for m in ledger.batch(old_start, old_end) or []] == ["m7"]
    assert ledger.latest([], now=1, start=old_end) == {"run": "r1", "n": 1}  # commit it
    assert [h.message.message_id for h in ledger.committed(old_end)] == ["m7"]


def test_leases_fall_due_a_margin_before_their_deadline_and_renewal_moves_them() -> None:
    ledger = _ledger()
    ledger.latest([_message(1)], now=100, start=None)
    assert ledger.due(119.9) == []
    [held] = ledger.due(120)
    ledger.renewed("m1", "h1-new", now=121)
    assert (held.handle, held.deadline) == ("h1-new", 121 + held_for(30))
    assert ledger.next_due() == 121 + held_for(30) - 10
    assert [h.message.message_id for h in ledger.lost(["m1", "m9"])] == ["m1"]
    assert ledger.next_due() is None


def test_messages_received_ahead_are_in_no_batch_until_an_offset_takes_them() -> None:
    ledger = _ledger()
    start = ledger.initial()
    ledger.take([_message(n) for n in range(1, 6)], now=0)
    assert ledger.committed({"run": "r1", "n": 9}) == []  # pending: no commit deletes them
    assert [h.message.message_id for h in ledger.due(20)] == [f"m{n}" for n in range(1, 6)]
    first = ledger.latest([], now=1, start=start, most=3)  # the oldest three
    assert [m.message_id for m in ledger.batch(start, first) or []] == ["m1", "m2", "m3"]
    second = ledger.latest([], now=2, start=first)
    assert [m.message_id for m in ledger.batch(first, second) or []] == ["m4", "m5"]
    assert ledger.pending_count() == 0


def test_a_renewal_answered_after_the_commit_still_gives_the_message_its_new_handle() -> None:
    ledger = _ledger()
    end = ledger.latest([_message(1)], now=0, start=None)
    [held] = ledger.due(20)  # a renewal round takes it ...
    [done] = ledger.committed(end)  # ... the batch is committed while it is on the wire
    ledger.renewed(held, "h1-new", now=21)
    assert done.handle == "h1-new"  # its delete uses the handle the renewal answered
