"""Runs every benchmark and writes docs/benchmarks.md with tables and PNG plots, and the
profile (bench.profile) to docs/profile.md with its flame graphs.

    python -m bench.report            # full size (about 10 minutes on 2 cores), writes docs/
    python -m bench.report --smoke    # seconds; what CI runs so that nothing rots

Figures are ratios and counts measured side by side in one run on one machine; nothing here
passes or fails (the figures that do not depend on timing are guarded in
tests/bench/test_budgets.py).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from bench import (
    engine_throughput,
    lease_scale,
    long_handlers,
    network,
    profile,
    scale_out,
    side_by_side,
    smq_renewals,
)
from bench._plots import plot
from bench.goals import goals_table, read_spark
from bench.peers.contenders import defaults
from worker.cli.logging import configure_logging

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Sizes:
    throughput: int
    #: Engine throughput: rounds per loop (the fastest is kept).
    throughput_rounds: int
    scale: int
    long_handlers: int
    side_by_side: int
    #: Over a network: messages per contender at each delay, the delays, and
    #: rounds of each contender at each delay.
    network: int
    network_delays_ms: tuple[float, ...]
    network_rounds: int
    smq_leases: int
    smq_rounds: int
    #: The profile: the engine drain and the worker over SQS.
    profile: int
    profile_sqs: int
    #: False at smoke size: fewer contenders and profiles, no SMQ runtime run (seconds).
    full: bool


FULL = Sizes(
    throughput=100_000,
    throughput_rounds=3,
    scale=100_000,
    long_handlers=400,
    side_by_side=20_000,
    network=network.MESSAGES,
    network_delays_ms=network.DELAYS_MS,
    network_rounds=network.ROUNDS,
    smq_leases=1_000,
    smq_rounds=3,
    profile=100_000,
    profile_sqs=20_000,
    full=True,
)
SMOKE = Sizes(
    throughput=2_000,
    throughput_rounds=1,
    scale=500,
    long_handlers=20,
    side_by_side=200,
    network=100,
    network_delays_ms=(5.0,),
    network_rounds=1,
    smq_leases=50,
    smq_rounds=1,
    profile=1_000,
    profile_sqs=200,
    full=False,
)


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def environment(command: str) -> list[str]:
    packages = (
        *("lease-worker", "anyio", "aiobotocore", "botocore", "aiohttp", "structlog"),
        *("uvloop", "orjson"),
    )
    return [
        f"- command: `{command}`",
        f"- machine: {_cpu_model()}, {os.cpu_count()} cores; Python {platform.python_version()}",
        "- versions: " + ", ".join(f"{p} {_version(p)}" for p in packages),
    ]


def table_long(rows: list[long_handlers.Row]) -> list[str]:
    lines = [
        "| handler | lease-worker, fixed | lease-worker, adaptive | per-message heartbeat |",
        "| ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        lines.append(
            f"| {row.handler_min} min | {row.fixed:.2f} ({row.fixed_extends:.2f} extend) | "
            f"{row.adaptive:.2f} ({row.adaptive_extends:.2f}) | "
            f"{row.heartbeat:.2f} ({row.heartbeat_extends:.2f}) |"
        )
    return lines


def plot_long(rows: list[long_handlers.Row], path: Path) -> None:
    def draw(axes: Any) -> None:
        labels = [f"{row.handler_min} min" for row in rows]
        width = 0.27
        for offset, (name, values) in enumerate(
            [
                ("lease-worker fixed", [r.fixed for r in rows]),
                ("lease-worker adaptive", [r.adaptive for r in rows]),
                ("per-message heartbeat", [r.heartbeat for r in rows]),
            ]
        ):
            positions = [i + (offset - 1) * width for i in range(len(rows))]
            axes.bar(positions, values, width, label=name)
        axes.set_xticks(range(len(rows)), labels)
        axes.set_yscale("log")
        axes.set_ylabel("requests per message")
        axes.set_title("Cost of long handlers (30 s visibility)")
        axes.legend()

    plot(path, draw)


def _timed(label: str, work: Callable[[], T]) -> T:
    started = time.perf_counter()
    result = work()
    print(f"report: {label} took {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return result


@dataclass(frozen=True, slots=True)
class Figures:
    """Everything one run measured, before it is written out."""

    engine: list[engine_throughput.Result]
    scale: lease_scale.Result
    rows: list[side_by_side.Row]
    long_rows: list[long_handlers.Row]
    network: list[network.Run]
    smq: tuple[list[smq_renewals.Client], dict[str, Any] | None]
    profiled: list[profile.Run]


def measure_all(sizes: Sizes, out: Path, command: str) -> Figures:
    """Run every benchmark in turn (the profile writes its own page, beside `out`)."""
    loops = engine_throughput.available_loops()
    return Figures(
        engine=_timed(
            "engine throughput",
            lambda: [
                engine_throughput.run(sizes.throughput, loop, sizes.throughput_rounds)
                for loop in loops
            ],
        ),
        scale=_timed("lease scale", lambda: lease_scale.run(sizes.scale, traced=True)),
        rows=_timed(
            "side by side",
            lambda: side_by_side.run(
                sizes.side_by_side,
                side_by_side.rounds_for(sizes.side_by_side),
                smoke=not sizes.full,
            ),
        ),
        long_rows=_timed("long handlers", lambda: long_handlers.run(sizes.long_handlers)),
        network=_timed(
            "network",
            lambda: network.run(sizes.network, sizes.network_delays_ms, sizes.network_rounds),
        ),
        smq=_timed(
            "smq renewals",
            lambda: smq_renewals.measure(sizes.smq_leases, sizes.smq_rounds, runtime=sizes.full),
        ),
        profiled=_timed(
            "profile",
            lambda: profile.write(
                sizes.profile,
                sizes.profile_sqs,
                out.parent / "profile.md",
                command,
                full=sizes.full,
            ),
        ),
    )


def _engine_sections(figures: Figures, images: Path) -> list[str]:
    engine_throughput.chart(figures.engine, images / "throughput.png")
    return [
        "## 1. Engine throughput",
        "",
        _body(engine_throughput.__doc__),
        "",
        *engine_throughput.table(figures.engine),
        "",
        f"![engine ratio]({images.name}/throughput.png)",
        "",
        "## 2. Lease scale",
        "",
        _body(lease_scale.__doc__),
        "",
        *lease_scale.table(figures.scale),
        "",
    ]


def _sqs_sections(figures: Figures, images: Path) -> list[str]:
    return [
        "## 3. Side by side over the SQS protocol",
        "",
        *side_by_side.section(figures.rows, images),
        "",
        "## 4. Scale-out",
        "",
        *scale_out.section(figures.rows, images),
        "",
    ]


def _other_sections(figures: Figures, images: Path) -> list[str]:
    plot_long(figures.long_rows, images / "long_handlers.png")
    scale = figures.scale
    return [
        "## 5. Cost of long handlers",
        "",
        _body(long_handlers.__doc__),
        "",
        "Requests per message (of which extension calls):",
        "",
        *table_long(figures.long_rows),
        "",
        f"![long handlers]({images.name}/long_handlers.png)",
        "",
        "## 6. SMQ: renewal cost",
        "",
        *smq_renewals.section(*figures.smq, scale.cpu_s_per_round, scale.floor),
        "",
        "## 7. Profile",
        "",
        *profile.summary(figures.profiled, "profile.md"),
        "",
        "## 8. Side by side over a network",
        "",
        *network.section(figures.network),
        "",
    ]


def page(figures: Figures, command: str, images: Path) -> str:
    """docs/benchmarks.md; the charts go to `images`, a folder beside it."""
    images.mkdir(parents=True, exist_ok=True)
    lines = [
        "# Benchmarks",
        "",
        "Produced by `bench/run` (see the README); every figure below comes from one run on "
        "one machine, measured side by side. Nothing here is a pass/fail test: the figures "
        "that do not depend on timing (requests per message, bytes per lease, renewal calls "
        "per round) are guarded in CI by tests/bench/test_budgets.py against bench/budgets.py.",
        "",
        *environment(command),
        "",
        "## Issue 33's goals at a glance",
        "",
        f"The default configuration is `lease-worker run` with no flags: {defaults().says()} "
        "at this commit (read from the code when the run starts).",
        "",
        *goals_table(
            figures.engine,
            figures.scale,
            figures.rows,
            figures.long_rows,
            read_spark(images / "spark_source.json"),
        ),
        *network.goals(figures.network),
        "",
        *_engine_sections(figures, images),
        *_sqs_sections(figures, images),
        *_other_sections(figures, images),
    ]
    return "\n".join(lines)


def build(sizes: Sizes, out: Path, command: str) -> str:
    (out.parent / "bench").mkdir(parents=True, exist_ok=True)
    return page(measure_all(sizes, out, command), command, out.parent / "bench")


def _body(docstring: str | None) -> str:
    """A module docstring without its first line (the title the report already has)."""
    return (docstring or "").strip().partition("\n")[2].strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for CI")
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks.md"))
    args = parser.parse_args()
    configure_logging(level="warning")
    command = "python -m bench.report" + (" --smoke" if args.smoke else "")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    text = _timed("everything", lambda: build(SMOKE if args.smoke else FULL, args.out, command))
    args.out.write_text(text)
    print(text)
    print(f"\nwritten to {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
