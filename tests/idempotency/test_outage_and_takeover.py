"""The guard when things break, on virtual time (looptime).

Must-show 6: the store down for a minute: nothing lost, nothing run unguarded, the worker
keeps running. Must-show 3, in one process: a worker that stops dead mid-handler (its queue
and store calls hang, as a SIGKILLed process's would never come) is taken over one
visibility timeout later, plus the takeover grace (issue 28: the dead owner could as well
be a live one cut off by an outage, holding a completion). And the store's cost: one call
per heartbeat round, however many claims are held.

Workers that share a store share one `LoopClock` here: a LoopClock fixes its wall-clock
offset at first use, which under virtual time puts two clocks first used at different
virtual times that far apart (real processes read one real clock).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import anyio
import pytest

from backends.memory import MemoryBackend
from tests.idempotency.fakes import FaultyStore, LossyBackend
from worker import LeaseConfig, LoopClock, Message, Outcome, Worker, WorkerConfig
from worker.idempotency import Idempotency, MemoryStore, RecordState
from worker.testing import run_worker

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]

VISIBILITY_S = 30
LEASE = LeaseConfig(visibility_s=VISIBILITY_S, extension_s=VISIBILITY_S, renew_margin_s=10)


def metric(harness: Any, name: str, **labels: str) -> float:
    value: float = harness.metrics.value(name, **labels)
    return value


async def test_a_store_outage_loses_nothing_and_runs_nothing_unguarded() -> None:
    inner = MemoryStore()
    store = FaultyStore(inner)
    idempotency = Idempotency(store)
    app = Worker(WorkerConfig(lease=LEASE, max_in_flight=10))
    completed: Counter[int] = Counter()
    unguarded: list[int] = []
    all_done = anyio.Event()

    @app.handler("jobs", idempotent=idempotency.guard(key=lambda m: str(m.body["n"])))
    async def job(message: Message) -> None:
        n = message.body["n"]
        claim = inner.get(f"jobs:{n}")
        if claim is None or claim.owner != idempotency.owner or claim.state.value != "in_progress":
            unguarded.append(n)
        await anyio.sleep(8)
        completed[n] += 1
        if len(completed) == 20:
            all_done.set()

    async with run_worker(app) as harness:
        for n in range(5):
            await harness.send("jobs", {"n": n})
        await anyio.sleep(4)  # five handlers are mid-run when the store goes down
        store.down = True
        for n in range(5, 15):
            await harness.send("jobs", {"n": n})
        await anyio.sleep(60)  # longer than the heartbeat's TTL (30 s)
        assert not harness.supervisor.stopping  # the worker kept running
        store.down = False
        for n in range(15, 20):
            await harness.send("jobs", {"n": n})
        await all_done.wait()
        await harness.wait_until_idle()
        await anyio.sleep(VISIBILITY_S)  # the heartbeat's retries of the deferred writes
        assert idempotency.heartbeat.pending == 0
        counts = harness.engine.counts("jobs")
        assert (counts.visible, counts.in_flight, counts.delayed) == (0, 0, 0)
    assert completed == Counter({n: 1 for n in range(20)})  # each once, none lost
    assert unguarded == []
    assert all(inner.get(f"jobs:{n}").state is RecordState.COMPLETED for n in range(20))  # type: ignore[union-attr]
    handled = "lease_worker_messages_handled_total"
    # Released while the store was down, but not every 5 s (120 releases for 10 messages in
    # 60 s): each waits as long as the store has been down so far.
    assert 0 < metric(harness, handled, queue="jobs", outcome="retry") <= 60
    errors = metric(
        harness, "lease_worker_idempotency_store_errors_total", operation="create"
    ) + metric(harness, "lease_worker_idempotency_store_errors_total", operation="replace")
    assert errors > 0
    assert metric(harness, handled, queue="jobs", outcome="failed") == 0


@pytest.mark.parametrize("freeze_at", [41.0, 45.0, 59.0])
async def test_a_dead_worker_is_taken_over_one_visibility_and_the_grace_later(
    freeze_at: float,
) -> None:
    engine_backend, shared = MemoryBackend(), MemoryStore()
    backend_a, store_a = LossyBackend(inner=engine_backend), FaultyStore(shared)
    starts: list[tuple[str, float]] = []
    started = anyio.Event()
    clock = LoopClock()  # one wall clock for both (see below)
    guarded: dict[str, Idempotency] = {}

    def make_app(name: str, store: Any) -> Worker:
        app = Worker(WorkerConfig(lease=LEASE), name=name)
        guarded[name] = Idempotency(store, clock=clock)

        @app.handler("jobs", idempotent=guarded[name].guard())
        async def job(message: Message) -> None:
            starts.append((name, anyio.current_time()))
            started.set()
            await anyio.sleep(1_000)

        return app

    async with run_worker(make_app("a", store_a), backend=backend_a) as a:
        await a.send("jobs", {"n": 1})
        await started.wait()
        async with run_worker(make_app("b", shared), backend=engine_backend) as b:
            await anyio.sleep(freeze_at - anyio.current_time())
            backend_a.frozen = store_a.frozen = True  # A stops dead: no call ever ends
            while len(starts) < 2:
                started = anyio.Event()
                await started.wait()
            took_over_at = starts[1][1]
            b.shutdown()
        backend_a.frozen = store_a.frozen = False  # let A's shutdown end
    delay = took_over_at - freeze_at
    print(f"frozen at {freeze_at:g} s, taken over at {took_over_at:g} s: {delay:g} s later")
    assert starts[1][0] == "b"
    # The message comes back when A's last renewal runs out, A's heartbeat with it; B finds
    # it claimed, hands it back for 2 s ("claimed elsewhere"), and on the next receive waits
    # out the grace (the margin, 10 s, a store call's timeout, 5 s, and a second).
    grace = guarded["b"].takeover_grace_s
    assert grace == 16
    assert grace < delay <= VISIBILITY_S + 2 + grace + 1
    assert metric(b, "lease_worker_idempotency_takeovers_total", queue="jobs") == 1


async def test_the_store_is_written_once_per_round_however_many_claims() -> None:
    store = FaultyStore(MemoryStore())
    idempotency = Idempotency(store)
    app = Worker(WorkerConfig(lease=LEASE, max_in_flight=50))
    finished = anyio.Event()
    done: list[int] = []

    @app.handler("jobs", idempotent=idempotency.guard())
    async def job(message: Message) -> None:
        await anyio.sleep(200)
        done.append(1)
        if len(done) == 50:
            finished.set()

    async with run_worker(app) as harness:
        for n in range(50):
            await harness.send("jobs", {"n": n})
        await finished.wait()
        await harness.wait_until_idle()
    rounds = idempotency.heartbeat.calls_per_round
    renewal_calls = metric(harness, "lease_worker_lease_renewal_calls_total", queue="jobs")
    print(f"store calls per round {rounds}, all store calls {dict(store.calls)}")
    print(f"lease renewal calls {renewal_calls:g}")
    # 200 s of 50 claims: a beat every 20 s (the TTL less the margin), one call each; and
    # a beat at start-up and one at the stop.
    assert rounds == [1] * len(rounds) and 10 <= len(rounds) <= 12
    assert store.calls == Counter({"create": 50, "replace": 50, "beat": len(rounds) + 2})
    assert renewal_calls >= 5 * 9  # the leases themselves: 50 in batches of 10, each round
    assert [h.outcome for h in harness.handled] == [Outcome.SUCCEEDED] * 50


@pytest.mark.parametrize(
    ("stop_on_lapse", "cut_off"), [(True, "down"), (True, "frozen"), (False, "down")]
)
async def test_a_worker_cut_off_from_the_store_stops_its_handlers_before_its_claims_go_stale(
    stop_on_lapse: bool, cut_off: str
) -> None:
    """A partition: worker A cannot reach the store (its calls fail, or hang), B can. The
    same order reaches B too (two queues, one key namespace) while A works on it. B waits
    for A's claim to go stale, then takes it over. With `stop_on_lapse`, A's handler was
    stopped before its heartbeat ran out, also when its calls hang longer than that (its
    heartbeat task gives up on a call in time): never two at once. Without it (the default),
    the two overlap: the documented limit."""
    backend, shared = MemoryBackend(), MemoryStore()
    store_a = FaultyStore(shared)
    clock = LoopClock()  # one wall clock: each LoopClock fixes its offset at first use
    running: list[str] = []
    most = 0
    spans: dict[str, list[float]] = {}
    b_started = anyio.Event()

    def make_app(name: str, store: Any, stop: bool) -> Worker:
        app = Worker(WorkerConfig(lease=LEASE), name=name)
        # A store call may hang 10 s: longer than A has between its last failed beat and
        # the lapse, so only the heartbeat task's own deadline stops A in time.
        idempotency = Idempotency(store, stop_on_lapse=stop, clock=clock, store_timeout_s=10)
        guard = idempotency.guard(key=lambda m: str(m.body["order"]), namespace="orders")

        @app.handler(f"jobs-{name}", idempotent=guard)
        async def job(message: Message) -> None:
            nonlocal most
            running.append(name)
            most = max(most, len(running))
            spans[name] = [anyio.current_time()]
            if name == "b":
                b_started.set()
            try:
                await anyio.sleep(100)
            finally:
                running.remove(name)
                spans[name].append(anyio.current_time())

        return app

    async with run_worker(make_app("a", store_a, stop_on_lapse), backend=backend) as a:
        await a.send("jobs-a", {"order": 7})
        await anyio.sleep(25)
        setattr(store_a, cut_off, True)  # A's side of a partition: errors, or no answer
        async with run_worker(make_app("b", shared, False), backend=backend) as b:
            await b.send("jobs-b", {"order": 7})  # the same order, sent again
            await b_started.wait()
            b.shutdown()
            a.shutdown()
    print(f"stop_on_lapse={stop_on_lapse} ({cut_off}): a ran {spans['a']}, b ran {spans['b']}")
    if stop_on_lapse:
        assert most == 1
        assert spans["a"][1] <= 50 - 2.5  # A's beat ran out at 50; it stopped a lead before
        # 50, the clock skew allowance, and the takeover grace: the margin, 10 s, a store
        # call's timeout, 10 s here, and a second.
        assert spans["b"][0] == pytest.approx(51 + 21, abs=0.5)
        handled = "lease_worker_messages_handled_total"
        assert metric(a, handled, queue="jobs-a", outcome="lease_lost") == 1
    else:
        assert most == 2  # A still ran when B took the stale claim over
