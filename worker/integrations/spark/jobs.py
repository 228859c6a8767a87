"""Spark jobs run for a message, under its lease.

::

    jobs = SparkJobs(spark_session())

    @app.handler("reports")
    async def report(message: Message) -> None:
        await jobs.run(message, aggregate, output=message.body["output"])

    def aggregate(spark: SparkSession, job: JobContext) -> None:
        spark.read.parquet(...).groupBy(...).agg(...).write.parquet(job.output)

Rules:
- The job runs in a thread of its own (PySpark calls block), so the handler stays an async
  task: the lease keeper extends the message's lease for as long as the job runs, however
  long past the visibility timeout.
- Each run gets a job tag (`JobContext.tag`), added in the job's thread (Spark's tags are
  per thread). When the handler is cancelled (lease lost, `max_lease_s`, shutdown), the
  tagged jobs are cancelled in Spark (`cancelJobsWithTag`, again every second while the
  job's thread runs, for actions submitted after the first cancel) and the handler waits,
  bounded by `cancel_wait_s`, for the job's thread to end before its cancellation goes on:
  the message is not released while its job may still write. A thread still running after
  `cancel_wait_s` is left (its staging output too) and logged `spark.job.still_running`.
- A cancelled or failed job's tasks outlive it: Spark fails the job at once, while a killed
  task whose Python worker is busy runs on for up to ~2 s (`spark.python.task.killTimeout`)
  and may still touch the output, re-creating an empty staging directory after it was
  removed. So the staging output is removed only once the tagged jobs' tasks have all ended
  (Spark's status tracker; also bounded by `cancel_wait_s`, then `spark.job.tasks_running`).
- With `output`, the job writes to a staging path (`JobContext.output`) that is renamed onto
  `output` only when the job returned (see `worker.integrations.spark.output`); a cancelled
  or failed job's staging output is removed. An `output` that exists already was committed
  by an earlier delivery of the message: the job is not run again.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import anyio
import structlog
from pyspark.sql import SparkSession

from worker.integrations.spark.output import StagedOutput, committed
from worker.message import Message

__all__ = ["JobContext", "JobResult", "SparkJobs"]

T = TypeVar("T")
log = structlog.get_logger("worker.integrations.spark")
#: While a cancelled job's thread runs on, its tag is cancelled again this often.
_RECANCEL_S = 1.0
#: How often Spark's status tracker is read while a stopped job's tasks end (it has no
#: callback in PySpark).
_TASKS_POLL_S = 0.1
#: How long a tag with no job in the status tracker is looked at again (its events may
#: still be on Spark's listener bus) before it counts as having run none.
_NO_JOB_SETTLE_S = 0.5


@dataclass(frozen=True, slots=True)
class JobContext:
    """What a job function gets beside the session."""

    #: The job tag every Spark job of this run carries (already added in the job's thread).
    tag: str
    #: Where to write the output (a staging path), or None when `run` was given no output.
    output: str | None


@dataclass(frozen=True, slots=True)
class JobResult(Generic[T]):
    """What `SparkJobs.run` answers."""

    #: The job function's return value; None when the job was skipped.
    value: T | None
    #: True when the output was committed by this run; False when it existed already (the
    #: job was skipped) or when there was no output.
    committed: bool
    skipped: bool
    duration_s: float


class SparkJobs:
    """Runs job functions for messages on one SparkSession, with cancellation and commits."""

    def __init__(self, spark: SparkSession, *, cancel_wait_s: float = 30.0) -> None:
        if cancel_wait_s <= 0:
            raise ValueError(f"cancel_wait_s must be > 0, got {cancel_wait_s}")
        self.spark = spark
        self.cancel_wait_s = cancel_wait_s

    async def run(
        self,
        message: Message,
        job: Callable[[SparkSession, JobContext], T],
        *,
        output: str | None = None,
    ) -> JobResult[T]:
        """Run `job` for `message` in a thread; commit `output` when it returns."""
        started = time.monotonic()
        staged = None
        if output is not None:  # calls into the JVM: off the event loop
            if await anyio.to_thread.run_sync(committed, self.spark, output):
                log.info("spark.job.skipped", reason="output already committed")
                return JobResult(None, committed=False, skipped=True, duration_s=0.0)
            staged = await anyio.to_thread.run_sync(StagedOutput.beside, self.spark, output)
        tag = f"lease-worker-{uuid.uuid4().hex}"
        context = JobContext(tag=tag, output=staged.staging if staged else None)
        done = _in_thread(
            f"spark-job-{tag}", lambda: _job_then_commit(self.spark, job, context, staged)
        )
        outcome = asyncio.wrap_future(done)
        # Read by the cancellation path's `_stop`, not here: mark it retrieved.
        outcome.add_done_callback(lambda future: future.cancelled() or future.exception())
        try:
            value, made = await asyncio.shield(outcome)
        except BaseException:
            stopping = _in_thread(f"spark-stop-{tag}", lambda: self._stop(tag, done, staged))
            await _despite_cancellation(stopping)
            raise
        duration = time.monotonic() - started
        log.info("spark.job.finished", tag=tag, duration_s=round(duration, 3))
        return JobResult(value, committed=made, skipped=False, duration_s=duration)

    def _stop(
        self, tag: str, done: concurrent.futures.Future[Any], staged: StagedOutput | None
    ) -> None:
        """Cancel the tagged jobs of a run still going, wait (bounded) for its thread and
        then its tasks, and remove its staging output. Blocking: runs in a thread of its own."""
        asked = time.monotonic()
        until = asked + self.cancel_wait_s
        if not done.done():
            if not self._cancel_until_done(tag, done, until=until):
                log.warning("spark.job.still_running", tag=tag, waited_s=self.cancel_wait_s)
                return  # its staging output is left: the job may still write there
            stopped_in = round(time.monotonic() - asked, 3)
            log.info("spark.job.cancelled", tag=tag, stopped_in_s=stopped_in)
        if staged is None:
            return
        running = self._wait_for_tasks(tag, until=until)
        if running != 0:  # removed all the same: a task that ends later may leave some
            log.warning("spark.job.tasks_running", tag=tag, tasks=running)
        staged.discard(self.spark)

    def _wait_for_tasks(self, tag: str, *, until: float) -> int | None:
        """Until no task of a job tagged `tag` runs, or `until`: the tasks still running
        then (None: a job of the tag still runs, as far as the status tracker knows)."""
        looked = time.monotonic()
        while True:
            jobs, running = _tasks_of(self.spark, tag)
            settled = jobs > 0 or time.monotonic() - looked >= _NO_JOB_SETTLE_S
            if running == 0 and settled:
                return 0
            if time.monotonic() >= until:
                return running
            time.sleep(_TASKS_POLL_S)

    def _cancel_until_done(
        self, tag: str, done: concurrent.futures.Future[Any], *, until: float
    ) -> bool:
        """Cancel the tagged jobs, again every `_RECANCEL_S` while the thread runs: a job
        function may submit its next action after a cancellation (the first action was not
        submitted yet, or the function caught the failure). True once the thread ended."""
        context = self.spark.sparkContext
        while (left := until - time.monotonic()) > 0:
            context.cancelJobsWithTag(tag)
            try:
                done.exception(timeout=min(left, _RECANCEL_S))
            except concurrent.futures.TimeoutError:
                continue
            return True
        return done.done()


def _job_then_commit(
    spark: SparkSession,
    job: Callable[[SparkSession, JobContext], T],
    context: JobContext,
    staged: StagedOutput | None,
) -> tuple[T, bool]:
    """The job's thread: run it under its tag, then commit its output (in the same thread,
    so that a cancellation waits for a commit under way: the output is whole or absent)."""
    jsc = spark.sparkContext
    jsc.addJobTag(context.tag)
    try:
        value = job(spark, context)
    finally:
        if jsc._jsc is not None:  # None once the session was stopped
            jsc.removeJobTag(context.tag)
    return value, staged is not None and staged.commit(spark)


def _tasks_of(spark: SparkSession, tag: str) -> tuple[int, int | None]:
    """How many jobs tagged `tag` Spark's status tracker knows, and how many of their tasks
    still run, counted per stage (an executor's own count drops a killed task at once);
    None while such a job still runs (its last tasks may not be counted yet)."""
    jvm_tracker: Any = spark.sparkContext._jsc.sc().statusTracker()
    tracker = spark.sparkContext.statusTracker()
    ids = [int(job_id) for job_id in jvm_tracker.getJobIdsForTag(tag)]
    running = 0
    for job_id in ids:
        job = tracker.getJobInfo(job_id)
        if job is None:  # forgotten (spark.ui.retainedJobs): long over
            continue
        if job.status == "RUNNING":
            return len(ids), None
        for stage_id in job.stageIds:
            stage = tracker.getStageInfo(stage_id)
            running += stage.numActiveTasks if stage is not None else 0
    return len(ids), running


def _in_thread(name: str, call: Callable[[], T]) -> concurrent.futures.Future[T]:
    """Run `call` in a new daemon thread (a job may outlive the handler; it must not keep
    the process alive at exit); its future."""
    done: concurrent.futures.Future[T] = concurrent.futures.Future()

    def target() -> None:
        done.set_running_or_notify_cancel()
        try:
            done.set_result(call())
        except BaseException as error:  # the handler's to judge, in its own task
            done.set_exception(error)

    threading.Thread(target=target, name=name, daemon=True).start()
    return done


async def _despite_cancellation(stopping: concurrent.futures.Future[None]) -> None:
    """Wait for the (bounded) stop to finish although the handler's task is cancelled again
    and again (the runtime's cancellation is level-triggered, and an anyio shield does not
    hold off a task's own `cancel()`): the message must not be released while its job may
    still write."""
    waiting = asyncio.wrap_future(stopping)
    while not waiting.done():
        try:
            await asyncio.shield(waiting)
        except asyncio.CancelledError:
            continue
    if waiting.exception() is not None:
        log.warning("spark.job.stop_failed", error=type(waiting.exception()).__name__)
