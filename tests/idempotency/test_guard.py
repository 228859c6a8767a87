"""The guard in a running worker, on the in-memory engine and virtual time (looptime).

Must-show 1 (a delete lost after success), 2 (a forced lapse: two workers hold one message),
4 (a business key across a new MessageId), and the guard's other rules: an error removes
the claim, a payload mismatch is a failure, results are cached.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import anyio
import pytest

from backends.memory import MemoryBackend
from tests.idempotency.fakes import FaultyStore, LossyBackend
from worker import (
    LeaseConfig,
    LoopClock,
    Message,
    Outcome,
    ShutdownConfig,
    Worker,
    WorkerConfig,
)
from worker.errors import RegistrationError
from worker.idempotency import Idempotency, MemoryStore, RecordState
from worker.testing import run_worker
from worker.types import QueueSpec, RedrivePolicy

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]

VISIBILITY_S = 30
LEASE = LeaseConfig(visibility_s=VISIBILITY_S, extension_s=VISIBILITY_S, renew_margin_s=10)


def handled(harness: Any, queue: str, outcome: str) -> float:
    value: float = harness.metrics.value(
        "lease_worker_messages_handled_total", queue=queue, outcome=outcome
    )
    return value


def idem_metric(harness: Any, name: str, **labels: str) -> float:
    value: float = harness.metrics.value(f"lease_worker_idempotency_{name}_total", **labels)
    return value


async def test_a_delete_lost_after_success_is_suppressed_as_a_duplicate() -> None:
    store = MemoryStore()
    app = Worker(WorkerConfig(lease=LEASE))
    runs: list[str] = []

    @app.handler("orders", idempotent=Idempotency(store).guard())
    async def handle(message: Message) -> None:
        runs.append(message.message_id)

    backend = LossyBackend()
    backend.lose_deletes = 1  # answered success, deleted nothing: a stale handle on SQS
    async with run_worker(app, backend=backend) as harness:
        message_id = await harness.send("orders", {"id": 1})
        records = await harness.wait_for_handled(2)  # the redelivery, one visibility later
        await harness.wait_until_idle()
        assert backend.inner.engine.peek("orders", message_id) is None
        assert anyio.current_time() == pytest.approx(30, abs=1)
    assert runs == [message_id]
    assert [r.outcome for r in records] == [Outcome.SUCCEEDED, Outcome.DUPLICATE]
    assert handled(harness, "orders", "duplicate") == 1
    assert idem_metric(harness, "duplicates", queue="orders") == 1
    record = store.get(f"orders:{message_id}")
    assert record is not None and record.state is RecordState.COMPLETED


@pytest.mark.parametrize(("work_s", "runs_expected"), [(100.0, 2), (5.0, 1)])
async def test_two_workers_holding_one_message_never_run_it_at_once(
    work_s: float, runs_expected: int
) -> None:
    """A forced lapse: A runs the message, its visibility ends behind A's back, B gets it.

    B finds A's live claim and releases the message until A's heartbeat would have run
    out. Long work: A's next renewal is refused (B has the handle), A's handler is cancelled
    and lets its claim go; the message comes back and runs once more, never beside A's run.
    Short work: A completes first, and B's delivery comes back a duplicate.
    """
    backend, store = MemoryBackend(), MemoryStore()
    running: Counter[str] = Counter()
    most: Counter[str] = Counter()
    starts: list[tuple[str, float]] = []
    finished: list[str] = []
    started, done = anyio.Event(), anyio.Event()
    clock = LoopClock()  # one wall clock for both workers (each LoopClock fixes its own)

    def make_app(name: str, max_in_flight: int) -> Worker:
        app = Worker(WorkerConfig(lease=LEASE, max_in_flight=max_in_flight), name=name)

        @app.handler("jobs", idempotent=Idempotency(store, clock=clock).guard())
        async def job(message: Message) -> None:
            running[message.message_id] += 1
            most[message.message_id] = max(most[message.message_id], running[message.message_id])
            starts.append((name, anyio.current_time()))
            started.set()
            try:
                await anyio.sleep(work_s)
                finished.append(name)
                done.set()
            finally:
                running[message.message_id] -= 1

        return app

    # A holds at most one message: its own receiver is not polling when the lapse comes.
    async with run_worker(make_app("a", 1), backend=backend) as a:
        message_id = await a.send("jobs", {"n": 1})
        await started.wait()
        async with run_worker(make_app("b", 10), backend=backend) as b:
            backend.engine.expire("jobs", message_id)  # the lapse
            await done.wait()
            if runs_expected == 1:  # B released it once; back as a duplicate, to A or to B
                await anyio.sleep(VISIBILITY_S + 5)
            await a.wait_until_idle()
            await b.wait_until_idle()
            assert backend.engine.peek("jobs", message_id) is None
    assert most[message_id] == 1
    assert len(starts) == runs_expected and len(finished) == 1
    assert idem_metric(b, "claimed_elsewhere", queue="jobs") >= 1
    record = store.get(f"jobs:{message_id}")
    assert record is not None and record.state is RecordState.COMPLETED
    if runs_expected == 2:  # A's claim was let go when its lease was lost, then taken over
        assert handled(a, "jobs", "lease_lost") == 1
        takeovers = idem_metric(a, "takeovers", queue="jobs") + idem_metric(
            b, "takeovers", queue="jobs"
        )
        assert takeovers == 1
        assert starts[1][1] - starts[0][1] == pytest.approx(31, abs=2)
    else:
        assert handled(a, "jobs", "duplicate") + handled(b, "jobs", "duplicate") == 1


@pytest.mark.parametrize("business_key", [True, False])
async def test_a_business_key_dedups_a_message_redriven_with_a_new_message_id(
    business_key: bool,
) -> None:
    """An order is handled, its delete is lost, and its next receive (over maxReceiveCount 1)
    moves it to the DLQ. A move task brings it back with a new MessageId: only a business key
    sees it is the same order; with the default key, the MessageId, it runs again."""
    app = Worker(WorkerConfig(lease=LEASE))
    runs: list[str] = []
    key = (lambda m: str(m.body["order_id"])) if business_key else None

    @app.handler("orders", idempotent=Idempotency(MemoryStore()).guard(key=key))
    async def handle(message: Message) -> None:
        runs.append(message.message_id)

    backend = LossyBackend()
    await backend.create_queue(QueueSpec("orders-dlq"))
    await backend.create_queue(QueueSpec("orders", redrive=RedrivePolicy("orders-dlq", 1)))
    backend.lose_deletes = 1
    async with run_worker(app, backend=backend) as harness:
        first = await harness.send("orders", {"order_id": "A-1"})
        await harness.wait_for_handled(1)
        await anyio.sleep(VISIBILITY_S + 1)  # visible again: the next receive dead-letters it
        engine = backend.inner.engine
        assert engine.counts("orders-dlq").visible == 1
        engine.start_message_move_task("orders-dlq")
        records = await harness.wait_for_handled(2)
        await harness.wait_until_idle()
        assert engine.counts("orders").visible + engine.counts("orders-dlq").visible == 0
    second = records[1].message.message_id
    assert first != second
    if business_key:
        assert runs == [first]
        assert [r.outcome for r in records] == [Outcome.SUCCEEDED, Outcome.DUPLICATE]
    else:
        assert runs == [first, second]


async def test_a_handler_error_removes_the_claim_so_the_retry_runs() -> None:
    store = MemoryStore()
    app = Worker(WorkerConfig(lease=LEASE))
    attempts: list[int] = []

    @app.handler("jobs", idempotent=Idempotency(store).guard())
    async def job(message: Message) -> None:
        attempts.append(message.receive_count)
        if message.receive_count == 1:
            raise RuntimeError("first try fails")

    async with run_worker(app) as harness:
        message_id = await harness.send("jobs", {"n": 1})
        records = await harness.wait_for_handled(2)
    assert attempts == [1, 2]
    assert [r.outcome for r in records] == [Outcome.FAILED, Outcome.SUCCEEDED]
    record = store.get(f"jobs:{message_id}")
    assert record is not None and record.state is RecordState.COMPLETED


async def test_the_same_key_with_another_payload_is_a_failure_not_a_duplicate() -> None:
    app = Worker(WorkerConfig(lease=LEASE))
    runs: list[int] = []
    guard = Idempotency(MemoryStore()).guard(
        key=lambda m: str(m.body["order_id"]), validate_payload=True
    )

    @app.handler("orders", idempotent=guard, on_error="expire")
    async def handle(message: Message) -> None:
        runs.append(message.body["amount"])

    async with run_worker(app) as harness:
        await harness.send("orders", {"order_id": 7, "amount": 10})
        await harness.wait_for_handled(1)
        message_id = await harness.send("orders", {"order_id": 7, "amount": 99})
        records = await harness.wait_for_handled(2)
        # Not deleted: left to the error policy (expire: visible again, toward a DLQ).
        assert harness.engine.peek("orders", message_id) is not None
    assert runs == [10]
    assert records[1].outcome is Outcome.FAILED


async def test_a_cached_result_is_handed_to_on_duplicate() -> None:
    app = Worker(WorkerConfig(lease=LEASE))
    replies: list[tuple[str, Any]] = []

    async def on_duplicate(message: Message, result: Any) -> None:
        replies.append((message.message_id, result))

    guard = Idempotency(MemoryStore()).guard(
        key=lambda m: str(m.body["order_id"]), cache_result=True, on_duplicate=on_duplicate
    )

    @app.handler("orders", idempotent=guard)
    def handle(message: Message) -> dict[str, int]:  # a sync handler: its result too
        return {"invoice": 41 + message.body["order_id"]}

    async with run_worker(app) as harness:
        await harness.send("orders", {"order_id": 1})
        await harness.wait_for_handled(1)
        second = await harness.send("orders", {"order_id": 1})
        await harness.wait_for_handled(2)
    assert replies == [(second, {"invoice": 42})]


async def test_idempotent_takes_only_a_guard() -> None:
    app = Worker()
    with pytest.raises(RegistrationError, match="idempotent for 'jobs'"):
        app.handler("jobs", idempotent=MemoryStore())  # type: ignore[arg-type]


async def test_the_heartbeat_follows_the_settings_the_worker_runs_with() -> None:
    # The CLI replaces app.config after the app module registered its handlers.
    idempotency = Idempotency(MemoryStore())
    app = Worker(WorkerConfig(lease=LEASE))

    @app.handler("jobs", idempotent=idempotency.guard())
    async def job(message: Message) -> None:
        pass

    app.config = WorkerConfig(lease=LeaseConfig(visibility_s=6))
    async with run_worker(app):
        assert idempotency.heartbeat.ttl_s == 6
        assert idempotency.heartbeat.margin_s == 2


async def test_one_idempotency_guards_one_worker() -> None:
    idempotency = Idempotency(MemoryStore())
    first, second = Worker(name="first"), Worker(name="second")
    first.handler("a", idempotent=idempotency.guard())(_noop)
    first.handler("b", idempotent=idempotency.guard())(_noop)  # more handlers: fine
    with pytest.raises(RegistrationError, match="already guards worker 'first'"):
        second.handler("a", idempotent=idempotency.guard())(_noop)


async def test_a_guard_given_as_plain_middleware_fails_its_messages_clearly() -> None:
    guard = Idempotency(MemoryStore()).guard()
    app = Worker(WorkerConfig(lease=LEASE))
    app.handler("jobs", middleware=[guard])(_noop)
    async with run_worker(app) as harness:
        message_id = await harness.send("jobs", {"n": 1})
        [record] = await harness.wait_for_handled(1)
    assert record.outcome is Outcome.FAILED
    assert record.message.message_id == message_id


async def _noop(message: Message) -> None:
    pass


async def test_a_completion_cut_short_by_a_cancellation_is_still_written() -> None:
    """The handler succeeded; its lease is lost while the completion is on the wire: the
    write is handed to the heartbeat task, not dropped (else the claim would stay live)."""
    inner = MemoryStore()
    store = FaultyStore(inner)
    store.slow["replace"] = 3.0
    app = Worker(WorkerConfig(lease=LEASE))
    leases: list[Any] = []
    returned = anyio.Event()

    @app.handler("jobs", idempotent=Idempotency(store).guard())
    async def job(message: Message) -> None:
        leases.append(message.lease)
        returned.set()

    async with run_worker(app) as harness:
        message_id = await harness.send("jobs", {"n": 1})
        await returned.wait()
        await anyio.sleep(1)  # the completion is on the wire (3 s)
        leases[0].cancel(Outcome.LEASE_LOST)
        [record] = await harness.wait_for_handled(1)
        await anyio.sleep(5)  # the heartbeat task sends the deferred write
    assert record.outcome is Outcome.LEASE_LOST
    stored = inner.get(f"jobs:{message_id}")
    assert stored is not None and stored.state is RecordState.COMPLETED


async def test_a_shutdown_removes_the_claims_it_cancels_and_ends_the_heartbeat() -> None:
    store = MemoryStore()
    idempotency = Idempotency(store)
    app = Worker(WorkerConfig(lease=LEASE, shutdown=ShutdownConfig(grace_s=1)))
    started = anyio.Event()

    @app.handler("jobs", idempotent=idempotency.guard())
    async def job(message: Message) -> None:
        started.set()
        await anyio.sleep(1_000)

    async with run_worker(app) as harness:
        message_id = await harness.send("jobs", {"n": 1})
        await started.wait()
        assert store.get(f"jobs:{message_id}") is not None
    [record] = harness.handled
    assert record.outcome is Outcome.SHUTDOWN
    assert store.get(f"jobs:{message_id}") is None  # released: another worker runs it at once
    beat = await store.beat_of(idempotency.owner)
    assert beat is not None and beat <= idempotency.wall()
