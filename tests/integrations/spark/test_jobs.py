"""Spark jobs under a lease: renewed while they run, cancelled with their handler, committed
whole or not at all. Real time (a Spark job is real work); every wait is bounded."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import structlog.testing

pytest.importorskip("pyspark")

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from worker.app import Worker
from worker.config import LeaseConfig, ShutdownConfig, WorkerConfig
from worker.core.settlement import Outcome
from worker.integrations.spark.jobs import JobContext, JobResult, SparkJobs
from worker.message import Message
from worker.testing import run_worker

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(120)]

ROWS = 1_000
SLOW_S = 4.5


def _pause(_: object) -> None:
    time.sleep(SLOW_S)  # stands for a long computation on the executors


def _write_input(spark: SparkSession, path: Path) -> None:
    spark.range(ROWS).select(
        (F.col("id") % 10).alias("key"), F.col("id").alias("value")
    ).write.parquet(str(path))


def _hidden(directory: Path) -> list[str]:
    if not directory.exists():
        return []
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


async def test_cancelling_the_handler_cancels_the_tagged_jobs_and_commits_nothing(
    spark: SparkSession, tmp_path: Path
) -> None:
    output = tmp_path / "out" / "sums"
    jobs = SparkJobs(spark, cancel_wait_s=20)
    app = Worker(
        WorkerConfig(
            lease=LeaseConfig(visibility_s=5), wait_s=1, shutdown=ShutdownConfig(grace_s=0)
        )
    )
    running = threading.Event()
    ended: list[BaseException] = []

    def endless_sum(spark: SparkSession, job: JobContext) -> None:
        assert job.output is not None
        running.set()
        try:  # about 10 minutes of work on two cores, in the JVM only
            spark.range(0, 10**12).selectExpr("sum(id) AS total").write.parquet(job.output)
        except BaseException as error:
            ended.append(error)
            raise

    @app.handler("sums")
    async def handle(message: Message) -> None:
        await jobs.run(message, endless_sum, output=str(output))

    with structlog.testing.capture_logs() as logs:
        async with run_worker(app) as harness:
            await harness.send("sums", {})
            with anyio.fail_after(60):
                assert await anyio.to_thread.run_sync(running.wait, 60)
                await anyio.to_thread.run_sync(
                    _wait_for_a_running_job, spark, abandon_on_cancel=True
                )
            asked = time.monotonic()
            harness.shutdown()  # grace 0: the handler is cancelled at once
            with anyio.fail_after(30):
                [handled] = await harness.wait_for_handled(1)
            stopped_after = time.monotonic() - asked
        counts = harness.engine.counts("sums")  # after the shutdown's final flush
    assert handled.outcome is Outcome.SHUTDOWN
    [error] = ended  # the job's thread ended with Spark's cancellation, before the handler did
    assert "cancel" in str(error).lower()
    [cancelled] = [entry for entry in logs if entry["event"] == "spark.job.cancelled"]
    assert cancelled["stopped_in_s"] < 5
    assert not output.exists()  # nothing committed
    assert _hidden(output.parent) == []  # and the staging output removed
    assert (counts.visible, counts.in_flight) == (1, 0)  # released for another worker
    print(f"cancel: jobs stopped in {cancelled['stopped_in_s']} s, handler {stopped_after:.2f} s")


def _late_rows(partition: int, rows: Iterable[int]) -> Iterator[tuple[int]]:
    """On an executor: partition 0's rows at once (its task opens its output file: the job
    is writing), partition 1's after a pause, as a Python worker busy with a batch is. A
    killed task whose Python worker answers within `spark.python.task.killTimeout` (2 s by
    default, 10 s in these tests: conftest.py) goes on with the rows it gets."""
    if partition == 1:
        time.sleep(3)
    for n in rows:
        yield (n,)


async def test_a_cancelled_jobs_late_tasks_leave_no_staging_directory_behind(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Spark fails a cancelled job at once, while its killed Python tasks run on: one that
    opened its output file late re-created the `.NAME.staging-*` directory after the
    handler had removed it, left there for good. The staging output is now removed once
    the job's tasks ended."""
    output = tmp_path / "out" / "late"
    jobs = SparkJobs(spark, cancel_wait_s=20)
    app = Worker(
        WorkerConfig(
            lease=LeaseConfig(visibility_s=5), wait_s=1, shutdown=ShutdownConfig(grace_s=0)
        )
    )

    tags: list[str] = []

    def late_write(spark: SparkSession, job: JobContext) -> None:
        assert job.output is not None
        tags.append(job.tag)
        rows = spark.sparkContext.parallelize(range(1_000), 2)
        frame = spark.createDataFrame(rows.mapPartitionsWithIndex(_late_rows), "n long")
        frame.write.parquet(job.output)

    @app.handler("late")
    async def handle(message: Message) -> None:
        await jobs.run(message, late_write, output=str(output))

    async with run_worker(app) as harness:
        await harness.send("late", {})
        with anyio.fail_after(60):
            await anyio.to_thread.run_sync(_wait_for_a_part_file, output.parent)
        harness.shutdown()  # grace 0: the handler is cancelled at once
        with anyio.fail_after(30):
            [handled] = await harness.wait_for_handled(1)
    assert handled.outcome is Outcome.SHUTDOWN
    with anyio.fail_after(30):  # until the killed tasks are gone too (they touch the output)
        await anyio.to_thread.run_sync(_wait_for_the_tasks_of, spark, tags[0])
    assert not output.exists()
    assert _hidden(output.parent) == []


def _wait_for_a_part_file(directory: Path) -> None:
    """Until a task has opened an output file under `directory` (bounded by the caller)."""
    while not any(p.name.startswith("part-") for p in directory.rglob("*")):
        time.sleep(0.02)


def _wait_for_the_tasks_of(spark: SparkSession, tag: str) -> None:
    """Until every task of the jobs tagged `tag` has ended, as Spark's status tracker counts
    them per stage (an executor's count drops a killed task that still runs)."""
    tracker = spark.sparkContext.statusTracker()
    jvm_tracker: Any = spark.sparkContext._jsc.sc().statusTracker()
    while True:
        jobs = [tracker.getJobInfo(job_id) for job_id in jvm_tracker.getJobIdsForTag(tag)]
        stages = [tracker.getStageInfo(s) for job in jobs if job for s in job.stageIds]
        running = sum(stage.numActiveTasks for stage in stages if stage)
        if jobs and running == 0 and all(job and job.status != "RUNNING" for job in jobs):
            return
        time.sleep(0.05)


def _wait_for_a_running_job(spark: SparkSession) -> None:
    """Until Spark reports a running job (polls Spark's status tracker, which has no
    callback in PySpark; bounded by the caller's `fail_after`)."""
    while not spark.sparkContext.statusTracker().getActiveJobsIds():
        time.sleep(0.05)


async def test_a_redelivered_message_whose_output_was_committed_is_not_run_again(
    spark: SparkSession, tmp_path: Path
) -> None:
    output = tmp_path / "done"
    spark.range(3).write.parquet(str(output))  # committed by an earlier delivery
    jobs = SparkJobs(spark)
    app = Worker(WorkerConfig(wait_s=1))
    results: list[JobResult[None]] = []

    def must_not_run(spark: SparkSession, job: JobContext) -> None:
        raise AssertionError("the job ran again")

    @app.handler("again")
    async def handle(message: Message) -> None:
        results.append(await jobs.run(message, must_not_run, output=str(output)))

    async with run_worker(app) as harness:
        await harness.send("again", {})
        with anyio.fail_after(30):
            [handled] = await harness.wait_for_handled(1)
    assert handled.outcome is Outcome.SUCCEEDED
    assert [(r.skipped, r.committed, r.value) for r in results] == [(True, False, None)]
    assert spark.read.parquet(str(output)).count() == 3  # kept as it was
