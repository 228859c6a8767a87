"""Spark jobs under a lease: renewed while they run, cancelled with their handler, committed
whole or not at all. Real time (a Spark job is real work); every wait is bounded."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest

pytest.importorskip("pyspark")

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from worker.app import Worker
from worker.config import LeaseConfig, WorkerConfig
from worker.core.settlement import Outcome
from worker.integrations.spark.jobs import JobContext, SparkJobs
from worker.message import Message
from worker.testing import run_worker

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(120)]

ROWS = 1_000
SLOW_S = 2.5


def _pause(_: object) -> None:
    time.sleep(SLOW_S)  # stands for a long computation on the executors


def _write_input(spark: SparkSession, path: Path) -> None:
    spark.range(ROWS).select(
        (F.col("id") % 10).alias("key"), F.col("id").alias("value")
    ).write.parquet(str(path))


def _hidden(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith("."))


async def test_a_job_longer_than_the_visibility_is_renewed_not_redelivered(
    spark: SparkSession, tmp_path: Path
) -> None:
    source, output = tmp_path / "input", tmp_path / "out" / "totals"
    _write_input(spark, source)
    jobs = SparkJobs(spark)
    app = Worker(WorkerConfig(lease=LeaseConfig(visibility_s=2), wait_s=1))
    runs: list[tuple[int, int]] = []

    def totals(spark: SparkSession, job: JobContext) -> int:
        spark.sparkContext.parallelize([0, 1], 2).foreach(_pause)
        frame = spark.read.parquet(str(source)).groupBy("key").agg(F.sum("value").alias("total"))
        assert job.output is not None
        frame.write.parquet(job.output)
        return ROWS

    @app.handler("reports")
    async def report(message: Message) -> None:
        started = time.monotonic()
        result = await jobs.run(message, totals, output=str(output))
        assert result.committed and result.value == ROWS
        runs.append((message.receive_count, message.lease.renewals))
        durations.append(time.monotonic() - started)

    durations: list[float] = []
    async with run_worker(app) as harness:
        await harness.send("reports", {"input": str(source)})
        with anyio.fail_after(90):
            [handled] = await harness.wait_for_handled(1)
            await harness.wait_until_idle()
        counts = harness.engine.counts("reports")
    assert handled.outcome is Outcome.SUCCEEDED
    assert durations[0] > 2 * 2  # the job outlived two visibility timeouts
    [(receive_count, renewals)] = runs  # one run: never redelivered
    assert receive_count == 1
    assert renewals >= 3, renewals  # a renewal every ~1.3 s over > 4 s
    assert (counts.visible, counts.in_flight) == (0, 0)  # deleted on success
    written = spark.read.parquet(str(output))
    assert written.count() == 10
    assert written.agg(F.sum("total")).collect()[0][0] == ROWS * (ROWS - 1) // 2
    assert _hidden(output.parent) == []  # no staging output left
    print(f"job {durations[0]:.2f} s, renewals {renewals}")
