"""SQS fair queues in the engine: on a standard queue a MessageGroupId is a tenant, and while
one tenant holds more than 10% of the in-flight messages and at least 30 of its own, quiet
tenants' messages are received first (`backends.memory.fairness`). Driven by a `ManualClock`.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import boto3
import pytest
from botocore.config import Config

from backends.memory import snapshot
from backends.memory.engine import MemoryEngine, QueueCounts
from backends.memory.fairness import FairCounts
from backends.serve.sqs.endpoint import sqs_endpoint_in_thread
from worker.clock import ManualClock
from worker.types import Deletion, OutgoingMessage, QueueSpec, RedrivePolicy, VisibilityChange

Q = "jobs"
LONG = 3600  # visibility for receives that should stay in flight throughout


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1000.0, wall_offset_s=1_700_000_000.0 - 1000.0)


@pytest.fixture
def engine(clock: ManualClock) -> MemoryEngine:
    engine = MemoryEngine(clock)
    engine.create_queue(QueueSpec(Q))
    return engine


def send(engine: MemoryEngine, tenant: str | None, count: int, *, delay_s: int = 0) -> None:
    """`count` messages of `tenant` (None: no group id), bodies `<tenant><n>` from 1."""
    name = tenant or "u"
    for start in range(0, count, 10):
        batch = [
            OutgoingMessage(
                body=f"{name}{n + 1}", entry_id=str(n), group_id=tenant, delay_s=delay_s
            )
            for n in range(start, min(start + 10, count))
        ]
        assert not engine.send(Q, batch).failed


def receive(engine: MemoryEngine, count: int, *, batch: int = 10) -> list[str]:
    """The bodies of `count` messages received in batches of `batch`, kept in flight."""
    bodies: list[str] = []
    while len(bodies) < count:
        got = engine.receive(Q, min(batch, count - len(bodies)), visibility_s=LONG)
        assert got, f"nothing left after {len(bodies)}"
        bodies += [m.body for m in got]
    return bodies


def names(tenant: str, first: int, last: int) -> list[str]:
    return [f"{tenant}{n}" for n in range(first, last + 1)]


def test_below_the_thresholds_the_plain_order_holds(engine: MemoryEngine) -> None:
    send(engine, "a", 29)
    send(engine, "b", 5)
    send(engine, "a", 6)  # bodies a1..a6 again: sent after b's
    # a holds 29 in flight, then b's: never 30 of its own while b's wait.
    assert receive(engine, 34) == names("a", 1, 29) + names("b", 1, 5)
    assert engine.fair_counts(Q) == FairCounts(0, 6, 34, 0)


def test_a_noisy_tenant_waits_behind_quiet_ones(engine: MemoryEngine) -> None:
    send(engine, "a", 100)
    send(engine, "b", 5)
    send(engine, None, 3)  # no group id: each is a tenant of its own, never noisy
    send(engine, "c", 5)
    assert receive(engine, 30) == names("a", 1, 30)  # 30 of 30 in flight: noisy now
    assert engine.fair_counts(Q) == FairCounts(1, 13, 0, 0)
    assert receive(engine, 13) == names("b", 1, 5) + names("u", 1, 3) + names("c", 1, 5)
    assert receive(engine, 10) == names("a", 31, 40)  # no quiet message left: a's backlog
    assert engine.counts(Q) == QueueCounts(60, 53, 0)
    assert engine.fair_counts(Q) == FairCounts(1, 0, 13, 0)


def test_noisiness_is_judged_at_each_message_of_a_batch(engine: MemoryEngine) -> None:
    send(engine, "a", 40)
    send(engine, "b", 3)
    assert receive(engine, 25) == names("a", 1, 25)
    # a's 30th message makes it noisy in the middle of the batch.
    assert receive(engine, 10) == names("a", 26, 30) + names("b", 1, 3) + names("a", 31, 32)


def test_the_share_must_be_more_than_a_tenth(engine: MemoryEngine) -> None:
    send(engine, None, 270)
    send(engine, "a", 40)
    send(engine, "b", 5)
    assert receive(engine, 300) == names("u", 1, 270) + names("a", 1, 30)
    assert engine.fair_counts(Q).noisy_groups == 0  # 30 of 300: exactly 10%, not more
    # The 31st makes 31 of 301.
    assert receive(engine, 10) == ["a31", *names("b", 1, 5), *names("a", 32, 35)]


def test_a_smaller_total_makes_a_tenant_noisy(engine: MemoryEngine) -> None:
    send(engine, None, 270)
    send(engine, "a", 40)
    send(engine, "b", 2)
    received = engine.receive(Q, 10, visibility_s=LONG)  # u1..u10
    receive(engine, 290)  # u11..u270, a1..a30: 30 of 300, quiet
    assert engine.fair_counts(Q).noisy_groups == 0
    engine.delete(Q, [Deletion("d", received[0].receipt_handle)])  # 30 of 299: noisy
    assert engine.fair_counts(Q).noisy_groups == 1
    # b1 makes 30 of 300 again (quiet: a31 next), a31 makes 31 of 301.
    assert receive(engine, 4) == ["b1", "a31", "b2", "a32"]


def test_a_tenant_quiet_again_is_served_in_plain_order(engine: MemoryEngine) -> None:
    send(engine, "a", 40)
    send(engine, "b", 5)
    first = engine.receive(Q, 10, visibility_s=LONG)
    receive(engine, 20)
    engine.delete(Q, [Deletion("d", first[0].receipt_handle)])  # a: 29 in flight, quiet
    assert receive(engine, 1) == ["a31"]  # the oldest visible: a's
    assert receive(engine, 1) == ["b1"]  # a holds 30 again


def test_leases_that_lapse_end_the_noise(engine: MemoryEngine, clock: ManualClock) -> None:
    send(engine, "a", 40)
    send(engine, "b", 2)
    assert [m.body for m in engine.receive(Q, 10, visibility_s=30)] == names("a", 1, 10)
    receive(engine, 20)
    clock.advance(31)  # a1..a10 visible again, after a31..a40 and b's: a holds 20
    assert engine.fair_counts(Q) == FairCounts(0, 22, 20, 0)
    assert receive(engine, 13) == [*names("a", 31, 40), "b1", "b2", "a1"]


def test_redriven_tenants_leave_and_arrive(engine: MemoryEngine, clock: ManualClock) -> None:
    engine.create_queue(QueueSpec("dead"))
    engine.set_queue_attributes(Q, redrive=RedrivePolicy("dead", max_receive_count=1))
    send(engine, "a", 40)
    send(engine, "b", 2)
    assert [m.body for m in engine.receive(Q, 10, visibility_s=30)] == names("a", 1, 10)
    receive(engine, 20)  # a holds 30: noisy
    clock.advance(31)  # a1..a10 back, each received once already
    assert receive(engine, 12) == [*names("a", 31, 40), "b1", "b2"]  # a: 30 of 32
    assert engine.receive(Q, 10) == []  # a1..a10: to the dead-letter queue instead
    assert engine.fair_counts(Q) == FairCounts(1, 0, 2, 0)
    dead = engine.receive("dead", 10, visibility_s=LONG)
    assert [(m.body, m.attributes["MessageGroupId"]) for m in dead] == [
        (f"a{n}", "a") for n in range(1, 11)
    ]


def test_the_least_busy_noisy_tenant_goes_first(engine: MemoryEngine) -> None:
    send(engine, "a", 60)
    send(engine, "b", 60)
    # a turns noisy at 30, then b is the only quiet tenant until it holds 30 as well; then
    # each receive takes from whichever noisy tenant holds fewer (the older on a tie).
    expected = names("a", 1, 30) + names("b", 1, 30)
    expected += [body for n in range(31, 36) for body in (f"a{n}", f"b{n}")]
    assert receive(engine, 70) == expected
    assert engine.fair_counts(Q) == FairCounts(2, 0, 0, 0)


def test_fair_counts_leave_noisy_tenants_out(engine: MemoryEngine, clock: ManualClock) -> None:
    send(engine, "a", 35)
    send(engine, "a", 2, delay_s=60)
    send(engine, "b", 3, delay_s=60)
    send(engine, "c", 4)
    send(engine, None, 1, delay_s=60)
    receive(engine, 30)
    assert engine.counts(Q) == QueueCounts(9, 30, 6)
    assert engine.fair_counts(Q) == FairCounts(1, 4, 0, 4)
    clock.advance(61)  # the delayed ones turn visible
    assert engine.fair_counts(Q) == FairCounts(1, 8, 0, 0)


def test_a_fifo_queue_and_a_purge_know_no_tenants(engine: MemoryEngine) -> None:
    engine.create_queue(QueueSpec("jobs.fifo", content_based_deduplication=True))
    batch = [OutgoingMessage(body=f"m{n}", entry_id=str(n), group_id="g") for n in range(10)]
    engine.send("jobs.fifo", batch)
    assert engine.fair_counts("jobs.fifo") == FairCounts(0, 10, 0, 0)
    send(engine, "a", 35)
    receive(engine, 30)
    engine.purge(Q)
    send(engine, "a", 1)
    assert engine.fair_counts(Q) == FairCounts(0, 1, 0, 0)


def test_a_snapshot_keeps_the_tenants(engine: MemoryEngine, clock: ManualClock) -> None:
    send(engine, "a", 40)
    send(engine, "b", 2)
    receive(engine, 30)
    restored = MemoryEngine(clock)
    snapshot.restore(restored, snapshot.dump(engine))
    assert restored.fair_counts(Q) == FairCounts(1, 2, 0, 0)
    assert [m.body for m in restored.receive(Q, 3, visibility_s=LONG)] == ["b1", "b2", "a31"]


def test_tenants_that_came_and_went_are_forgotten(engine: MemoryEngine) -> None:
    for n in range(300):
        send(engine, f"t{n}", 1)
    while got := engine.receive(Q, 10, visibility_s=LONG):
        engine.delete(Q, [Deletion(str(i), m.receipt_handle) for i, m in enumerate(got)])
    send(engine, "a", 40)
    send(engine, "b", 2)
    tenants = engine._queues[Q]._tenants
    assert tenants is not None and len(tenants._heads) == 2  # not the 300 gone
    assert receive(engine, 33) == [*names("a", 1, 30), "b1", "b2", "a31"]


# a: a noisy tenant among few; or among 200 that each send now and then (so the engine's
# heap of tenants is rebuilt as it goes), with a second heavy sender.
FEW = ["a", "a", "a", "a", "b", "c", None]
MANY = ["a"] * 100 + ["b"] * 30 + [f"t{n}" for n in range(200)] + [None] * 10


@pytest.mark.parametrize(
    ("tenants", "seen"), [(FEW, (355, 80, 241)), (MANY, (187, 22, 200))], ids=["few", "many"]
)
def test_receives_match_a_model_that_scans_everything(
    engine: MemoryEngine, tenants: list[str | None], seen: tuple[int, int, int]
) -> None:
    """Random sends, receives, deletes and releases; each message received is the one a
    naive model picks from the whole visible order."""
    rng = random.Random(30)
    engine.set_queue_attributes(Q, visibility_timeout_s=LONG)
    held: dict[str, str | None] = {}  # receipt handle -> tenant of each message in flight
    sent = Counter[str]()
    fair = 0  # receives made while a tenant was noisy
    for step in range(1500):
        roll = rng.random()
        if roll < 0.4:
            tenant = rng.choice(tenants)
            sent[tenant or "u"] += 1
            entry = OutgoingMessage(body=f"{step}", entry_id="e", group_id=tenant)
            engine.send(Q, [entry])
        elif roll < 0.75:
            expected = _model_pick(engine, Counter(held.values()), len(held))
            fair += engine.fair_counts(Q).noisy_groups > 0
            got = engine.receive(Q, 1)
            assert [m.message_id for m in got] == ([expected] if expected else []), step
            for message in got:
                held[message.receipt_handle] = message.attributes.get("MessageGroupId")
        elif held:
            handle = rng.choice(list(held))
            del held[handle]
            if roll < 0.95:
                engine.delete(Q, [Deletion("d", handle)])
            else:
                engine.change_visibility(Q, [VisibilityChange("r", handle, 0)])
    assert engine.counts(Q).in_flight == len(held)
    # The seed's run: a sent most, and about half the receives were made with a noisy.
    assert (sent["a"], sent["u"], fair) == seen


def _model_pick(engine: MemoryEngine, holding: Counter[Any], total: int) -> str | None:
    def noisy(tenant: str | None) -> bool:
        return tenant is not None and holding[tenant] >= 30 and holding[tenant] * 10 > total

    visible = engine.browse(Q, 100_000)
    for message in visible:
        if not noisy(message.attributes.get("MessageGroupId")):
            return message.message_id
    busy = [(holding[m.attributes["MessageGroupId"]], i) for i, m in enumerate(visible)]
    return visible[min(busy)[1]].message_id if busy else None


def test_serve_sqs_takes_and_returns_a_group_id_on_a_standard_queue() -> None:
    with sqs_endpoint_in_thread() as endpoint:
        sqs = boto3.client(
            "sqs",
            endpoint_url=endpoint.url,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            config=Config(retries={"total_max_attempts": 1}),
        )
        url = sqs.create_queue(QueueName="tenants")["QueueUrl"]
        sqs.send_message(QueueUrl=url, MessageBody="one", MessageGroupId="tenant-1")
        entries = [{"Id": "x", "MessageBody": "two", "MessageGroupId": "tenant-2"}]
        assert not sqs.send_message_batch(QueueUrl=url, Entries=entries).get("Failed")
        got = sqs.receive_message(
            QueueUrl=url, MaxNumberOfMessages=10, MessageSystemAttributeNames=["All"]
        )["Messages"]
        groups = {m["Body"]: m["Attributes"].get("MessageGroupId") for m in got}
        assert groups == {"one": "tenant-1", "two": "tenant-2"}
        assert "SequenceNumber" not in got[0]["Attributes"]
