"""Seeds of the deterministic simulation (`worker.testing.simulation`), as many as you like.

    python -m bench.simulate --seeds 100000            # seeds 0..99,999 on every core
    python -m bench.simulate --seeds 500 --start 7000  # seeds 7,000..7,499
    python -m bench.simulate --replay 31               # one seed's history and verdict
    python -m bench.simulate --replay 31 --logs        # ... with every process's log lines
    python -m bench.simulate --schedule '{"seed":31,...}'  # a shrunk schedule, exactly
    python -m bench.simulate --seeds 1000 --flows tenants  # only per-tenant caps

Each seed draws a schedule (a fleet of 2-3 workers on one virtual clock against the
in-memory engine, every call's fate, stalls, SIGTERMs, SIGKILLs, handler durations and
failures) and runs the real runtime through it; the history's checks decide. The report
gives the seeds run, the seeds per second of this machine (wall clock, all cores), and for
every failing seed its violations, the one-line command that replays it, and (`--shrink`,
on by default for the first 5) the smallest schedule found that still fails the same way,
as a `--schedule` command. Exit status 1 when any seed failed.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
from collections import Counter
from collections.abc import Iterable, Sequence

from worker.testing.simulation import Result, Schedule, draw, shrink, simulate
from worker.testing.simulation.schedule import FLOWS

__all__ = ["main", "run_seeds"]

#: Seeds a worker process runs between two reports to the parent.
_CHUNK = 50


def _verdicts(job: tuple[range, tuple[str, ...]]) -> list[tuple[int, list[str]]]:
    """Run a chunk of seeds; return the failing ones with their violations (in a worker
    process)."""
    seeds, flows = job
    failed = []
    for seed in seeds:
        result = simulate(draw(seed, flows=flows))
        if result.failed:
            failed.append((seed, [str(v) for v in result.violations]))
    return failed


def run_seeds(
    start: int, count: int, jobs: int, *, flows: tuple[str, ...] = FLOWS, progress: bool = False
) -> tuple[list[tuple[int, list[str]]], float]:
    """Run seeds `start`.. `start + count - 1` on `jobs` processes; returns the failures and
    the wall time it took."""
    chunks = [
        range(first, min(first + _CHUNK, start + count))
        for first in range(start, start + count, _CHUNK)
    ]
    began = time.perf_counter()
    if jobs <= 1:
        results: Iterable[list[tuple[int, list[str]]]] = map(
            _verdicts, [(chunk, flows) for chunk in chunks]
        )
        failures = _gather(results, chunks, count, began, progress)
    else:
        context = multiprocessing.get_context("fork" if sys.platform == "linux" else "spawn")
        with context.Pool(jobs) as pool:
            results = pool.imap(_verdicts, [(chunk, flows) for chunk in chunks])
            failures = _gather(results, chunks, count, began, progress)
    return sorted(failures), time.perf_counter() - began


def _gather(
    results: Iterable[list[tuple[int, list[str]]]],
    chunks: Sequence[range],
    count: int,
    began: float,
    progress: bool,
) -> list[tuple[int, list[str]]]:
    failures: list[tuple[int, list[str]]] = []
    done = 0
    for chunk, found in zip(chunks, results, strict=False):
        failures.extend(found)
        if progress:
            for seed, violations in found:  # as they come: a long run tells at once
                print(f"\rseed {seed}: {violations[0]}", file=sys.stderr, flush=True)
        done += len(chunk)
        if progress:
            rate = done / (time.perf_counter() - began)
            print(
                f"\r{done:,}/{count:,} seeds, {rate:,.0f}/s, {len(failures)} failing",
                end="",
                file=sys.stderr,
                flush=True,
            )
    if progress:
        print(file=sys.stderr)
    return failures


def replay_command(seed: int, flows: tuple[str, ...] = FLOWS) -> str:
    chosen = "" if flows == FLOWS else f" --flows {','.join(flows)}"
    return f"python -m bench.simulate --replay {seed}{chosen}"


def shrunk(seed: int, flows: tuple[str, ...] = FLOWS) -> Schedule:
    """The smallest schedule found from `seed`'s that fails with its first violation's kind."""
    schedule = draw(seed, flows=flows)
    kind = simulate(schedule).violations[0].kind

    def fails(candidate: Schedule) -> bool:
        return any(v.kind == kind for v in simulate(candidate).violations)

    return shrink(schedule, fails)


def show(result: Result, *, logs: bool) -> None:
    schedule = result.schedule
    print(f"schedule: {schedule.to_json()}")
    for event in result.events:
        print(event)
    if logs:
        for line in result.logs:
            print(json.dumps(line, default=str, sort_keys=True))
    print(f"runs: {result.runs}, history digest: {result.digest}")
    if result.failed:
        for violation in result.violations:
            print(f"VIOLATION {violation}")
    else:
        print("no violation")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.simulate", description=__doc__)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--seeds", type=int, default=1000, help="how many seeds (default 1000)")
    parser.add_argument("--start", type=int, default=0, help="the first seed (default 0)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes")
    parser.add_argument("--replay", type=int, help="run one seed and print its history")
    parser.add_argument("--schedule", help="run this schedule (JSON, or @file) exactly")
    parser.add_argument("--logs", action="store_true", help="with --replay: every log line")
    parser.add_argument(
        "--flows",
        help="flow controls to draw from, comma-separated: none, rate, bytes, adaptive, "
        "tenants (default: the first four, none most often)",
    )
    parser.add_argument(
        "--shrink", type=int, default=5, help="shrink the first N failing seeds (default 5)"
    )
    options = parser.parse_args(argv)
    flows = FLOWS if options.flows is None else tuple(options.flows.split(","))
    if options.replay is not None or options.schedule is not None:
        if options.schedule is not None:
            text = options.schedule
            if text.startswith("@"):
                with open(text[1:], encoding="utf-8") as file:
                    text = file.read()
            schedule = Schedule.from_json(text)
        else:
            schedule = draw(options.replay, flows=flows)
        result = simulate(schedule)
        show(result, logs=options.logs)
        return 1 if result.failed else 0
    failures, took = run_seeds(
        options.start, options.seeds, options.jobs, flows=flows, progress=True
    )
    report(options.start, options.seeds, options.jobs, failures, took, options.shrink, flows)
    return 1 if failures else 0


def report(
    start: int,
    count: int,
    jobs: int,
    failures: list[tuple[int, list[str]]],
    took: float,
    shrink_first: int,
    flows: tuple[str, ...] = FLOWS,
) -> None:
    print(
        f"{count:,} seeds ({start:,}..{start + count - 1:,}) in {took:.1f} s on {jobs} "
        f"processes: {count / took:,.1f} seeds/s; {len(failures)} failing"
    )
    kinds = Counter(v.split(" ", 1)[0] for _, found in failures for v in found)
    for kind, times in kinds.most_common():
        print(f"  {kind}: {times} violations")
    for n, (seed, found) in enumerate(failures):
        print(f"seed {seed}: {found[0]}" + (f" (+{len(found) - 1} more)" if len(found) > 1 else ""))
        print(f"  replay: {replay_command(seed, flows)}")
        if n < shrink_first:
            small = shrunk(seed, flows)
            print(f"  shrunk to {small.size()} parts (from {draw(seed, flows=flows).size()}):")
            print(f"  python -m bench.simulate --schedule '{small.to_json()}'")


if __name__ == "__main__":
    sys.exit(main())
