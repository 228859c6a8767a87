"""The example's report: `report.md` (tables) and `report.png` (totals per day and region).

The plot needs matplotlib, which the `[spark]` extra does not install: without it the report
says so and has no plot (`pip install matplotlib` to get one).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from examples.spark_pipeline.data import REGIONS

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from examples.spark_pipeline.pipeline import JobRecord

#: The plot's unit: the amounts are cents; the plot shows thousands of currency units.
PLOT_SCALE, PLOT_UNIT = 100 * 1_000, "thousands of currency units"


def write(
    spark: SparkSession,
    workdir: Path,
    jobs: Sequence[JobRecord],
    summaries: Sequence[dict[str, Any]],
    events_sent: int,
) -> tuple[Path, Path | None]:
    """Write `report.md` (and `report.png` when matplotlib is installed); their paths."""
    totals = _totals(spark, workdir / "totals")
    plot = _plot(totals, workdir / "report.png")
    counted = Counter[str]()
    for summary in summaries:
        counted[summary["kind"]] += int(summary["count"])
    lines = [
        "# Spark pipeline report",
        "",
        "## Jobs under lease (one per dataset)",
        "",
        "| day | rows | job s | lease renewals | receive count |",
        "|---|---|---|---|---|",
        *(
            f"| {j.day} | {j.rows} | {j.duration_s:.1f} | {j.renewals} | {j.receive_count} |"
            for j in jobs
        ),
        "",
        "## Totals (Parquet output), cents",
        "",
        "| day | " + " | ".join(REGIONS) + " |",
        "|---" * (len(REGIONS) + 1) + "|",
        *(
            f"| {day} | " + " | ".join(str(row.get(r, 0)) for r in REGIONS) + " |"
            for day, row in sorted(totals.items())
        ),
        "",
        "## Streaming: events counted through the leased source and the queue sink",
        "",
        f"{events_sent} events sent; {sum(counted.values())} counted, "
        f"in {len(summaries)} summary messages.",
        "",
        "| kind | events |",
        "|---|---|",
        *(f"| {kind} | {count} |" for kind, count in sorted(counted.items())),
        "",
        f"![totals]({plot.name})" if plot else "(No plot: `pip install matplotlib` for one.)",
    ]
    path = workdir / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path, plot


def _totals(spark: SparkSession, root: Path) -> dict[int, dict[str, int]]:
    # The files hold `day`: no partition column from the `day=N` folder names as well.
    files = spark.read.option("recursiveFileLookup", "true").parquet(str(root))
    frame = files.groupBy("day", "region").agg(F.sum("total_cents").alias("t"))
    totals: dict[int, dict[str, int]] = {}
    for row in frame.collect():
        totals.setdefault(int(row["day"]), {})[row["region"]] = int(row["t"])
    return totals


def _plot(totals: dict[int, dict[str, int]], path: Path) -> Path | None:
    """`report.png`, or None without matplotlib."""
    try:
        figure = figure_of(totals)
    except ImportError:
        return None
    figure.savefig(path)
    return path


def figure_of(totals: dict[int, dict[str, int]]) -> Figure:
    """The totals per day and region as bars (matplotlib, imported here: it is optional)."""
    from matplotlib.figure import Figure  # no pyplot: no display, no global state

    figure = Figure(figsize=(8, 4))
    axes = figure.subplots()
    days = sorted(totals)
    width = 0.8 / len(REGIONS)
    for i, region in enumerate(REGIONS):
        values = [totals[day].get(region, 0) / PLOT_SCALE for day in days]
        axes.bar([d + i * width for d in days], values, width, label=region)
    axes.set_xticks([d + 0.4 - width / 2 for d in days], [str(d) for d in days])
    axes.set_xlabel("day")
    axes.set_ylabel(f"sales total ({PLOT_UNIT})")
    axes.set_title("Sales totals per day and region (Spark jobs under lease)")
    axes.legend(ncols=len(REGIONS), loc="lower center", bbox_to_anchor=(0.5, -0.35))
    figure.tight_layout()
    return figure
