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
  tagged jobs are cancelled in Spark (`cancelJobsWithTag`) and the handler waits, shielded
  and bounded by `cancel_wait_s`, for the job's thread to end before the cancellation goes
  on: the message is never released while its job still writes.
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
from typing import Generic, TypeVar

import anyio
import structlog
from pyspark.sql import SparkSession

from worker.integrations.spark.output import StagedOutput, committed
from worker.message import Message

__all__ = ["JobContext", "JobResult", "SparkJobs"]

T = TypeVar("T")
log = structlog.get_logger("worker.integrations.spark")


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
        if output is not None and committed(self.spark, output):
            log.info("spark.job.skipped", reason="output already committed")
            return JobResult(None, committed=False, skipped=True, duration_s=0.0)
        staged = StagedOutput.beside(self.spark, output) if output is not None else None
        context = JobContext(
            tag=f"lease-worker-{uuid.uuid4().hex}", output=staged.staging if staged else None
        )
        done = _start_thread(self.spark, job, context)
        try:
            value = await asyncio.shield(asyncio.wrap_future(done))
            made = staged is not None and await anyio.to_thread.run_sync(staged.commit, self.spark)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self._stop(context.tag, done)
                if staged is not None:
                    await anyio.to_thread.run_sync(staged.discard, self.spark)
            raise
        duration = time.monotonic() - started
        log.info("spark.job.finished", tag=context.tag, duration_s=round(duration, 3))
        return JobResult(value, committed=made, skipped=False, duration_s=duration)

    async def _stop(self, tag: str, done: concurrent.futures.Future[T]) -> None:
        """Cancel the tagged jobs of a run still going, and wait (bounded) for its thread."""
        if done.done():
            return
        asked = time.monotonic()
        await anyio.to_thread.run_sync(self.spark.sparkContext.cancelJobsWithTag, tag)
        with anyio.move_on_after(self.cancel_wait_s) as waiting:
            await asyncio.wait([asyncio.wrap_future(done)])
        if waiting.cancelled_caught:
            log.warning("spark.job.still_running", tag=tag, waited_s=self.cancel_wait_s)
        else:
            log.info(
                "spark.job.cancelled", tag=tag, stopped_in_s=round(time.monotonic() - asked, 3)
            )


def _start_thread(
    spark: SparkSession, job: Callable[[SparkSession, JobContext], T], context: JobContext
) -> concurrent.futures.Future[T]:
    """Run the job in a new daemon thread that carries the job tag; its future."""
    done: concurrent.futures.Future[T] = concurrent.futures.Future()

    def target() -> None:
        done.set_running_or_notify_cancel()
        context_ = spark.sparkContext
        context_.addJobTag(context.tag)
        try:
            done.set_result(job(spark, context))
        except BaseException as error:  # the handler's to judge, in its own task
            done.set_exception(error)
        finally:
            context_.removeJobTag(context.tag)

    threading.Thread(target=target, name=f"spark-job-{context.tag}", daemon=True).start()
    return done
