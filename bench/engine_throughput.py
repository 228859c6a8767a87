"""Table 1: the worker draining N messages from the in-memory engine with a no-op async
handler, against the bare asyncio ceiling (spawning and finishing N no-op tasks)."""

from __future__ import annotations

import argparse
import asyncio
from dataclasses import dataclass

from backends.memory import MemoryBackend
from bench._common import Timing, fill, measure, run_async, run_until_handled
from worker import Message, Worker, WorkerConfig
from worker.cli.logging import configure_logging
from worker.types import QueueSpec


@dataclass(frozen=True, slots=True)
class Result:
    messages: int
    worker: Timing
    ceiling: Timing

    @property
    def worker_rate(self) -> float:
        return self.messages / self.worker.wall_s

    @property
    def ceiling_rate(self) -> float:
        return self.messages / self.ceiling.wall_s


async def _noop_task() -> None:
    return None


async def bare_ceiling(count: int) -> None:
    async with asyncio.TaskGroup() as tasks:
        for _ in range(count):
            tasks.create_task(_noop_task())


async def drain(count: int, *, max_in_flight: int = 1000) -> None:
    app = Worker(WorkerConfig(max_in_flight=max_in_flight, wait_s=1))

    @app.handler("bench")
    async def noop(message: Message) -> None:
        return None

    backend = MemoryBackend()
    await backend.create_queue(QueueSpec("bench"))
    await fill(backend, "bench", count)
    await run_until_handled(app, backend, count)
    assert backend.engine.counts("bench").visible == 0


def run(count: int) -> Result:
    _, ceiling = measure(lambda: run_async(bare_ceiling, count))
    _, worker = measure(lambda: run_async(drain, count))
    return Result(count, worker, ceiling)


def main() -> None:
    configure_logging(level="warning")
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=100_000)
    args = parser.parse_args()
    result = run(args.messages)
    print(f"messages            {result.messages}")
    print(f"worker              {result.worker_rate:,.0f} msgs/s ({result.worker.cpu_s:.2f} s CPU)")
    print(f"bare asyncio tasks  {result.ceiling_rate:,.0f} tasks/s")
    print(f"ratio               {result.worker_rate / result.ceiling_rate:.3f}")


if __name__ == "__main__":
    main()
