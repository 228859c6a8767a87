"""Issue 28 (2) on a real redis-server: an outage longer than the heartbeat runs no key twice.

Two workers (two `Idempotency` owners, A and B) in this process, in real time, on the
in-memory engine, share a `RedisStore` on a redis-server of the test's own. Leases of 4 s
(so a 4 s heartbeat, renewed 2 s before it runs out; while the store is down a heartbeat
tries every 2 s); store calls time out after 1 s (so the takeover grace is 2 + 1 + 1 = 4 s).

Each worker starts handlers for 10 of 20 keys; the server is stopped (its data saved) while
they run and started again 6 s or more later, when both heartbeats have run out, right
after a failed try of A's heartbeat: so B's heartbeat finds the server back first, a second
or so before A's. Copies of every key come once during the outage and five times, a quarter
of a second apart, once B is back. B meets A's stale claims, whose completions A has not
written yet. Before the fix, B took them over and ran those keys again (9 of 20 in each of
three runs).
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Callable

import anyio
import pytest
from redis.asyncio import Redis

from backends.memory import MemoryBackend
from tests.idempotency.conftest import OwnRedis
from worker import LeaseConfig, Message, Worker, WorkerConfig
from worker.idempotency import Idempotency, Record, RecordState, RedisStore
from worker.testing import WorkerHarness, run_worker

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(90)]

LEASE = LeaseConfig(visibility_s=4, extension_s=4, renew_margin_s=2)
KEYS = 20
WORK_S = 2.0
B_AT, STOP_AT, COPIES_AT, START_AFTER = 1.0, 1.5, 4.0, 7.5


async def test_a_redis_outage_runs_no_key_twice(own_redis: OwnRedis) -> None:
    backend, prefix = MemoryBackend(), f"outage-{uuid.uuid4().hex}:"
    runs: list[tuple[int, str, float]] = []
    started = time.monotonic()
    owners: dict[str, Idempotency] = {}
    stores: list[RedisStore] = []

    def make_app(name: str) -> Worker:
        config = WorkerConfig(lease=LEASE, max_in_flight=KEYS // 2, wait_s=1)
        app = Worker(config, name=name)
        stores.append(RedisStore(Redis.from_url(own_redis.url), prefix=prefix))
        owners[name] = Idempotency(stores[-1], store_timeout_s=1.0)
        guard = owners[name].guard(key=lambda m: str(m.body["key"]))

        @app.handler("jobs", idempotent=guard)
        async def job(message: Message) -> None:
            runs.append((message.body["key"], name, time.monotonic() - started))
            await anyio.sleep(WORK_S)

        return app

    async def at(seconds: float) -> None:
        await anyio.sleep(max(0.0, seconds - (time.monotonic() - started)))

    async def send_all(harness: WorkerHarness) -> None:
        for key in range(KEYS):
            await harness.send("jobs", {"key": key})

    outage: list[float] = []
    try:
        async with run_worker(make_app("a"), backend=backend) as a:
            await send_all(a)  # A takes half; B, started later, the other half
            await at(B_AT)
            async with run_worker(make_app("b"), backend=backend) as b:
                await at(STOP_AT)
                outage.append(time.monotonic() - started)
                await anyio.to_thread.run_sync(own_redis.stop)
                await at(COPIES_AT)
                await send_all(a)
                await at(START_AFTER)
                await a_fresh_failure(owners["a"])
                await anyio.to_thread.run_sync(own_redis.start)
                outage.append(time.monotonic() - started)
                await until(owners["b"].heartbeat.live)
                for _ in range(5):
                    await send_all(a)
                    await anyio.sleep(0.25)
                await drained(a)
                await a.wait_until_idle()
                await b.wait_until_idle()
        not_completed = await never_completed(own_redis, prefix)
    finally:
        for store in stores:
            await store.aclose()
    counts = Counter(key for key, _, _ in runs)
    twice = sorted(key for key, count in counts.items() if count > 1)
    while_down = [run for run in runs if outage[0] <= run[2] < outage[1]]
    dropped = sum(
        harness.metrics.value(
            "lease_worker_idempotency_completions_dropped_total", queue="jobs", reason=reason
        )
        for harness in (a, b)
        for reason in ("taken_over", "not_sent")
    )
    print(
        f"outage {outage[0]:.2f}-{outage[1]:.2f} s; {len(runs)} runs of {KEYS} keys; run "
        f"twice: {twice}; started while stopped: {len(while_down)}; not completed: "
        f"{not_completed}; completions dropped: {dropped:g}"
    )
    assert twice == []
    assert sorted(counts) == list(range(KEYS))
    assert while_down == []
    assert not_completed == []
    assert dropped == 0
    # The case under test happened: handlers of both workers ran into the outage.
    assert {name for _, name, at in runs if at < outage[0] < at + WORK_S} == {"a", "b"}


async def a_fresh_failure(owner: Idempotency) -> None:
    """Returns just after `owner`'s heartbeat failed a try: its next is 2 s away."""

    def failed_beats() -> float | None:
        name, labels = "lease_worker_idempotency_store_errors_total", {"operation": "beat"}
        return owner.metrics.registry.get_sample_value(name, labels)

    seen = failed_beats()
    await until(lambda: failed_beats() != seen)


async def until(condition: Callable[[], bool]) -> None:
    """Polls `condition` (state of another task's making, with no event to wait on)."""
    with anyio.fail_after(10):
        while True:
            if condition():
                return
            await anyio.sleep(0.01)


async def drained(harness: WorkerHarness) -> None:
    with anyio.fail_after(60):
        while True:
            counts = harness.engine.counts("jobs")
            if (counts.visible, counts.in_flight, counts.delayed) == (0, 0, 0):
                return
            await anyio.sleep(0.2)


async def never_completed(server: OwnRedis, prefix: str) -> list[int]:
    client = Redis.from_url(server.url)
    try:
        found = [await client.get(f"{prefix}key:jobs:{key}") for key in range(KEYS)]
    finally:
        await client.aclose()
    return [
        key
        for key, raw in enumerate(found)
        if raw is None or Record.from_json(raw).state is not RecordState.COMPLETED
    ]
