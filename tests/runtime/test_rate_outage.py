"""A shared rate limit failing open (`on_outage="open"`) while its store is down, and its
way back to the shared limit once the store answers again.

Virtual time (looptime). The store is a fake over `MemoryRateStore` that can refuse at once
(a restarted Redis: the connection is refused, which redis-py reports in well under a
millisecond) or answer nothing (a partition, a SIGSTOPped Redis).
"""

from __future__ import annotations

from dataclasses import dataclass

import anyio
import pytest

from worker.clock import LoopClock
from worker.config import RateLimit
from worker.runtime.metrics import Metrics
from worker.runtime.rate_gate import RateGate
from worker.runtime.rate_store import MemoryRateStore, RateStoreError

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]


class DownStore:
    """A `MemoryRateStore` that is down while `refusing` (each call raises at once) or
    `silent` (each call waits forever)."""

    def __init__(self, *, refusing: bool = False, silent: bool = False) -> None:
        self.inner = MemoryRateStore()
        self.refusing = refusing
        self.silent = silent
        self.calls = 0
        self.answered = 0

    async def grant(self, key: str, count: int, per_s: float, burst: int) -> float:
        self.calls += 1
        if self.silent:
            await anyio.sleep_forever()
        if self.refusing:
            raise RateStoreError("ConnectionError: Error 111 connecting: Connection refused")
        self.answered += 1
        return await self.inner.grant(key, count, per_s, burst)

    async def close(self) -> None:
        pass


def _gate(store: DownStore, limit: RateLimit) -> RateGate:
    """A gate on WorkerConfig's defaults: a 5 s call timeout, pauses from 0.5 s to 30 s."""
    return RateGate(
        "jobs",
        limit,
        batch=10,
        store=store,
        clock=LoopClock(),
        metrics=Metrics(),
        call_timeout_s=5.0,
        backoff_s=0.5,
        backoff_max_s=30.0,
    )


@dataclass(frozen=True, slots=True)
class Acquired:
    asked_at: float
    granted_at: float
    count: int
    #: Whether the store answered for these tokens (False: the local schedule's).
    shared: bool


async def _acquire_until(gate: RateGate, store: DownStore, end: float) -> list[Acquired]:
    """Acquire batches of 10 one after another, as a receiver does, until `end`."""
    stopped = anyio.Event()
    got: list[Acquired] = []
    while anyio.current_time() < end:
        asked_at, answered = anyio.current_time(), store.answered
        count = await gate.acquire(10, stopped)
        got.append(Acquired(asked_at, anyio.current_time(), count, store.answered > answered))
    return got


async def test_failing_open_the_next_grant_after_a_refusing_store_answers_comes_from_it() -> None:
    """Redis restarted (refusing connections for 20 s): failing open, the gate asked again
    after pauses doubling to `receive_backoff_max_s`, so it went on alone for seconds after
    Redis answered again (3.1-3.6 s with 3 processes, measured by a user). Now it asks at
    every grant, and the first grant it asks for once the store answers comes from it; the
    local tokens granted before then are at most one grant."""
    limit = RateLimit(per_s=50, burst=10, grant=5, shared="memory://unused", on_outage="open")
    store = DownStore(refusing=True)
    gate = _gate(store, limit)
    began = anyio.current_time()
    back = began + 20.0
    got: list[Acquired] = []

    async def receiver() -> None:
        got.extend(await _acquire_until(gate, store, began + 25.0))

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(receiver)
        await anyio.sleep(back - began)
        store.refusing = False  # listening again, mid-way through a local grant's wait
    down = [a for a in got if a.asked_at < back]
    assert not any(a.shared for a in down)
    # Asked at every grant while it refused (cheap: a refusal costs no time).
    assert store.calls - store.answered == len(down)
    # The local schedule at the full rate meanwhile: a burst, then 50 a second.
    assert sum(a.count for a in down) >= 50 * 20
    # The first grant asked for after the store is back comes from it...
    assert next(a for a in got if a.asked_at >= back).shared
    # ...and what the local schedule granted before is one grant at most (5, not a burst).
    assert sum(a.count for a in got if not a.shared and a.granted_at > back) <= 5
    assert max(a.count for a in down) == 5
    # From then on the shared limit: 5 tokens at a time, 50 a second.
    after = [a for a in got if a.asked_at >= back]
    assert all(a.shared for a in after)
    assert sum(a.count for a in after) <= 10 + 50 * 5


async def test_failing_open_a_silent_store_is_asked_a_tenth_of_the_time_at_most() -> None:
    """A store that answers nothing costs each look at it (1 s at most, failing open) in
    held receives: the next look waits nine times as long, so the local schedule runs 90%
    of the time or more, and a store that answers again is back within 10 s."""
    limit = RateLimit(per_s=10, burst=10, shared="memory://unused", on_outage="open")
    store = DownStore(silent=True)
    gate = _gate(store, limit)
    began = anyio.current_time()
    got: list[Acquired] = []

    async def receiver() -> None:
        got.extend(await _acquire_until(gate, store, began + 130.0))

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(receiver)
        await anyio.sleep(100.0)
        store.silent = False
    down = [a for a in got if a.asked_at < began + 100.0]
    # The first call waits the whole call timeout (5 s: the outage is not known yet), then
    # one look of 1 s every 10 s (at 14, 24, ... 94): 14 s of the first 100 held.
    assert store.calls - store.answered == 1 + 9
    assert sum(a.count for a in down) >= 10 * 85
    # The look at 104 finds it back.
    first_shared = next(a for a in got if a.shared)
    assert first_shared.asked_at - (began + 100.0) <= 9.0 + 1.0
    assert all(a.shared for a in got if a.asked_at >= first_shared.granted_at)
