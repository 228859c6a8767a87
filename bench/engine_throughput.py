"""Table 1: the runtime on the in-memory engine against the bare asyncio ceiling.

The worker drains N messages from the in-memory engine with a no-op async handler; the
ceiling spawns and finishes N no-op tasks. Both run on the same event loop, asyncio's and
then uvloop's (when installed: the [fast] extra), so each ratio compares like with like.
The clock covers the drain alone, from the worker's start to its clean shutdown: the queue
is filled before it starts, as in the side-by-side benchmark (until 2026-11-24 the fill was
timed too, about a fifth of the figure, which put the ratio lower).
Ceiling and worker take turns; at full size three times, each keeping its fastest round.
The CPU columns are the process time per message of the worker, and per task of the
ceiling (the reciprocal of each is the rate it would reach if it never waited). The
ceiling starts all N tasks at once, so its time includes the garbage collector walking a
heap of N tasks, and it moves more than the worker's with what else the machine is doing:
read the two CPU columns beside the ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
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

#: Issue 20's goal: the runtime on the memory engine at least this fraction of the ceiling.
GOAL = 0.33


@dataclass(frozen=True, slots=True)
class Result:
    loop: str
    messages: int
    worker: Timing
    ceiling: Timing
    #: msgs/s of every round, worker and ceiling (the row's figures are the fastest round's).
    rounds: tuple[tuple[float, float], ...] = ()

    @property
    def worker_rate(self) -> float:
        return self.messages / self.worker.wall_s

    @property
    def ceiling_rate(self) -> float:
        return self.messages / self.ceiling.wall_s

    @property
    def ratio(self) -> float:
        return self.worker_rate / self.ceiling_rate


async def _noop_task() -> None:
    return None


def _clock() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def _since(start: tuple[float, float]) -> Timing:
    wall, cpu = _clock()
    return Timing(wall - start[0], cpu - start[1])


async def bare_ceiling(count: int) -> Timing:
    start = _clock()
    async with asyncio.TaskGroup() as tasks:
        for _ in range(count):
            tasks.create_task(_noop_task())
    return _since(start)


async def drain(count: int, *, max_in_flight: int = 1000) -> Timing:
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
    """Ceiling and worker in turn, `rounds` times; each side's fastest round is kept."""
    ceilings, workers = [], []
    for _ in range(rounds):
        ceilings.append(run_async(bare_ceiling, count, loop=loop))
        workers.append(run_async(drain, count, loop=loop))
    best = Result(
        loop,
        count,
        min(workers, key=lambda t: t.wall_s),
        min(ceilings, key=lambda t: t.wall_s),
    )
    each = tuple(
        (count / w.wall_s, count / c.wall_s) for w, c in zip(workers, ceilings, strict=True)
    )
    return Result(best.loop, count, best.worker, best.ceiling, each)


def table(results: list[Result]) -> list[str]:
    lines = [
        "| event loop | lease-worker msgs/s | bare tasks/s | **ratio** | goal | "
        "worker CPU µs/msg | bare tasks CPU µs/task | rounds (worker / ceiling) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in results:
        each = "; ".join(f"{w:,.0f} / {c:,.0f}" for w, c in r.rounds)
        lines.append(
            f"| {r.loop} | {r.worker_rate:,.0f} | {r.ceiling_rate:,.0f} | **{r.ratio:.3f}** | "
            f"≥ {GOAL} | {1e6 * r.worker.cpu_s / r.messages:.1f} | "
            f"{1e6 * r.ceiling.cpu_s / r.messages:.1f} | {each} |"
        )
    return lines


def chart(results: list[Result], path: Path) -> None:
    def draw(axes: Any) -> None:
        names = [r.loop for r in results]
        bars = axes.bar(names, [r.ratio for r in results], width=0.5, color="tab:orange")
        axes.bar_label(bars, [f"{r.ratio:.2f}" for r in results], padding=3)
        goal_line(axes, GOAL, f"goal ≥ {GOAL}")
        axes.set_ylim(0, max([GOAL, *(r.ratio for r in results)]) * 1.3)
        axes.set_ylabel("lease-worker ÷ bare tasks (msgs/s)")
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
