"""Runs every benchmark and writes docs/benchmarks.md with tables and PNG plots.

    python -m bench.report            # full size (minutes), writes docs/
    python -m bench.report --smoke    # seconds; what CI runs so that nothing rots

Figures are ratios and counts measured side by side in one run on one machine; nothing here
passes or fails.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import platform
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import engine_throughput, lease_scale, long_handlers
from worker.cli.logging import configure_logging


@dataclass(frozen=True, slots=True)
class Sizes:
    throughput: int
    scale: int
    long_handlers: int
    side_by_side: int


FULL = Sizes(throughput=100_000, scale=100_000, long_handlers=400, side_by_side=20_000)
SMOKE = Sizes(throughput=2_000, scale=500, long_handlers=20, side_by_side=200)


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
    packages = ("lease-worker", "anyio", "aiobotocore", "botocore", "aiohttp", "structlog")
    return [
        f"- command: `{command}`",
        f"- machine: {_cpu_model()}, {os.cpu_count()} cores; Python {platform.python_version()}",
        "- versions: " + ", ".join(f"{p} {_version(p)}" for p in packages),
    ]


def table_throughput(result: engine_throughput.Result) -> list[str]:
    return [
        "| | messages | msgs/s | CPU s |",
        "| --- | ---: | ---: | ---: |",
        f"| lease-worker, no-op async handler | {result.messages:,} | "
        f"{result.worker_rate:,.0f} | {result.worker.cpu_s:.2f} |",
        f"| bare asyncio: spawn and finish a no-op task | {result.messages:,} | "
        f"{result.ceiling_rate:,.0f} | {result.ceiling.cpu_s:.2f} |",
        "",
        f"Ratio worker / ceiling: **{result.worker_rate / result.ceiling_rate:.3f}** "
        f"({1e6 * result.worker.cpu_s / result.messages:.0f} µs of CPU per message for "
        "receive, lease, decode, dispatch, settle and metrics).",
    ]


def table_scale(result: lease_scale.Result) -> list[str]:
    return [
        "| in flight | renewal rounds | calls per round | floor ceil(N/10) | lapsed | "
        "CPU s per round | memory per message |",
        "| ---: | ---: | --- | ---: | ---: | ---: | ---: |",
        f"| {result.messages:,} | {result.rounds} | "
        f"{', '.join(f'{c:,}' for c in result.calls_per_round)} | {result.floor:,} | "
        f"{result.lapsed} | {result.cpu_s_per_round:.3f} | "
        f"{result.bytes_per_message / 1024:.1f} KiB |",
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


def _plot(path: Path, draw: Callable[[Any], None]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, axes = pyplot.subplots(figsize=(6.4, 3.6), dpi=100)
    draw(axes)
    figure.tight_layout()
    figure.savefig(path)
    pyplot.close(figure)


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

    _plot(path, draw)


def plot_throughput(result: engine_throughput.Result, path: Path) -> None:
    def draw(axes: Any) -> None:
        axes.barh(["bare asyncio tasks", "lease-worker"], [result.ceiling_rate, result.worker_rate])
        axes.set_xlabel("per second")
        axes.set_title(f"Draining {result.messages:,} messages from the in-memory engine")

    _plot(path, draw)


def build(sizes: Sizes, out: Path, command: str) -> str:
    images = out.parent / "bench"
    images.mkdir(parents=True, exist_ok=True)
    throughput = engine_throughput.run(sizes.throughput)
    scale = lease_scale.run(sizes.scale)
    long_rows = long_handlers.run(sizes.long_handlers)
    plot_throughput(throughput, images / "throughput.png")
    plot_long(long_rows, images / "long_handlers.png")
    side = _side_by_side(sizes.side_by_side, images)
    rel = os.path.relpath(images, out.parent)
    lines = [
        "# Benchmarks",
        "",
        "Produced by `bench/run` (see the README); every figure below comes from one run on "
        "one machine, measured side by side. Nothing here is a pass/fail test.",
        "",
        *environment(command),
        "",
        "## 1. Engine throughput",
        "",
        *table_throughput(throughput),
        "",
        f"![throughput]({rel}/throughput.png)",
        "",
        "## 2. Lease scale",
        "",
        "Handlers sleep 75 s (virtual time) against a 30 s visibility and a 10 s margin, so "
        "every lease is renewed at 20, 40 and 60 s. Virtual time does not advance while the "
        "loop computes, so the CPU per round column is what tells whether a round fits in the "
        "renewal margin in real time.",
        "",
        *table_scale(scale),
        "",
        "## 3. Side by side over the SQS protocol",
        "",
        *side,
        "",
        "## 4. Cost of long handlers",
        "",
        _body(long_handlers.__doc__),
        "",
        "Requests per message (of which extension calls):",
        "",
        *table_long(long_rows),
        "",
        f"![long handlers]({rel}/long_handlers.png)",
        "",
    ]
    return "\n".join(lines)


def _body(docstring: str | None) -> str:
    """A module docstring without its first line (the title the report already has)."""
    return (docstring or "").strip().partition("\n")[2].strip()


def _side_by_side(messages: int, images: Path) -> list[str]:
    try:
        from bench import side_by_side
    except ImportError:
        return ["(not measured: bench/side_by_side.py is not there yet)"]
    lines: list[str] = side_by_side.report(messages, images)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for CI")
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks.md"))
    args = parser.parse_args()
    configure_logging(level="warning")
    command = "python -m bench.report" + (" --smoke" if args.smoke else "")
    text = build(SMOKE if args.smoke else FULL, args.out, command)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)
    print(f"\nwritten to {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
