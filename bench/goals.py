"""Issue 33's goals beside this run's figures: the table at the top of docs/benchmarks.md.

Every side-by-side figure is a ratio of two rows measured in the same run, shown for each
side's fastest round with the ratio of their medians over rounds in brackets; a goal is
judged on the fastest rounds (the least disturbed by anything else on the machine).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from bench import engine_throughput, lease_scale, long_handlers, side_by_side
from bench.peers.contenders import defaults, is_default
from bench.side_by_side import Row

#: Issue 33's goal for the Spark source, end to end into a parquet sink on 2 cores.
SPARK_GOAL = 5_000.0
#: Where bench/spark_source.py's best figure is read from, if it was measured.
SPARK_FIGURES = Path("docs/bench/spark_source.json")


def _met(ok: bool) -> str:
    return "yes" if ok else "**no**"


def _row(figure: str, value: str, goal: str, ok: bool | None) -> str:
    return f"| {figure} | {value} | {goal} | {'—' if ok is None else _met(ok)} |"


def _default_rows(rows: list[Row]) -> list[str]:
    """The default configuration against the fastest peer and the floor."""
    said = defaults().says()
    ours = next((r for r in rows if is_default(r.contender)), None)
    refs = side_by_side.references(rows)
    peer = next((r for r in refs if not r.contender.is_floor), None)
    floor = next((r for r in refs if r.contender.is_floor), None)
    if ours is None or ours.failure is not None or ours.rate <= 0:
        return [_row(f"The default ({said}) over SQS", "not measured", "", None)]
    lines = []
    if peer is None:
        lines.append(_row("The default against the fastest peer", "no peer measured", "", None))
    else:
        name = peer.contender.name
        rate = side_by_side.ratio(ours.rate, peer.rate)
        rate_median = side_by_side.ratio(ours.median_rate, peer.median_rate)
        cpu = side_by_side.ratio(peer.cpu_per_message, ours.cpu_per_message)
        cpu_median = side_by_side.ratio(peer.median_cpu_per_message, ours.median_cpu_per_message)
        lines += [
            _row(
                f"The default ({said}): msgs/s ÷ the fastest peer's ({name})",
                f"{rate:.2f} ({rate_median:.2f})",
                f"≥ {side_by_side.GOAL}",
                rate >= side_by_side.GOAL,
            ),
            _row(
                f"The default: {name}'s CPU per message ÷ the default's",
                f"{cpu:.2f} ({cpu_median:.2f})",
                f"≥ {side_by_side.CPU_GOAL}",
                cpu >= side_by_side.CPU_GOAL,
            ),
        ]
    if floor is None:
        lines.append(
            _row("The default's client CPU per message ÷ the floor's", "no floor", "", None)
        )
    else:
        over = side_by_side.ratio(ours.cpu_per_message, floor.cpu_per_message)
        over_median = side_by_side.ratio(ours.median_cpu_per_message, floor.median_cpu_per_message)
        lines.append(
            _row(
                f"The default's client CPU per message ÷ the floor's ({floor.contender.name}: "
                f"{1e3 * floor.cpu_per_message:.3f} ms)",
                f"{over:.2f} ({over_median:.2f})",
                f"≤ {side_by_side.FLOOR_GOAL}",
                over <= side_by_side.FLOOR_GOAL,
            )
        )
    return lines


def _engine(results: list[engine_throughput.Result]) -> list[str]:
    goal = engine_throughput.GOAL
    lines = []
    for r in results:
        burst = f"; burst ceiling, a note: {r.burst_ratio:.3f}" if r.burst_ratio else ""
        lines.append(
            _row(
                f"Engine: runtime ÷ steady-state ceiling ({engine_throughput.OUTSTANDING:,} "
                f"no-op tasks outstanding), on {r.loop}{burst}",
                f"{r.ratio:.3f} ({r.median_ratio:.3f})",
                f"≥ {goal}",
                r.ratio >= goal,
            )
        )
    return lines


@dataclass(frozen=True, slots=True)
class Spark:
    """bench/spark_source.py's best setting, as it wrote it to SPARK_FIGURES."""

    rate: float
    setting: str


def read_spark(path: Path = SPARK_FIGURES) -> Spark | None:
    """The Spark source's figure if bench/spark_source.py left one ({"rate": msgs/s,
    "setting": "..."}), else None."""
    try:
        data = json.loads(path.read_text())
        return Spark(float(data["rate"]), str(data.get("setting", "")))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _spark(spark: Spark | None) -> list[str]:
    figure = "Spark: the leased streaming source into parquet, end to end, 2 cores"
    if spark is None:
        return [_row(figure, "not measured", f"≥ {SPARK_GOAL:,.0f} msgs/s", None)]
    at = f" ({spark.setting})" if spark.setting else ""
    return [
        _row(
            f"{figure}{at}",
            f"{spark.rate:,.0f} msgs/s",
            f"≥ {SPARK_GOAL:,.0f} msgs/s",
            spark.rate >= SPARK_GOAL,
        )
    ]


def _kept(result: lease_scale.Result, long_rows: list[long_handlers.Row]) -> list[str]:
    kib = result.traced_bytes_per_message / 1024
    goal_kib = lease_scale.GOAL_BYTES / 1024
    goal_s = lease_scale.GOAL_CPU_S
    calls = max(result.calls_per_round, default=0)
    lines = [
        _row(
            f"Kept: bytes per lease at {result.messages:,} (tracemalloc)",
            f"{kib:.2f} KiB",
            f"≤ {goal_kib:.0f} KiB",
            result.traced_bytes_per_message <= lease_scale.GOAL_BYTES,
        ),
        _row(
            f"Kept: renewal round at {result.messages:,} leases: calls (floor ceil(N/10))",
            f"{calls:,} ({result.floor:,})",
            "= the floor",
            calls == result.floor and result.lapsed == 0,
        ),
        _row(
            f"Kept: CPU per renewal round at {result.messages:,}, `lease-worker run`'s collector",
            f"{result.cli_cpu_s_per_round:.3f} s",
            f"< {goal_s:.0f} s",
            result.cli_cpu_s_per_round < goal_s,
        ),
        _row(
            f"Kept: CPU per renewal round at {result.messages:,}, CPython's collector",
            f"{result.cpu_s_per_round:.3f} s",
            f"< {goal_s:.0f} s",
            result.cpu_s_per_round < goal_s,
        ),
    ]
    if long_rows:
        longest = max(long_rows, key=lambda r: r.handler_min)
        lines.append(
            _row(
                f"Kept: long-handler economy, requests per message at {longest.handler_min} min "
                "(fixed lease ÷ per-message heartbeat)",
                f"{longest.fixed:.2f} ÷ {longest.heartbeat:.2f}",
                "< 1",
                longest.fixed < longest.heartbeat,
            )
        )
    return lines


def goals_table(
    engine: list[engine_throughput.Result],
    scale: lease_scale.Result,
    rows: list[Row],
    long_rows: list[long_handlers.Row] | None = None,
    spark: Spark | None = None,
) -> list[str]:
    return [
        "Each side-by-side figure: the fastest rounds' ratio, the medians' ratio in brackets.",
        "",
        "| goal | this run | target | met |",
        "| --- | ---: | ---: | --- |",
        *_default_rows(rows),
        *_engine(engine),
        *_spark(spark),
        *_kept(scale, long_rows or []),
    ]
