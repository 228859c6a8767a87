"""A store outage longer than the heartbeat never runs a completed key twice (issue 28, 2).

The failure: a worker finishes a key while the store is down, so its completion waits in
its heartbeat task; the outage outlasts its heartbeat, so when the store comes back the
claim looks stale, and a worker that meets another copy of the key takes the claim over
before the deferred completion is written. The completion is then refused (its token is
gone) and was dropped without a word.

Here on virtual time (looptime), workers in one process that share a `MemoryStore`, each
through its own `FaultyStore` (two `Idempotency` objects: two owners, as two processes
would be, that see each other only through the store). The store goes down for 60 s (two
heartbeat TTLs) while handlers run; copies of every key keep coming, before, during and
after. Counted: runs per key (each exactly once), runs started while the store was down
(none), keys never completed (none), completions dropped (none here; the partition test
shows one dropped, logged and counted).
"""

from __future__ import annotations

import contextlib
from collections import Counter
from typing import Any

import anyio
import pytest
from structlog.testing import capture_logs

from backends.memory import MemoryBackend
from tests.idempotency.fakes import FaultyStore
from worker import LeaseConfig, LoopClock, Message, Outcome, Worker, WorkerConfig
from worker.idempotency import Idempotency, MemoryStore, Record, RecordState, StoreError
from worker.testing import WorkerHarness, run_worker

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]

VISIBILITY_S = 30
LEASE = LeaseConfig(visibility_s=VISIBILITY_S, extension_s=VISIBILITY_S, renew_margin_s=10)
KEYS = 25
WORK_S = 8.0
#: The second worker starts later: the workers' heartbeats are not in step, as in real
#: processes, so one of them finds the store back before the other.
SECOND_AT = 4.0
DOWN_AT, UP_AT = 10.0, 68.0
#: When each key is sent: once before the outage, twice during it, twice just after.
CYCLES_AT = (0.0, 30.0, 50.0, 71.0, 73.0)


def idem_metric(harness: WorkerHarness, name: str, **labels: str) -> float:
    value: float = harness.metrics.value(f"lease_worker_idempotency_{name}_total", **labels)
    return value


def dropped(harness: WorkerHarness) -> float:
    return sum(
        idem_metric(harness, "completions_dropped", queue="jobs", reason=reason)
        for reason in ("taken_over", "not_sent")
    )


class Fleet:
    """`workers` worker apps on one queue and one shared store, each its own owner."""

    def __init__(self, workers: int) -> None:
        self.backend, self.shared = MemoryBackend(), MemoryStore()
        self.on: dict[str, Any] = {"backend": self.backend}
        self.clock = LoopClock()  # one wall clock for all (see test_outage_and_takeover.py)
        self.stores = [FaultyStore(self.shared) for _ in range(workers)]
        self.runs: list[tuple[int, str, float]] = []
        self._ran = anyio.Event()
        self.apps = [self._app(f"w{i}", store) for i, store in enumerate(self.stores)]

    def _app(self, name: str, store: Any) -> Worker:
        app = Worker(WorkerConfig(lease=LEASE, max_in_flight=10), name=name)
        idempotency = Idempotency(store, clock=self.clock)
        guard = idempotency.guard(key=lambda m: str(m.body["key"]))

        @app.handler("jobs", idempotent=guard)
        async def job(message: Message) -> None:
            self.runs.append((message.body["key"], name, anyio.current_time()))
            self._ran.set()
            await anyio.sleep(WORK_S)

        return app

    async def wait_runs(self, count: int) -> None:
        while len(self.runs) < count:
            self._ran = anyio.Event()
            await self._ran.wait()

    def down(self, down: bool) -> None:
        for store in self.stores:
            store.down = down

    def twice(self) -> list[int]:
        counts = Counter(key for key, _, _ in self.runs)
        return sorted(key for key, count in counts.items() if count > 1)

    def never_completed(self) -> list[int]:
        return [
            key
            for key in range(KEYS)
            if (record := self.shared.get(f"jobs:{key}")) is None
            or record.state is not RecordState.COMPLETED
        ]


async def run_outage(fleet: Fleet) -> list[WorkerHarness]:
    """Starts the workers (the second at SECOND_AT), sends every key at each of CYCLES_AT,
    takes the store down from DOWN_AT to UP_AT, and returns once the queue is empty and
    every handler has ended, the workers stopped."""
    async with contextlib.AsyncExitStack() as stack:
        harnesses = [await stack.enter_async_context(run_worker(fleet.apps[0], **fleet.on))]
        events = [(at, "send") for at in CYCLES_AT] + [(DOWN_AT, "down"), (UP_AT, "up")]
        events += [(SECOND_AT, "start")] if len(fleet.apps) > 1 else []
        for at, what in sorted(events):
            await anyio.sleep(max(0.0, at - anyio.current_time()))
            if what == "send":
                for key in range(KEYS):
                    await harnesses[0].send("jobs", {"key": key})
            elif what == "start":
                worker = run_worker(fleet.apps[1], **fleet.on)
                harnesses.append(await stack.enter_async_context(worker))
            else:
                fleet.down(what == "down")
        while True:
            counts = harnesses[0].engine.counts("jobs")
            if (counts.visible, counts.in_flight, counts.delayed) == (0, 0, 0):
                break
            await anyio.sleep(1)
        for harness in harnesses:
            await harness.wait_until_idle()
    return harnesses


async def test_a_key_completed_during_an_outage_runs_once() -> None:
    """The worker whose heartbeat finds the store back first meets the other's stale
    claims, the other's completions not yet written (before the fix: 5 of 25 keys, those
    the first worker completed during the outage, ran twice)."""
    fleet = Fleet(2)
    harnesses = await run_outage(fleet)
    started_while_down = [run for run in fleet.runs if DOWN_AT <= run[2] < UP_AT]
    lost = sum(dropped(harness) for harness in harnesses)
    print(
        f"{len(fleet.runs)} runs of {KEYS} keys; run twice: {fleet.twice()}; started while "
        f"down: {len(started_while_down)}; never completed: {fleet.never_completed()}; "
        f"completions dropped: {lost:g}"
    )
    assert fleet.twice() == []
    assert len(fleet.runs) == KEYS
    assert started_while_down == []
    assert fleet.never_completed() == []
    assert lost == 0
    # The outage deferred completions: the case under test happened.
    assert any(run[2] < DOWN_AT < run[2] + WORK_S for run in fleet.runs)


async def test_a_completion_dropped_by_a_takeover_is_logged_and_counted() -> None:
    """A partition: A finishes a key while only A is cut off from the store, for longer
    than its heartbeat. B, which reaches the store, takes A's claim over (the documented
    limit) and runs the key again; when A's store comes back, its deferred completion is
    refused. That is logged (`idempotency.completion_dropped`) and counted."""
    fleet = Fleet(2)
    a_store = fleet.stores[0]
    with capture_logs() as logs:
        async with run_worker(fleet.apps[0], backend=fleet.backend) as a:
            await a.send("jobs", {"key": 1})
            await fleet.wait_runs(1)
            a_store.down = True  # A's side of a partition; its handler ends in 5 s
            async with run_worker(fleet.apps[1], backend=fleet.backend) as b:
                await b.send("jobs", {"key": 1})  # sent again, reaches B meanwhile
                await fleet.wait_runs(2)
                await b.wait_until_idle()
                a_store.down = False
                await anyio.sleep(VISIBILITY_S)  # A's heartbeat sends what it deferred
                await a.wait_until_idle()
    assert [worker for _, worker, _ in fleet.runs] == ["w0", "w1"]
    assert idem_metric(a, "completions_dropped", queue="jobs", reason="taken_over") == 1
    assert dropped(a) == 1 and dropped(b) == 0
    lines = [line for line in logs if line["event"] == "idempotency.completion_dropped"]
    assert [(line["log_level"], line["reason"]) for line in lines] == [("error", "taken_over")]


async def test_a_completion_still_deferred_at_the_stop_is_logged_and_counted() -> None:
    fleet = Fleet(1)
    with capture_logs() as logs:
        async with run_worker(fleet.apps[0], backend=fleet.backend) as a:
            await a.send("jobs", {"key": 1})
            await fleet.wait_runs(1)
            fleet.down(True)
            await anyio.sleep(WORK_S + 1)  # the handler ended; its completion is deferred
    assert idem_metric(a, "completions_dropped", queue="jobs", reason="not_sent") == 1
    assert dropped(a) == 1
    lines = [line for line in logs if line["event"] == "idempotency.completion_dropped"]
    assert [(line["log_level"], line["reason"]) for line in lines] == [("error", "not_sent")]


class RefusingReplaces(FaultyStore):
    """The next `refuse` replaces (completions) fail; everything else goes through."""

    refuse = 0

    async def replace(self, record: Record, *, token: str) -> bool:
        if self.refuse > 0:
            self.refuse -= 1
            self.calls["replace"] += 1
            raise StoreError("replace", "refused (test)")
        return await super().replace(record, token=token)


async def test_a_worker_writes_its_own_deferred_completion_before_judging_its_claim() -> None:
    """A copy of a key reaches the worker whose completion of it waits in the heartbeat:
    the completion is sent first, so the copy is a duplicate at once (it was released as
    claimed elsewhere, by the worker itself, for as long as its heartbeat)."""
    store = RefusingReplaces(MemoryStore())
    app = Worker(WorkerConfig(lease=LEASE), name="w")
    runs: list[float] = []

    @app.handler("jobs", idempotent=Idempotency(store).guard(key=lambda m: str(m.body["key"])))
    async def job(message: Message) -> None:
        runs.append(anyio.current_time())
        store.refuse = 2  # the completion, and the heartbeat's first try
        await anyio.sleep(WORK_S)

    async with run_worker(app) as harness:
        await harness.send("jobs", {"key": 1})
        await anyio.sleep(WORK_S + 0.5)  # the completion is deferred, the heartbeat backs off
        await harness.send("jobs", {"key": 1})
        records = await harness.wait_for_handled(2)
        copy_done_at = anyio.current_time()
    assert runs == [0.0]
    assert [record.outcome for record in records] == [Outcome.SUCCEEDED, Outcome.DUPLICATE]
    assert copy_done_at == pytest.approx(WORK_S + 0.5, abs=0.1)
    assert store.inner.get("jobs:1").state is RecordState.COMPLETED  # type: ignore[attr-defined]
