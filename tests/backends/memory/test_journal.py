"""Journal records (`backends.memory.journal`) over the engine's `Changes` sink: a snapshot
brought forward by the records of every turn is the engine's state, whatever the requests
were; and a restored engine's handles never repeat the ones issued before."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from backends.memory import MemoryEngine
from backends.memory.changes import Changes
from backends.memory.handles import HandleRules
from backends.memory.journal import record, replay
from backends.memory.snapshot import dump, restore
from worker.clock import ManualClock
from worker.types import Deletion, OutgoingMessage, QueueSpec, RedrivePolicy, VisibilityChange


def _state(data: dict[str, Any]) -> dict[str, Any]:
    """What must survive: queues with their messages by id (standard queues' visible order
    aside), deleted names and move tasks."""
    queues = {}
    for queue in data["queues"]:
        messages = {m["message_id"]: m for m in queue["messages"]}
        dedup = sorted(map(tuple, queue["deduplication"]))
        queues[queue["config"]["name"]] = {**queue, "messages": messages, "deduplication": dedup}
    return {"queues": queues, "deleted": data["deleted"], "moves": data["moves"]}


def _plain(data: dict[str, Any]) -> dict[str, Any]:
    plain: dict[str, Any] = json.loads(json.dumps(data))  # as the file would hold it
    return plain


class _Run:
    def __init__(self, seed: int) -> None:
        self.random = random.Random(seed)
        self.clock = ManualClock()
        self.changes = Changes()
        self.engine = MemoryEngine(self.clock, changes=self.changes, handle_rules=HandleRules.SQS)
        self.handles: dict[str, list[str]] = {"jobs": [], "dlq": [], "jobs.fifo": []}
        self.sent = 0

    def step(self) -> None:
        """One request, chosen at random."""
        engine, pick = self.engine, self.random
        queue = pick.choice(["jobs", "jobs", "jobs.fifo", "dlq"])
        action = pick.choice(["send"] * 4 + ["receive"] * 3 + ["change", "delete", "delete"])
        action = pick.choice([action] * 20 + ["tag", "expire", "purge", "move", "wait"])
        if action == "send":
            self.sent += 1
            fifo = queue.endswith(".fifo")
            body = f"m{self.sent % 7}" if fifo else f"m{self.sent}"  # FIFO: some duplicates
            group = f"g{self.sent % 3}" if fifo else None
            engine.send(queue, [OutgoingMessage(body=body, group_id=group)])
        elif action == "receive":
            got = engine.receive(queue, pick.randint(1, 3), visibility_s=pick.choice([0, 5, 30]))
            self.handles[queue].extend(m.receipt_handle for m in got)
        elif action in ("change", "delete") and self.handles[queue]:
            handle = pick.choice(self.handles[queue])
            if action == "change":
                engine.change_visibility(
                    queue, [VisibilityChange("1", handle, pick.randint(0, 60))]
                )
            else:
                engine.delete(queue, [Deletion("1", handle)])
        elif action == "tag":
            engine.tag_queue(queue, {"n": str(self.sent)})
        elif action == "expire" and self.handles[queue]:
            message_id = pick.choice(self.handles[queue]).partition(".")[2]
            seen = engine.peek(queue, message_id)
            if seen is not None and seen.state.value == "in_flight":
                engine.expire(queue, message_id)
        elif action == "purge" and pick.random() < 0.2:
            self.clock.advance(61)
            engine.purge(queue)
        elif action == "move" and pick.random() < 0.3:
            tasks = engine.list_message_move_tasks("dlq", 1)
            if not tasks or tasks[0].status.value != "RUNNING":
                engine.start_message_move_task("dlq", max_per_second=pick.randint(1, 5))
        else:
            self.clock.advance(pick.choice([0.5, 3.0, 20.0]))


@pytest.mark.parametrize("seed", range(12))
def test_a_snapshot_and_the_records_of_every_turn_are_the_engine(seed: int) -> None:
    run = _Run(seed)
    engine = run.engine
    engine.create_queue(QueueSpec("dlq"))
    redrive = RedrivePolicy(dead_letter_queue="dlq", max_receive_count=2)
    engine.create_queue(QueueSpec("jobs", redrive=redrive))
    engine.create_queue(QueueSpec("jobs.fifo", content_based_deduplication=True))
    base = _plain(dump(engine))
    run.changes.take()
    records: list[dict[str, Any]] = []
    for _ in range(60):  # turns
        for _ in range(run.random.randint(1, 8)):
            run.step()
        taken = run.changes.take()
        if taken:
            records.append(_plain(record(engine, taken)))
        if run.random.random() < 0.1:  # compaction now and then
            base, records = _plain(dump(engine)), []
    restored = MemoryEngine(run.clock)
    restore(restored, replay(base, records))
    for name in engine.list_queues():  # what is due now happens (a visibility of 0 ended)
        engine.counts(name)
    assert _state(_plain(dump(restored))) == _state(_plain(dump(engine)))
    assert restored.counts("jobs") == engine.counts("jobs")
    assert restored.counts("jobs.fifo") == engine.counts("jobs.fifo")


def test_queue_changes_and_a_deletion_are_recorded() -> None:
    clock = ManualClock()
    changes = Changes()
    engine = MemoryEngine(clock, changes=changes)
    engine.create_queue(QueueSpec("a"))
    engine.create_queue(QueueSpec("b"))
    base = _plain(dump(engine))
    changes.take()
    engine.tag_queue("a", {"team": "x"})
    engine.set_queue_attributes("a", visibility_timeout_s=99)
    engine.keep_attributes("a", {"Policy": "{}"})
    engine.delete_queue("b")
    data = replay(base, [_plain(record(engine, changes.take()))])
    restored = MemoryEngine(clock)
    restore(restored, data)
    assert restored.list_queues() == ["a"]
    assert restored.queue_tags("a") == {"team": "x"}
    assert restored.describe_queue("a").config.visibility_timeout_s == 99
    assert restored.kept_attributes("a") == {"Policy": "{}"}
    assert set(data["deleted"]) == {"b"}


def test_a_restored_engine_issues_handles_never_issued_before() -> None:
    # The snapshot once carried the handle counter on: the first handle after a restart was
    # the one handed out right after the snapshot, before the crash.
    clock = ManualClock()
    engine = MemoryEngine(clock, handle_rules=HandleRules.SQS)
    engine.create_queue(QueueSpec("jobs", visibility_timeout_s=5))
    engine.send("jobs", [OutgoingMessage(body="one")])
    saved = _plain(dump(engine))
    [before] = engine.receive("jobs")  # after the snapshot, lost in the crash
    restored = MemoryEngine(clock, handle_rules=HandleRules.SQS)
    restore(restored, saved)
    [after] = restored.receive("jobs")
    assert after.message_id == before.message_id
    assert after.receipt_handle != before.receipt_handle
    # The old holder's delete: stale (issued by a predecessor), deletes nothing (SQS).
    result = restored.delete("jobs", [Deletion("1", before.receipt_handle)])
    assert result.succeeded == ("1",)
    assert restored.counts("jobs").in_flight == 1
    # A handle no epoch issued is refused as SQS refuses it.
    bogus = "0" * 12 + "1." + after.message_id
    refused = restored.delete("jobs", [Deletion("1", bogus)])
    assert [f.code for f in refused.failed] == ["ReceiptHandleIsInvalid"]
