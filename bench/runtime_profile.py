"""The runtime's cost per message on the memory engine: CPU time, instructions, and where.

    python -m bench.runtime_profile cpu [--messages N] [--rounds R] [--loop asyncio|uvloop]
    python -m bench.runtime_profile instructions [--messages N]
    python -m bench.runtime_profile cprofile [--messages N] [--top 40]

`cpu` drains N messages (no-op handler, `max_in_flight` 1,000, as `bench.engine_throughput`)
and, in turn with it, runs the steady-state ceiling (N no-op tasks, at most 1,000 at once);
it prints each side's process time per message (the fastest round: the machine is shared)
and their ratio, the figure issue 33's engine goal is about.

`instructions` counts what a message costs in CPU instructions, which a loaded machine does
not disturb: valgrind's callgrind runs the drain twice, with N and 2N messages, and the
difference divided by N is the cost of a message, start-up and shutdown cancelled out (and
the queue's filling, counted alone the same way, taken off). The steady ceiling is
measured the same way, beside it.

`cprofile` prints the drain's top functions by own time (cProfile slows Python code more
than C code: read it for where, not for how much).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from backends.memory import MemoryBackend
from bench import engine_throughput
from bench._common import fill, run_async, run_until_handled
from worker import Message, Worker, WorkerConfig
from worker.cli.logging import configure_logging
from worker.types import QueueSpec

_SIDES = ("worker", "ceiling")


async def _fill_only(messages: int) -> None:
    """What `engine_throughput.drain` does before its clock starts, alone: subtracted from
    the drain's instructions."""
    backend = MemoryBackend()
    await backend.create_queue(QueueSpec("bench"))
    await fill(backend, "bench", messages)


def _run(side: str, messages: int, loop: str) -> None:
    if side == "worker":
        run_async(engine_throughput.drain, messages, loop=loop)
    elif side == "fill":
        run_async(_fill_only, messages, loop=loop)
    else:
        run_async(engine_throughput.steady_ceiling, messages, loop=loop)


def _cpu(side: str, messages: int, loop: str) -> float:
    """Process time per message; the drain's own clock leaves the queue's filling out."""
    if side == "worker":
        return run_async(engine_throughput.drain, messages, loop=loop).cpu_s / messages
    start = time.process_time()
    _run(side, messages, loop)
    return (time.process_time() - start) / messages


def cpu(messages: int, rounds: int, loop: str) -> None:
    best = {side: float("inf") for side in _SIDES}
    for _ in range(rounds):
        for side in _SIDES:
            best[side] = min(best[side], _cpu(side, messages, loop))
    worker, ceiling = best["worker"], best["ceiling"]
    print(f"loop {loop}, {messages:,} messages, best of {rounds} rounds (process time)")
    print(f"  worker   {worker * 1e6:7.2f} µs/message")
    print(f"  ceiling  {ceiling * 1e6:7.2f} µs/task")
    print(f"  ratio    {ceiling / worker:7.3f}  (ceiling ÷ worker CPU)")


def _instructions(side: str, messages: int, loop: str) -> int:
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "callgrind.out"
        command = [
            *("valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"),
            *(sys.executable, "-m", "bench.runtime_profile", "run", side),
            *("--messages", str(messages), "--loop", loop),
        ]
        # The same string hashes in every run: dict and set layouts, and their costs, too.
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        subprocess.run(command, check=True, capture_output=True, env=env)
        match = re.search(r"^summary:\s+(\d+)", out.read_text(), re.MULTILINE)
        assert match, "no summary line in callgrind's output"
        return int(match.group(1))


def instructions(messages: int, loop: str, sides: tuple[str, ...] = (*_SIDES, "fill")) -> None:
    per: dict[str, float] = {}
    for side in sides:
        small = _instructions(side, messages, loop)
        large = _instructions(side, 2 * messages, loop)
        per[side] = (large - small) / messages
    print(f"loop {loop}: instructions per message ({messages:,} vs {2 * messages:,} messages)")
    for side, count in per.items():
        print(
            f"  {side:<8} {count:10,.0f}"
            + ("  (the queue's filling included)" * (side == "worker"))
        )
    if "worker" in per and "fill" in per:
        drain = per["worker"] - per["fill"]  # the queue is filled before the drain's clock
        print(f"  drain    {drain:10,.0f}  (worker less fill)")
        if "ceiling" in per:
            print(f"  ratio    {per['ceiling'] / drain:10.3f}  (ceiling ÷ drain)")


async def _profiled_drain(messages: int, profiler: cProfile.Profile) -> None:
    """`engine_throughput.drain`, with `profiler` on for the drain alone."""
    app = Worker(WorkerConfig(max_in_flight=engine_throughput.OUTSTANDING, wait_s=1))

    @app.handler("bench")
    async def noop(message: Message) -> None:
        return None

    backend = MemoryBackend()
    await backend.create_queue(QueueSpec("bench"))
    await fill(backend, "bench", messages)
    profiler.enable()
    try:
        await run_until_handled(app, backend, messages)
    finally:
        profiler.disable()


def profile(messages: int, loop: str, top: int, sort: str = "tottime") -> None:
    profiler = cProfile.Profile()
    run_async(_profiled_drain, messages, profiler, loop=loop)
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats(sort).print_stats(top)
    print(text.getvalue())


def main() -> None:
    configure_logging(level="warning")
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("mode", choices=("cpu", "instructions", "cprofile", "run"))
    parser.add_argument("side", nargs="?", choices=(*_SIDES, "fill"), default="worker")
    parser.add_argument("--messages", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--loop", choices=("asyncio", "uvloop"), default="asyncio")
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument(
        "--sides", default=None, help="instructions: which of worker,ceiling,fill (all)"
    )
    parser.add_argument("--sort", default="tottime", help="cprofile: a pstats sort key")
    args = parser.parse_args()
    if args.mode == "run":
        _run(args.side, args.messages or 10_000, args.loop)
    elif args.mode == "cpu":
        cpu(args.messages or 30_000, args.rounds, args.loop)
    elif args.mode == "instructions":
        sides = tuple(args.sides.split(",")) if args.sides else (*_SIDES, "fill")
        instructions(args.messages or 3_000, args.loop, sides)
    else:
        profile(args.messages or 30_000, args.loop, args.top, args.sort)


if __name__ == "__main__":
    main()
