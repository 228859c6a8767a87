"""The example pipeline runs end to end on the shared session (small sizes), and stops
quietly; it runs with the `[spark]` extra alone (matplotlib only draws the plot)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from pyspark.sql import SparkSession

from examples.spark_pipeline import report
from examples.spark_pipeline.pipeline import run_pipeline
from tests.integrations.spark.jvm import jvm_stderr

pytestmark = pytest.mark.timeout(150)

ROOT = Path(__file__).resolve().parents[3]
#: Imports as if matplotlib were not installed (a None in sys.modules fails an import).
WITHOUT_MATPLOTLIB = "import sys; sys.modules['matplotlib'] = None; "


def test_the_example_pipeline_aggregates_streams_and_reports(
    spark: SparkSession, tmp_path: Path
) -> None:
    with jvm_stderr(spark) as printed:
        result = run_pipeline(tmp_path, datasets=2, rows=500, events=60)
    assert [(job.day, job.rows, job.receive_count) for job in result.jobs] == [
        (0, 500, 1),
        (1, 500, 1),
    ]
    assert sum(int(summary["count"]) for summary in result.summaries) == 60
    text = result.report.read_text()
    assert "60 events sent; 60 counted" in text
    assert result.plot is not None
    assert result.plot.stat().st_size > 10_000  # a PNG with something drawn
    assert sorted(p.name for p in (tmp_path / "totals").iterdir()) == ["day=0", "day=1"]
    assert "StackOverflowError" not in printed.text  # the stream's stop was quiet


def test_the_example_imports_and_reports_without_matplotlib(tmp_path: Path) -> None:
    """`python -m examples.spark_pipeline` with the `[spark]` extra alone: it imported
    matplotlib at start and failed there."""
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_MATPLOTLIB + "import examples.spark_pipeline.__main__"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]


def test_without_matplotlib_there_is_no_plot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    assert report._plot({0: {"north": 100}}, tmp_path / "report.png") is None
    assert not (tmp_path / "report.png").exists()


def test_the_plots_axis_says_its_unit() -> None:
    from matplotlib.patches import Rectangle

    figure = report.figure_of({0: {"north": 250_000}, 1: {"south": 125_000}})
    [axes] = figure.axes
    assert axes.get_ylabel() == "sales total (thousands of currency units)"
    bars = [patch for patch in axes.patches if isinstance(patch, Rectangle)]
    heights = sorted(bar.get_height() for bar in bars if bar.get_height())
    assert heights == [1.25, 2.5]  # 125,000 and 250,000 cents, in thousands
