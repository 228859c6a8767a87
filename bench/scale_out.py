"""Scale-out: messages per second per core with `--processes N`.

lease-worker with `--processes N`, N = 1 .. the machine's core count, from the side-by-side
run's rows (same queue, same endpoint, same budget of 10 messages held per process).
Messages per second per core is msgs/s ÷ N; the endpoint runs on the same cores, so the
worker CPU per message column is the figure that does not depend on how the cores were
shared (1 ÷ it is the messages one core would do with the server elsewhere).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from bench._plots import plot
from bench.side_by_side import Row, ratio


def _config(row: Row) -> str:
    """The row's name without its process count: "lease-worker", "lease-worker, lean path, …"."""
    name = row.contender.name
    return name.rsplit(", ", 1)[0] if row.contender.processes > 1 else name


def series(rows: list[Row]) -> dict[str, list[Row]]:
    """lease-worker's configurations measured at more than one process count, each row in
    process order; unmeasured rows are left out."""
    by_config: dict[str, list[Row]] = defaultdict(list)
    for row in rows:
        if row.contender.name.startswith("lease-worker") and row.failure is None:
            by_config[_config(row)].append(row)
    return {
        config: sorted(got, key=lambda r: r.contender.processes)
        for config, got in by_config.items()
        if len({r.contender.processes for r in got}) > 1
    }


def table(rows: list[Row]) -> list[str]:
    lines = [
        "| configuration | processes | msgs/s | **msgs/s per core** | worker CPU ms/msg | "
        "msgs per worker CPU-second | server CPU ms/msg |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for config, got in series(rows).items():
        for row in got:
            n = row.contender.processes
            cpu_ms = 1000 * row.worker_cpu_s / row.messages
            lines.append(
                f"| {config} | {n} | {row.rate:,.0f} | **{row.rate / n:,.0f}** | "
                f"{cpu_ms:.3f} | {ratio(1000, cpu_ms):,.0f} | "
                f"{1000 * row.server_cpu_s / row.messages:.3f} |"
            )
    if len(lines) == 2:
        return ["(not measured: no lease-worker configuration ran at more than one process count)"]
    return lines


def chart(rows: list[Row], path: Path) -> bool:
    """msgs/s (solid) and msgs/s per core (dashed) against N; False when there is nothing."""
    got = series(rows)
    if not got:
        return False

    def draw(axes: Any) -> None:
        colors = ("tab:orange", "tab:green", "tab:purple", "tab:brown")
        for (config, config_rows), color in zip(got.items(), colors, strict=False):
            n = [r.contender.processes for r in config_rows]
            axes.plot(n, [r.rate for r in config_rows], "o-", color=color, label=config)
            per_core = [r.rate / r.contender.processes for r in config_rows]
            axes.plot(n, per_core, "o--", color=color, label=f"{config}, per core")
        counts = sorted({r.contender.processes for rows_ in got.values() for r in rows_})
        axes.set_xticks(counts)
        axes.set_xlabel("worker processes (--processes N)")
        axes.set_ylabel("messages per second")
        axes.set_ylim(bottom=0)
        axes.set_title("Scale-out over SQS's protocol (the endpoint shares the cores)", fontsize=10)
        axes.legend(fontsize=7)

    plot(path, draw)
    return True


def section(rows: list[Row], images: Path) -> list[str]:
    drawn = chart(rows, images / "scale_out.png")
    return [
        _body(__doc__),
        "",
        *table(rows),
        *(["", f"![scale-out]({images.name}/scale_out.png)"] if drawn else []),
    ]


def _body(docstring: str | None) -> str:
    return (docstring or "").strip().partition("\n")[2].strip()
