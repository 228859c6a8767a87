"""A noisy tenant beside nine quiet ones, with and without a per-tenant cap (issue 31, Must
show 2).

    python -m bench.flow_tenants [--per-quiet 20 --noisy-times 10 --cap 2 --work-s 0.2]

Each run: a fresh `lease-worker serve-sqs`, one worker process (`lease-worker run
bench.apps.flow_app:app`, `--max-in-flight` 10, handlers of `--work-s`), started first;
then the noisy tenant's messages (`--noisy-times` x `--per-quiet`) are sent, then the 9
quiet tenants' (`--per-quiet` each, in turn), all at once. Measured: the quiet tenants' median and
p90 time-to-handle (handled minus sent, wall clock), and its ratio to the run without the
noisy tenant. The run ends once every quiet message is handled. Rows:
- quiet alone (the baseline), capped;
- noisy, capped by a key read from the body (no MessageGroupId: not a fair queue): the cap
  alone; and the same with no cap;
- noisy, capped by MessageGroupId (`--tenant-cap`; serve-sqs then runs it as a fair
  queue); and the fair queue with no cap.
Goal: the capped runs' quiet median within 2x of the baseline's. Exits 1 when missed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass

from bench import _flow, _harness

QUEUE = "flow-tenants"


@dataclass(frozen=True, slots=True)
class Run:
    name: str
    noisy: bool
    cap: str  # "body", "group" or ""
    group_ids: bool


RUNS = (
    Run("quiet alone, cap by body key", noisy=False, cap="body", group_ids=False),
    Run("noisy, cap by body key", noisy=True, cap="body", group_ids=False),
    Run("noisy, no cap", noisy=True, cap="", group_ids=False),
    Run("noisy, cap by MessageGroupId (fair queue)", noisy=True, cap="group", group_ids=True),
    Run("noisy, no cap (fair queue)", noisy=True, cap="", group_ids=True),
)


def one(run: Run, args: argparse.Namespace) -> tuple[list[float], int]:
    """Time-to-handle of each quiet message, and how many noisy ones were handled."""
    # The quiet tenants' messages come in turn (as many tenants sending over time do).
    quiet = [f"quiet-{t}" for _ in range(args.per_quiet) for t in range(9)]
    noisy = ["noisy"] * (args.per_quiet * args.noisy_times) if run.noisy else []
    options = ["--max-in-flight", "10"]
    env = {"FLOW_WORK_S": str(args.work_s)}
    if run.cap == "group":
        options += ["--tenant-cap", str(args.cap)]
    elif run.cap == "body":
        env["FLOW_TENANT_CAP"] = str(args.cap)
    with _harness.server() as server:
        url = _flow.create_queue(server, QUEUE)
        with _flow.workers(server, QUEUE, 1, options, env) as outs:
            _flow.send_tenants(server, url, noisy, run.group_ids)
            _flow.send_tenants(server, url, quiet, run.group_ids)
            deadline = time.monotonic() + 120
            while True:
                rows = _flow.read_handled(outs)
                done = [row for row in rows if row.ok and row.tenant.startswith("quiet")]
                if len(done) >= len(quiet) or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
    return [row.at - row.sent for row in done], sum(row.tenant == "noisy" for row in rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.flow_tenants", description=__doc__)
    parser.add_argument("--per-quiet", type=int, default=20)
    parser.add_argument("--noisy-times", type=int, default=10)
    parser.add_argument("--cap", type=int, default=2)
    parser.add_argument("--work-s", type=float, default=0.2)
    args = parser.parse_args(argv)
    results = [(run, *one(run, args)) for run in RUNS]
    base = statistics.median(results[0][1])
    print(
        f"9 quiet tenants x {args.per_quiet}, a noisy one x {args.per_quiet * args.noisy_times}"
        f" sent first; handlers of {args.work_s:g} s, max_in_flight 10, cap {args.cap}\n"
    )
    print(
        "| run | quiet handled | quiet median s | quiet p90 s | median / alone "
        + "| noisy handled meanwhile |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    ok = True
    for run, times, noisy in results:
        median = statistics.median(times)
        p90 = statistics.quantiles(times, n=10)[-1]
        ratio = median / base
        if run.cap and run.noisy and ratio > 2:
            ok = False
        print(f"| {run.name} | {len(times)} | {median:.2f} | {p90:.2f} | {ratio:.2f} | {noisy} |")
    print(f"\ngoal (capped runs within 2x of quiet alone) {'met' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
