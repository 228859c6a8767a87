"""Figures that do not depend on timing: API requests per message, bytes per in-flight lease
and per drain (tracemalloc), for the CI guard (tests/bench/test_budgets.py) and the report.

Everything on the in-memory engine runs under looptime (virtual time), so a figure is the
same on a busy CI runner as on an idle laptop: what changes it is the code. tracemalloc
counts the bytes Python allocates (objects, their dicts and lists), not the interpreter's
own arenas, so it is steadier than the resident set and lower than it.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import logging
import math
import subprocess
import sys
import tracemalloc
import urllib.request
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import structlog

from backends.sqs import SqsBackend
from bench._common import fill, run_async, run_until_handled
from bench._counting import CountingBackend
from worker import Message, Worker, WorkerConfig
from worker.types import OutgoingMessage, QueueSpec

QUEUE = "footprint"


@dataclass(frozen=True, slots=True)
class Drain:
    """N messages drained by a no-op handler on the memory engine."""

    messages: int
    #: Backend calls by operation (receive, delete, extend, release).
    calls: Counter[str]
    #: tracemalloc's peak during the drain, above what was traced before it started.
    peak_bytes: int
    #: Still allocated once the worker has shut down (the engine's queue is kept alive).
    retained_bytes: int

    @property
    def requests_per_message(self) -> float:
        return sum(self.calls.values()) / self.messages


@contextmanager
def production_logging() -> Iterator[None]:
    """Log lines filtered at INFO, the CLI's default, and discarded once built; the caller's
    configuration is put back after. Unconfigured structlog (as under pytest) would print
    every DEBUG line, a per-message cost no deployment pays, and bytes a test's capture
    keeps; the figures must not depend on who calls."""
    saved = structlog.get_config()
    structlog.configure(
        processors=[structlog.processors.add_log_level],
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
        logger_factory=structlog.ReturnLoggerFactory(),
        cache_logger_on_first_use=False,
    )
    try:
        yield
    finally:
        structlog.configure(**saved)


def _noop_app(max_in_flight: int) -> Worker:
    app = Worker(WorkerConfig(max_in_flight=max_in_flight, wait_s=1))

    @app.handler(QUEUE)
    async def noop(message: Message) -> None:
        return None

    return app


async def _drain(count: int, max_in_flight: int, trace: bool) -> Drain:
    backend = CountingBackend()
    await backend.create_queue(QueueSpec(QUEUE))
    await fill(backend, QUEUE, count)
    gc.collect()
    if trace:
        tracemalloc.start()
    try:
        await run_until_handled(_noop_app(max_in_flight), backend, count)
        gc.collect()
        current, peak = tracemalloc.get_traced_memory() if trace else (0, 0)
    finally:
        tracemalloc.stop()
    assert backend.engine.counts(QUEUE).visible == 0
    return Drain(count, backend.calls, peak, current)


def drain(count: int, *, max_in_flight: int = 100, warm_up: int = 500) -> Drain:
    """Drain `warm_up` messages (imports, caches, metric children), then `count` traced."""

    async def both() -> Drain:
        await _drain(warm_up, max_in_flight, trace=False)
        return await _drain(count, max_in_flight, trace=True)

    with production_logging():
        return run_async(both, virtual_time=True)


async def _held(count: int) -> float:
    app = Worker(WorkerConfig(max_in_flight=count, wait_s=1))
    all_held, release = anyio.Event(), anyio.Event()
    started = 0
    traced: list[int] = []

    @app.handler(QUEUE)
    async def blocked(message: Message) -> None:
        nonlocal started
        started += 1
        if started == count:
            gc.collect()
            traced.append(tracemalloc.get_traced_memory()[0])
            tracemalloc.stop()
            all_held.set()
        await release.wait()

    backend = CountingBackend()
    await backend.create_queue(QueueSpec(QUEUE))
    await fill(backend, QUEUE, count)

    async def run() -> None:
        await run_until_handled(app, backend, count)

    gc.collect()
    tracemalloc.start()
    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(run)
            await all_held.wait()
            release.set()
    finally:
        tracemalloc.stop()
    return traced[0] / count


def bytes_per_lease(count: int) -> float:
    """Bytes allocated per in-flight message with `count` handlers blocked on an event:
    tracemalloc's figure once all are held, less the one before the worker started (the
    filled queue), over `count`. Engine, lease, message, handler task and scope together."""
    with production_logging():
        return run_async(_held, count, virtual_time=True)


# -- over the SQS protocol ------------------------------------------------------------------


def endpoint_requests(url: str) -> Counter[str]:
    """Requests served so far by operation: a lease-worker endpoint's `GET /_stats`."""
    with urllib.request.urlopen(f"{url}/_stats", timeout=10) as answer:
        stats = json.loads(answer.read())
    return Counter({str(k): int(v) for k, v in stats["requests"].items()})


async def drain_over_sqs(backend: SqsBackend, url: str, count: int, queue: str) -> Counter[str]:
    """Requests the runtime makes to drain `count` messages from `queue` (created and filled
    here) through `backend`, which talks to the endpoint at `url`; real time."""
    await backend.create_queue(QueueSpec(queue))
    for start in range(0, count, 10):
        batch = [OutgoingMessage(entry_id=str(i), body="{}") for i in range(min(10, count - start))]
        await backend.send(queue, batch)
    before = await anyio.to_thread.run_sync(endpoint_requests, url)
    app = Worker(WorkerConfig(max_in_flight=10, wait_s=1))

    @app.handler(queue)
    async def noop(message: Message) -> None:
        return None

    with anyio.fail_after(60):
        await run_until_handled(app, backend, count)
    return await anyio.to_thread.run_sync(endpoint_requests, url) - before


@dataclass(frozen=True, slots=True)
class Figures:
    """What tests/bench/test_budgets.py checks, measured in one fresh process."""

    #: Backend calls draining budgets.DRAIN_MESSAGES, and deletes draining twice as many.
    calls: dict[str, int]
    twice_deletes: int
    peak_bytes: int
    retained_bytes: int
    twice_retained_bytes: int
    bytes_per_lease: float
    #: The renewal run at budgets.RENEWAL_LEASES.
    calls_per_round: list[int]
    lapsed: int
    handled: int


def measure() -> Figures:
    from bench import budgets, lease_scale

    drained = drain(budgets.DRAIN_MESSAGES)
    twice = drain(2 * budgets.DRAIN_MESSAGES)
    per_lease = bytes_per_lease(budgets.HELD_MESSAGES)
    with production_logging():
        renewals = lease_scale.run(budgets.RENEWAL_LEASES)
    return Figures(
        calls=dict(drained.calls),
        twice_deletes=twice.calls["delete"],
        peak_bytes=drained.peak_bytes,
        retained_bytes=drained.retained_bytes,
        twice_retained_bytes=twice.retained_bytes,
        bytes_per_lease=per_lease,
        calls_per_round=renewals.calls_per_round,
        lapsed=renewals.lapsed,
        handled=renewals.handled,
    )


def measure_in_a_fresh_process() -> Figures:
    """`measure()` in a new interpreter: tracemalloc counts every thread's allocations, and
    a test process has other tests' threads (servers, gateways) and caches; a fresh one has
    only this. About 5 s."""
    done = subprocess.run(
        [sys.executable, "-m", "bench.footprint", "--json"],
        cwd=Path(__file__).resolve().parents[1],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"bench.footprint failed: {done.stderr[-2000:]}")
    return Figures(**json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    """`python -m bench.footprint [--json]`: today's figures for bench/budgets.py (the SQS
    request count is the test's own)."""
    from bench import budgets

    figures = measure()
    if "--json" in sys.argv[1:]:
        print(json.dumps(dataclasses.asdict(figures)))
        return
    growth = (figures.twice_retained_bytes - figures.retained_bytes) / budgets.DRAIN_MESSAGES
    for name, value in {
        **dataclasses.asdict(figures),
        "retained growth per message": round(growth, 3),
        "floor ceil(N/10)": math.ceil(budgets.RENEWAL_LEASES / 10),
    }.items():
        print(f"{name:28} {value}")


if __name__ == "__main__":
    main()
