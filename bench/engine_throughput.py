"""Table 1: the runtime on the in-memory engine against the bare asyncio ceiling.

The worker drains N messages from the in-memory engine with a no-op async handler, holding
at most `max_in_flight` (1,000) at once. The ceiling is the steady-state one: N no-op tasks
run with at most the same 1,000 outstanding (a task is started when one has finished), on
the same event loop, asyncio's and then uvloop's (when installed: the [fast] extra), so each
ratio compares like with like (issue 33's goal: ≥ 0.2). The burst ceiling (all N tasks
started at once, a heap of N tasks the worker never holds) is kept as a note.
The clock covers the drain alone, from the worker's start to its clean shutdown: the queue
is filled before it starts, as in the side-by-side benchmark (until 2026-11-24 the fill was
timed too, about a fifth of the figure, which put the ratio lower).
Ceilings and worker take turns; at full size three times. The ratio is of each side's
fastest round, the median ratio of the rounds beside it. The CPU columns are the process
time per message of the worker, and per task of the steady ceiling (the reciprocal of each
is the rate it would reach if it never waited).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backends.memory import MemoryBackend
from bench._common import LOOPS, Timing, fill, run_async, run_until_handled
from bench._plots import goal_line, plot
from worker import Message, Worker, WorkerConfig
from worker.cli.logging import configure_logging
from worker.types import QueueSpec

#: Issue 33's goal: the runtime on the memory engine at least this fraction of the
#: steady-state ceiling.
GOAL = 0.2
#: The worker's `max_in_flight`, and the steady ceiling's outstanding tasks.
OUTSTANDING = 1000


@dataclass(frozen=True, slots=True)
class Result:
    loop: str
    messages: int
    worker: Timing
    #: The steady-state ceiling: at most OUTSTANDING tasks at once.
    ceiling: Timing
    #: msgs/s of every round: worker, steady ceiling, burst ceiling (the row's figures are
    #: each side's fastest round's).
    rounds: tuple[tuple[float, float, float], ...] = ()
    #: The burst ceiling: all N tasks started at once (a note only).
    burst: Timing | None = None

    @property
    def worker_rate(self) -> float:
        return self.messages / self.worker.wall_s

    @property
    def ceiling_rate(self) -> float:
        return self.messages / self.ceiling.wall_s

    @property
    def ratio(self) -> float:
        return self.worker_rate / self.ceiling_rate

    @property
    def median_ratio(self) -> float:
        """The median over rounds of worker ÷ steady ceiling, each round's own pair."""
        if not self.rounds:
            return self.ratio
        return statistics.median(worker / steady for worker, steady, _ in self.rounds)

    @property
    def burst_ratio(self) -> float | None:
        return None if self.burst is None else self.burst.wall_s / self.worker.wall_s


async def _noop_task() -> None:
    return None


def _clock() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def _since(start: tuple[float, float]) -> Timing:
    wall, cpu = _clock()
    return Timing(wall - start[0], cpu - start[1])


async def bare_ceiling(count: int) -> Timing:
    """The burst ceiling: all `count` no-op tasks started at once."""
    start = _clock()
    async with asyncio.TaskGroup() as tasks:
        for _ in range(count):
            tasks.create_task(_noop_task())
    return _since(start)


async def steady_ceiling(count: int, outstanding: int = OUTSTANDING) -> Timing:
    """The steady-state ceiling: `count` no-op tasks, at most `outstanding` at once (the
    next starts when one has finished), as the worker holds at most `max_in_flight`."""
    slots = asyncio.Semaphore(outstanding)

    async def noop() -> None:
        slots.release()

    start = _clock()
    async with asyncio.TaskGroup() as tasks:
        for _ in range(count):
            await slots.acquire()
            tasks.create_task(noop())
    return _since(start)


async def drain(count: int, *, max_in_flight: int = OUTSTANDING) -> Timing:
    """Fill the queue, then time the worker draining it."""
    app = Worker(WorkerConfig(max_in_flight=max_in_flight, wait_s=1))

    @app.handler("bench")
    async def noop(message: Message) -> None:
        return None

    backend = MemoryBackend()
    await backend.create_queue(QueueSpec("bench"))
    await fill(backend, "bench", count)
    start = _clock()
    await run_until_handled(app, backend, count)
    timing = _since(start)
    assert backend.engine.counts("bench").visible == 0
    return timing


def available_loops() -> list[str]:
    return [loop for loop in LOOPS if loop == "asyncio" or importlib.util.find_spec(loop)]


def run(count: int, loop: str = "asyncio", rounds: int = 1) -> Result:
    """Steady ceiling, burst ceiling and worker in turn, `rounds` times; each side's fastest
    round is kept, every round's rates too."""
    steadies, bursts, workers = [], [], []
    for _ in range(rounds):
        steadies.append(run_async(steady_ceiling, count, loop=loop))
        bursts.append(run_async(bare_ceiling, count, loop=loop))
        workers.append(run_async(drain, count, loop=loop))
    each = tuple(
        (count / w.wall_s, count / s.wall_s, count / b.wall_s)
        for w, s, b in zip(workers, steadies, bursts, strict=True)
    )
    return Result(
        loop,
        count,
        min(workers, key=lambda t: t.wall_s),
        min(steadies, key=lambda t: t.wall_s),
        each,
        min(bursts, key=lambda t: t.wall_s),
    )


def table(results: list[Result]) -> list[str]:
    lines = [
        "| event loop | lease-worker msgs/s | steady ceiling tasks/s | **ratio** (median) | "
        "goal | worker CPU µs/msg | ceiling CPU µs/task | burst ceiling tasks/s (ratio) | "
        "rounds (worker / steady / burst) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in results:
        each = "; ".join(f"{w:,.0f} / {c:,.0f} / {b:,.0f}" for w, c, b in r.rounds)
        burst = (
            f"{r.messages / r.burst.wall_s:,.0f} ({r.burst_ratio:.3f})"
            if r.burst is not None and r.burst_ratio is not None
            else "—"
        )
        lines.append(
            f"| {r.loop} | {r.worker_rate:,.0f} | {r.ceiling_rate:,.0f} | **{r.ratio:.3f}** "
            f"({r.median_ratio:.3f}) | ≥ {GOAL} | {1e6 * r.worker.cpu_s / r.messages:.1f} | "
            f"{1e6 * r.ceiling.cpu_s / r.messages:.1f} | {burst} | {each} |"
        )
    return lines


def chart(results: list[Result], path: Path) -> None:
    def draw(axes: Any) -> None:
        names = [r.loop for r in results]
        bars = axes.bar(names, [r.ratio for r in results], width=0.5, color="tab:orange")
        axes.bar_label(bars, [f"{r.ratio:.2f}" for r in results], padding=3)
        goal_line(axes, GOAL, f"goal ≥ {GOAL}")
        axes.set_ylim(0, max([GOAL, *(r.ratio for r in results)]) * 1.3)
        axes.set_ylabel("lease-worker ÷ steady ceiling (msgs/s)")
        axes.set_title(f"Engine: {results[0].messages:,} messages, no-op handler", fontsize=10)
        axes.legend(loc="upper left")

    plot(path, draw, size=(5.6, 3.4))


def main() -> None:
    configure_logging(level="warning")
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--loop", choices=LOOPS, default=None, help="default: every one here")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--worker-only", action="store_true", help="just the worker's drain (for a profiler)"
    )
    args = parser.parse_args()
    loops = [args.loop] if args.loop else available_loops()
    if args.worker_only:
        for loop in loops:
            run_async(drain, args.messages, loop=loop)
        return
    print("\n".join(table([run(args.messages, loop, args.rounds) for loop in loops])))


if __name__ == "__main__":
    main()
