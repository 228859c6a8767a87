"""Issue 20's goals beside this run's figures: the table at the top of docs/benchmarks.md."""

from __future__ import annotations

from bench import engine_throughput, lease_scale, side_by_side
from bench.side_by_side import Row


def _met(ok: bool) -> str:
    return "yes" if ok else "**no**"


def _engine(results: list[engine_throughput.Result]) -> list[str]:
    goal = engine_throughput.GOAL
    return [
        f"| Engine: runtime ÷ bare tasks, on {r.loop} | {r.ratio:.3f} | ≥ {goal} | "
        f"{_met(r.ratio >= goal)} |"
        for r in results
    ]


def _scale(result: lease_scale.Result) -> list[str]:
    kib = result.traced_bytes_per_message / 1024
    goal_kib = lease_scale.GOAL_BYTES / 1024
    small = result.traced_bytes_per_message <= lease_scale.GOAL_BYTES
    return [
        f"| Bytes per in-flight message at {result.messages:,} (tracemalloc) | {kib:.2f} KiB | "
        f"≤ {goal_kib:.0f} KiB | {_met(small)} |",
        f"| CPU per renewal round at {result.messages:,} leases, CPython's collector | "
        f"{result.cpu_s_per_round:.3f} s | < {lease_scale.GOAL_CPU_S:.0f} s | "
        f"{_met(result.cpu_s_per_round < lease_scale.GOAL_CPU_S)} |",
        f"| CPU per renewal round at {result.messages:,} leases, `lease-worker run`'s "
        f"collector | {result.cli_cpu_s_per_round:.3f} s | < {lease_scale.GOAL_CPU_S:.0f} s | "
        f"{_met(result.cli_cpu_s_per_round < lease_scale.GOAL_CPU_S)} |",
    ]


def _one_process(rows: list[Row]) -> list[str]:
    ours = [
        r
        for r in rows
        if r.contender.name.startswith("lease-worker")
        and r.contender.processes == 1
        and r.failure is None
        and r.rate > 0
    ]
    refs = side_by_side.references(rows)
    if not ours or not refs:
        return ["| One process over SQS | not measured | | |"]
    shown = {ours[0].contender.name: ours[0]}
    best = max(ours, key=lambda r: r.rate)
    shown.setdefault(best.contender.name, best)
    lines = []
    goal = side_by_side.GOAL
    for row in shown.values():
        for ref in refs:
            floor = ref.contender.name.startswith("floor")
            target = 1.0 if floor else goal
            rate = row.rate / ref.rate
            cpu = (ref.worker_cpu_s / ref.messages) / (row.worker_cpu_s / row.messages)
            for figure, value in (
                (f"msgs/s ÷ {ref.contender.name}", rate),
                (f"{ref.contender.name}'s CPU/msg ÷ ours", cpu),
            ):
                # The goal is one process's, in its fastest configuration; the default's
                # figures are there to compare with.
                judged = (
                    f"≥ {target} | {_met(value >= target)}"
                    if row is best
                    else ("(the default, for reference) | —")
                )
                lines.append(f"| {row.contender.name}: {figure} | {value:.2f} | {judged} |")
    return lines


def goals_table(
    engine: list[engine_throughput.Result], scale: lease_scale.Result, rows: list[Row]
) -> list[str]:
    return [
        "| figure | this run | goal | met |",
        "| --- | ---: | ---: | --- |",
        *_engine(engine),
        *_scale(scale),
        *_one_process(rows),
    ]
