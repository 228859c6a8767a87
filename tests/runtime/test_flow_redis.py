"""Shared rate limits on a real redis-server (issue 31): the store, and the gate and worker
around it through the four fates of a grant.

Real time (Redis grants on its own clock, `TIME`), so the limits are fast (50-100 a second)
and every assertion is one that lateness cannot break: a grant is used no earlier than the
schedule allows, so "never over the limit" holds however slow the machine. Waits are on
events or on the store-error metric, never sleeps.

- not sent: Redis down (connection refused): 'closed' receives nothing and loses nothing,
  'open' goes on at the local rate and says so once;
- landed and answered: two clients share one schedule;
- landed, answer late (the server stopped with SIGSTOP, or a store that answers after the
  call timeout) and landed, answer lost (a store whose answer never arrives): the grant's
  tokens are spent in Redis and never used, so the fleet runs under its limit, never over.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import anyio
import pytest
import pytest_asyncio
from redis.asyncio import Redis
from structlog.testing import capture_logs

from backends.memory import MemoryBackend
from tests.idempotency.conftest import OwnRedis, running_redis
from worker import Message, Outcome, OutgoingMessage, Worker, WorkerConfig
from worker.clock import LoopClock
from worker.config import FlowControl, RateLimit
from worker.runtime.metrics import Metrics
from worker.runtime.rate_gate import RateGate
from worker.runtime.rate_store import RateStore, RateStoreError, RedisRateStore
from worker.testing import WorkerHarness, run_worker

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(60)]


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[OwnRedis]:
    with running_redis(tmp_path) as server:
        yield server


@pytest_asyncio.fixture
async def redis_store(own_redis: OwnRedis) -> AsyncIterator[RedisRateStore]:
    store = RedisRateStore.from_url(own_redis.url, timeout_s=2.0)
    try:
        yield store
    finally:
        await store.close()


def _key() -> str:
    return f"test:rate:{uuid.uuid4().hex}"


def _within_rate(origin: float, starts: list[float], per_s: float, burst: int) -> bool:
    """No more than `burst + per_s * t` tokens used in the t seconds from `origin`, a time
    before which none could be granted (10 ms of slack for the two clocks, Redis's and this
    loop's). Measured from `origin`, not the first start, so that a late start (a loaded
    machine) can only make it hold."""
    return all(index + 1 <= burst + per_s * (at - origin + 0.01) for index, at in enumerate(starts))


# -- the store ---------------------------------------------------------------------------


async def test_two_clients_share_one_schedule(
    own_redis: OwnRedis, redis_store: RedisRateStore
) -> None:
    """The second client's grant waits for the first's tokens: one limit, not two."""
    other = RedisRateStore.from_url(own_redis.url, timeout_s=2.0)
    key = _key()
    try:
        begun = time.monotonic()
        first = await redis_store.grant(key, 10, 100.0, 10)
        second = await other.grant(key, 10, 100.0, 10)
        elapsed = time.monotonic() - begun
        third = await redis_store.grant(key, 10, 100.0, 10)
    finally:
        await other.close()
    assert first == 0.0  # a burst's worth at once after an idle spell
    # 10 tokens at 100 a second: the second grant's tokens come 0.1 s after the first's.
    assert 0.1 - elapsed - 0.005 <= second <= 0.1
    assert 0.2 - (time.monotonic() - begun) - 0.005 <= third <= 0.2
    assert (redis_store.calls, other.calls) == (2, 1)


async def test_the_key_outlives_what_it_holds_back_then_expires(
    own_redis: OwnRedis, redis_store: RedisRateStore
) -> None:
    """Grants queued 50 s ahead: the key lives until then plus a minute, never less (an
    expired key would forget them and let the fleet over its limit); an idle key goes."""
    key = _key()
    begun = time.monotonic()
    for _ in range(50):
        await redis_store.grant(key, 10, 10.0, 10)  # 500 tokens at 10 a second
    redis = Redis.from_url(own_redis.url)
    try:
        now_s, now_us = await redis.time()
        stored = await redis.get(key)
        assert stored is not None
        tat = float(stored)
        ttl_ms = await redis.pttl(key)  # read last: at most what it was at `now`
        ahead_s = tat - (now_s + now_us / 1e6)
        assert 50.0 - (time.monotonic() - begun) - 0.005 <= ahead_s <= 50.0
        assert (ahead_s + 60) * 1000 - 50 <= ttl_ms <= (ahead_s + 60) * 1000 + 3
        # Once the key has expired (what its TTL does), the limit starts afresh.
        await redis.pexpire(key, 1)
        while await redis.exists(key):  # noqa: ASYNC110 (Redis's expiry has no event)
            await anyio.sleep(0.005)
        assert await redis_store.grant(key, 10, 10.0, 10) == 0.0
    finally:
        await redis.aclose()


async def test_a_store_that_cannot_be_reached_raises_rate_store_error(
    own_redis: OwnRedis, redis_store: RedisRateStore
) -> None:
    own_redis.stop(save=False)
    with pytest.raises(RateStoreError, match="ConnectionError"):
        await redis_store.grant(_key(), 10, 10.0, 10)


async def test_the_script_is_loaded_again_after_a_restart(
    own_redis: OwnRedis, redis_store: RedisRateStore
) -> None:
    """A restarted Redis has forgotten the script (EVALSHA answers NOSCRIPT): still granted."""
    key = _key()
    assert await redis_store.grant(key, 10, 10.0, 10) == 0.0
    own_redis.stop(save=True)
    own_redis.start()
    wait = await redis_store.grant(key, 10, 10.0, 10)
    assert 0.0 < wait <= 1.0  # the saved schedule: the first grant's tokens still count


# -- the gate: answers late or lost -----------------------------------------------------


class LateOrLostStore:
    """A real store whose answers to the calls numbered in `lose` never come (the call
    landed: Redis moved the schedule), and to those in `late` come `late_s` after they
    landed. A fake around the real thing, not a mock."""

    def __init__(
        self,
        inner: RateStore,
        *,
        lose: frozenset[int] = frozenset(),
        late: frozenset[int] = frozenset(),
        late_s: float = 0.0,
    ) -> None:
        self.inner = inner
        self.lose = lose
        self.late = late
        self.late_s = late_s
        self.calls = 0

    async def grant(self, key: str, count: int, per_s: float, burst: int) -> float:
        self.calls += 1
        wait = await self.inner.grant(key, count, per_s, burst)
        if self.calls in self.lose:
            raise RateStoreError("ConnectionError: the answer was lost")
        if self.calls in self.late:
            await anyio.sleep(self.late_s)
        return wait

    async def close(self) -> None:
        await self.inner.close()


def _gate(store: RateStore, limit: RateLimit, metrics: Metrics, timeout_s: float) -> RateGate:
    return RateGate(
        "jobs",
        limit,
        batch=10,
        store=store,
        clock=LoopClock(),
        metrics=metrics,
        call_timeout_s=timeout_s,
        backoff_s=0.02,
        backoff_max_s=0.02,
    )


async def _use(gate: RateGate, tokens: int) -> list[float]:
    """Acquire `tokens` one batch at a time; the loop time at which each token came."""
    stopped = anyio.Event()
    times: list[float] = []
    while len(times) < tokens:
        granted = await gate.acquire(min(10, tokens - len(times)), stopped)
        times.extend([anyio.current_time()] * granted)
    return times


@pytest.mark.parametrize("fate", ["lost", "late"])
async def test_a_grant_whose_answer_is_lost_or_late_is_never_used(
    redis_store: RedisRateStore, fate: str
) -> None:
    """The first grant lands in Redis (10 tokens, 0.2 s of the limit) and its answer is
    lost, or comes after the call timeout: the gate asks again and waits behind it, so the
    first tokens it uses come 0.2 s late, and from then on at the limit, never over it."""
    limit = RateLimit(per_s=50, burst=10, shared="redis://unused", key=_key())
    store = LateOrLostStore(
        redis_store,
        lose=frozenset({1}) if fate == "lost" else frozenset(),
        late=frozenset({1}) if fate == "late" else frozenset(),
        late_s=0.5,
    )
    metrics = Metrics()
    gate = _gate(store, limit, metrics, timeout_s=0.1)
    begun = anyio.current_time()
    times = await _use(gate, 40)
    assert metrics.flow_rate_store_errors.labels("jobs").value == 1
    assert metrics.flow_rate_grants.labels("jobs").value == 4  # answered: 4 of 5 calls
    assert store.calls == 5
    # Wasted: without the first call's loss, the first 10 would have come at once.
    assert times[0] - begun >= 0.2 - 0.01
    # 40 used + 10 wasted at 50 a second, less the burst: the last come 0.8 s in at least.
    assert times[-1] - begun >= 0.8 - 0.01
    assert _within_rate(begun, times, per_s=50, burst=10)


async def test_a_stalled_redis_answers_late_and_its_grant_is_not_used(
    own_redis: OwnRedis, redis_store: RedisRateStore
) -> None:
    """Redis stopped (SIGSTOP) while a grant is on the wire: the call times out, the
    script runs when Redis resumes and moves the schedule, and its answer, late, is never
    read as the answer to the next call (redis-py drops the connection): the retry waits
    behind the late grant's tokens."""
    assert own_redis.process is not None
    limit = RateLimit(per_s=50, burst=10, shared=own_redis.url, key=_key())
    metrics = Metrics()
    gate = _gate(redis_store, limit, metrics, timeout_s=0.2)
    errors = metrics.flow_rate_store_errors.labels("jobs")
    stopped = anyio.Event()
    # A connection made before the stall: the script is written at once (a new connection
    # would wait for its handshake's answer, and the call would not be sent at all).
    await redis_store.grant(_key(), 1, 50.0, 10)
    os.kill(own_redis.process.pid, signal.SIGSTOP)
    try:
        async with anyio.create_task_group() as tasks:
            got: list[int] = []

            async def first() -> None:
                got.append(await gate.acquire(10, stopped))

            tasks.start_soon(first)
            await _until(lambda: errors.value >= 1)
            resumed = anyio.current_time()
            os.kill(own_redis.process.pid, signal.SIGCONT)
    finally:
        os.kill(own_redis.process.pid, signal.SIGCONT)
    granted_at = anyio.current_time()
    assert got == [10]
    # The timed-out grant ran when Redis resumed and took the first 10 tokens: these 10
    # are the next 10, 0.2 s after it.
    assert granted_at - resumed >= 0.2 - 0.01
    assert metrics.flow_rate_grants.labels("jobs").value == 1


async def test_failing_open_the_next_grant_after_redis_restarts_comes_from_redis(
    own_redis: OwnRedis, redis_store: RedisRateStore
) -> None:
    """Redis restarted: failing open, the gate asked again after pauses doubling from
    `receive_backoff_s` (0.5 s, 1 s, 2 s, ...), so each process went on alone for seconds
    after Redis listened again. Now the first grant asked for once Redis answers comes
    from Redis (redis-py reconnects on that very call)."""
    limit = RateLimit(per_s=100, burst=10, shared=own_redis.url, key=_key(), on_outage="open")
    metrics = Metrics()
    gate = RateGate(
        "jobs",
        limit,
        batch=10,
        store=redis_store,
        clock=LoopClock(),
        metrics=metrics,
        call_timeout_s=5.0,  # WorkerConfig's defaults
        backoff_s=0.5,
        backoff_max_s=30.0,
    )
    grants = metrics.flow_rate_grants.labels("jobs")
    errors = metrics.flow_rate_store_errors.labels("jobs")
    stopped = anyio.Event()
    assert await gate.acquire(10, stopped) == 10
    own_redis.stop(save=True)
    while errors.value < 5:  # five local grants of 10 at 100 a second: about 0.5 s
        assert await gate.acquire(10, stopped) == 10
    own_redis.start()  # returns once it answers PING: listening again
    assert grants.value == 1
    assert await gate.acquire(10, stopped) == 10
    assert grants.value == 2
    assert errors.value == 5


# -- the worker: Redis down --------------------------------------------------------------


async def _send(backend: MemoryBackend, count: int) -> None:
    for start in range(0, count, 10):
        batch = [
            OutgoingMessage(body=f'{{"n": {start + i}}}', entry_id=str(i))
            for i in range(min(10, count - start))
        ]
        await backend.send("jobs", batch)


def _app(limit: RateLimit, starts: list[float]) -> Worker:
    config = WorkerConfig(
        max_in_flight=10,
        wait_s=1,
        call_timeout_s=0.5,
        receive_backoff_s=0.05,
        receive_backoff_max_s=0.2,
        flow=FlowControl(rate=limit),
    )
    app = Worker(config)

    @app.handler("jobs")
    async def job(message: Message) -> None:
        starts.append(anyio.current_time())

    return app


async def _until(condition: Callable[[], bool], timeout_s: float = 20) -> None:
    """Wait until `condition()` holds, looking every 10 ms (a metric has no event)."""
    with anyio.fail_after(timeout_s):
        while not condition():  # noqa: ASYNC110
            await anyio.sleep(0.01)


def _errors(harness: WorkerHarness) -> float:
    return harness.metrics.flow_rate_store_errors.labels("jobs").value


async def test_failing_closed_receives_nothing_while_redis_is_down_and_loses_nothing(
    own_redis: OwnRedis,
) -> None:
    own_redis.stop(save=False)
    backend = MemoryBackend()
    starts: list[float] = []
    limit = RateLimit(per_s=100, shared=own_redis.url, key=_key(), on_outage="closed")
    with capture_logs() as logs:
        async with run_worker(_app(limit, starts), backend=backend) as harness:
            await _send(backend, 30)
            await _until(lambda: _errors(harness) >= 3)
            assert harness.metrics.receive_calls.labels("jobs").value == 0
            assert starts == []
            assert harness.engine.counts("jobs").visible == 30
            own_redis.start()
            back = anyio.current_time()
            handled = await harness.wait_for_handled(30, timeout_s=20)
    assert [h.outcome for h in handled] == [Outcome.SUCCEEDED] * 30
    assert sorted(h.message.body["n"] for h in handled) == list(range(30))
    assert {h.message.receive_count for h in handled} == {1}  # none received to wait
    events = [entry["event"] for entry in logs if entry["event"].startswith("flow.")]
    assert events == ["flow.rate_store_unreachable", "flow.rate_store_back"]
    assert _within_rate(back, starts, per_s=100, burst=10)


async def test_failing_open_goes_on_at_the_local_rate_and_says_so_once(
    own_redis: OwnRedis,
) -> None:
    own_redis.stop(save=False)
    backend = MemoryBackend()
    starts: list[float] = []
    limit = RateLimit(per_s=20, shared=own_redis.url, key=_key(), on_outage="open")
    with capture_logs() as logs:
        begun = anyio.current_time()
        async with run_worker(_app(limit, starts), backend=backend) as harness:
            await _send(backend, 30)
            handled = await harness.wait_for_handled(30, timeout_s=20)
            errors = _errors(harness)
    assert [h.outcome for h in handled] == [Outcome.SUCCEEDED] * 30
    assert errors >= 2  # asked again after each pause, each time refused
    unreachable = [entry for entry in logs if entry["event"] == "flow.rate_store_unreachable"]
    assert len(unreachable) == 1
    assert unreachable[0]["on_outage"] == "open"
    # The local schedule, at the full rate: a burst of 10, then 20 a second.
    assert _within_rate(begun, starts, per_s=20, burst=10)
    assert starts[-1] - begun >= 1.0 - 0.01
