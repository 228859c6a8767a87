"""The example pipeline runs end to end on the shared session (small sizes)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from pyspark.sql import SparkSession

from examples.spark_pipeline.pipeline import run_pipeline

pytestmark = pytest.mark.timeout(150)


def test_the_example_pipeline_aggregates_streams_and_reports(
    spark: SparkSession, tmp_path: Path
) -> None:
    result = run_pipeline(tmp_path, datasets=2, rows=500, events=60)
    assert [(job.day, job.rows, job.receive_count) for job in result.jobs] == [
        (0, 500, 1),
        (1, 500, 1),
    ]
    assert sum(int(summary["count"]) for summary in result.summaries) == 60
    text = result.report.read_text()
    assert "60 events sent; 60 counted" in text
    assert result.plot.stat().st_size > 10_000  # a PNG with something drawn
    assert sorted(p.name for p in (tmp_path / "totals").iterdir()) == ["day=0", "day=1"]
