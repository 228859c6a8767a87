"""Table 2: N messages in flight at once, handlers longer than the visibility timeout.

Virtual time (looptime): the handlers sleep 75 s against a 30 s visibility timeout and a
10 s margin, so every lease is renewed at 20, 40 and 60 s. Reported: calls per renewal
round against the floor ceil(N/10), leases lapsed (must be 0), CPU seconds per round, and
the worker's memory per in-flight message, two ways: the resident set's growth while all N
are held (this run), and tracemalloc's count of bytes Python allocated for them (a second
run, `bench.footprint.bytes_per_lease`: tracing slows allocation, so it is kept out of the
CPU figure). The CPU per round is measured twice: as a program that leaves CPython's
collector as it is (a library embedding the runtime), and as `lease-worker run` runs by
default (`--gc-threshold 50,000`: start-up's objects frozen, young collections less often;
`worker.runtime.garbage.collect_less`). With 100,000 leases held, full collections of
millions of live objects land inside the rounds; how many do varies from run to run.
"""

from __future__ import annotations

import argparse
import gc
import math
from dataclasses import dataclass, replace

import anyio

from bench._common import fill, run_async, run_until_handled
from bench._counting import CountingBackend
from worker import LeaseConfig, Message, Worker, WorkerConfig
from worker.cli.logging import configure_logging
from worker.runtime.garbage import collect_less
from worker.types import QueueSpec


@dataclass(frozen=True, slots=True)
class Result:
    messages: int
    rounds: int
    calls_per_round: list[int]
    floor: int
    lapsed: int
    cpu_s_per_round: float
    bytes_per_message: float
    handled: int
    #: tracemalloc's bytes per in-flight message (0.0 when not measured).
    traced_bytes_per_message: float = 0.0
    #: CPU per round with `lease-worker run`'s collector setting (nan when not measured).
    cli_cpu_s_per_round: float = math.nan


def _rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096


async def _scale(count: int) -> Result:
    lease = LeaseConfig(visibility_s=30, extension_s=30, renew_margin_s=10, coalesce_window_s=5)
    app = Worker(WorkerConfig(lease=lease, max_in_flight=count, wait_s=1))
    all_held = anyio.Event()
    started = 0
    memory: list[int] = []

    @app.handler("scale")
    async def slow(message: Message) -> None:
        nonlocal started
        started += 1
        if started == count:
            memory.append(_rss_bytes())
            all_held.set()
        await anyio.sleep(75)

    backend = CountingBackend()
    await backend.create_queue(QueueSpec("scale"))
    await fill(backend, "scale", count)
    before = _rss_bytes()
    supervisor = await run_until_handled(app, backend, count)
    rounds = backend.rounds()
    lapsed = int(
        sum(
            supervisor.metrics.value("lease_worker_leases_lost_total", queue="scale", reason=reason)
            for reason in ("lapsed", "ReceiptHandleIsInvalid", "MessageNotInflight")
        )
    )
    cpu = [r[-1][1] - r[0][1] for r in rounds]
    return Result(
        messages=count,
        rounds=len(rounds),
        calls_per_round=[len(r) for r in rounds],
        floor=math.ceil(count / 10),
        lapsed=lapsed,
        cpu_s_per_round=sum(cpu) / max(1, len(cpu)),
        bytes_per_message=(memory[0] - before) / count if memory else float("nan"),
        handled=int(
            supervisor.metrics.value(
                "lease_worker_messages_handled_total", queue="scale", outcome="succeeded"
            )
        ),
    )


#: Issue 20's goals at 100,000 in flight.
GOAL_BYTES = 3 * 1024
GOAL_CPU_S = 1.0


def _with_cli_collector(count: int) -> float:
    """CPU per round with the collector set as `lease-worker run` sets it by default."""
    previous = collect_less()
    try:
        return run_async(_scale, count, virtual_time=True).cpu_s_per_round
    finally:
        gc.unfreeze()
        gc.set_threshold(*previous)


def run(count: int, *, traced: bool = False) -> Result:
    """The renewal run; with `traced`, also the run with the CLI's collector setting and
    tracemalloc's bytes per lease (two more runs)."""
    result = run_async(_scale, count, virtual_time=True)
    if not traced:
        return result
    from bench.footprint import bytes_per_lease

    return replace(
        result,
        cli_cpu_s_per_round=_with_cli_collector(count),
        traced_bytes_per_message=bytes_per_lease(count),
    )


def table(result: Result) -> list[str]:
    goal_kib = GOAL_BYTES / 1024
    return [
        "| in flight | renewal rounds | calls per round | floor ceil(N/10) | lapsed | "
        "**CPU s per round** (goal < 1 s) | CPU s per round, `lease-worker run`'s collector | "
        "**bytes per message, tracemalloc** "
        f"(goal ≤ {goal_kib:.0f} KiB) | resident set per message |",
        "| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
        f"| {result.messages:,} | {result.rounds} | "
        f"{', '.join(f'{c:,}' for c in result.calls_per_round)} | {result.floor:,} | "
        f"{result.lapsed} | **{result.cpu_s_per_round:.3f}** | {result.cli_cpu_s_per_round:.3f} | "
        f"**{result.traced_bytes_per_message / 1024:.2f} KiB** | "
        f"{result.bytes_per_message / 1024:.2f} KiB |",
    ]


def main() -> None:
    configure_logging(level="warning")
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=100_000)
    result = run(parser.parse_args().messages, traced=True)
    print(f"in flight           {result.messages}")
    print(f"renewal rounds      {result.rounds}")
    print(f"calls per round     {result.calls_per_round} (floor {result.floor})")
    print(f"leases lapsed       {result.lapsed}")
    print(f"CPU per round       {result.cpu_s_per_round:.3f} s")
    print(f"                    {result.cli_cpu_s_per_round:.3f} s, lease-worker run's collector")
    print(f"memory per message  {result.bytes_per_message:,.0f} B resident set")
    print(f"                    {result.traced_bytes_per_message:,.0f} B tracemalloc")


if __name__ == "__main__":
    main()
