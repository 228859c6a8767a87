"""The example's composition root: queues, the Spark session, the worker, the stream.

Everything runs in this process except what Spark runs in its own Python processes (the
streaming source's runner, the executors' workers), which reach the queues through the
embedded engine's SQS endpoint, as they would reach SQS.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from backends.memory import MemoryBackend
from backends.serve.sqs import SqsEndpoint, sqs_endpoint_in_thread
from backends.sqs import SqsBackend, SqsSettings
from examples.spark_pipeline import data, report
from examples.spark_pipeline.spark_jobs import EventCounts, sales_totals
from worker import LeaseConfig, Message, Worker, WorkerConfig, WorkerContext, serve
from worker.backend import Backend
from worker.integrations.spark import (
    BackendConnect,
    QueueSink,
    SparkJobs,
    read_leased_queue,
    spark_session,
    stops_quietly,
)
from worker.types import Deletion, OutgoingMessage, QueueSpec

AGGREGATE, EVENTS, SUMMARIES = "aggregate", "events", "summaries"
#: Short, so that a job outlives it and its lease is seen renewed.
VISIBILITY_S = 3


@dataclass(frozen=True, slots=True)
class JobRecord:
    day: int
    rows: int
    duration_s: float
    renewals: int
    receive_count: int


@dataclass(frozen=True, slots=True)
class PipelineResult:
    jobs: list[JobRecord]
    events_sent: int
    summaries: list[dict[str, Any]]
    report: Path
    #: None without matplotlib (not in the `[spark]` extra).
    plot: Path | None


async def connect_endpoint(url: str) -> Backend:
    """Open the SQS backend on `url` (picklable with `functools.partial`)."""
    return await SqsBackend.connect(
        SqsSettings(endpoint_url=url, region="us-east-1", access_key_id="x", secret_access_key="x")
    )


def run_pipeline(workdir: Path, *, datasets: int, rows: int, events: int) -> PipelineResult:
    """Run the whole example in `workdir`; answers what it did, with the report's paths."""
    with sqs_endpoint_in_thread() as endpoint:
        for spec in (
            QueueSpec(AGGREGATE, visibility_timeout_s=VISIBILITY_S),
            QueueSpec(EVENTS),
            QueueSpec(SUMMARIES),
        ):
            endpoint.portal.call(MemoryBackend(endpoint.engine).create_queue, spec)
        connect = functools.partial(connect_endpoint, endpoint.url)
        spark = spark_session()
        # Spark's warnings here are about the example's own pace (a 1 s trigger while the
        # jobs take the cores) and the stop's killed tasks: errors only.
        spark.sparkContext.setLogLevel("ERROR")
        query = _start_stream(spark, connect, workdir / "checkpoint")
        try:
            _send(endpoint, EVENTS, data.events(events))
            jobs = anyio.run(_run_worker, spark, connect, workdir, datasets, rows)
            _wait_until_empty(endpoint, EVENTS, query)
        finally:
            query.stop()
        summaries = _drain(endpoint, SUMMARIES)
    report_path, plot_path = report.write(spark, workdir, jobs, summaries, events)
    return PipelineResult(jobs, events, summaries, report_path, plot_path)


def _start_stream(spark: SparkSession, connect: BackendConnect, checkpoint: Path) -> StreamingQuery:
    stream = read_leased_queue(spark, connect, EVENTS, visibility_s=30, max_batch=200)
    counts = EventCounts(QueueSink(connect=connect, queue=SUMMARIES, key="key"))
    # stops_quietly: `query.stop()` during a batch ends the query without the JVM's
    # ~1,000-line StackOverflowError (worker.integrations.spark.interruption).
    batches = stream.writeStream.foreachBatch(stops_quietly(counts))
    writer = batches.trigger(processingTime="1 second")
    return writer.option("checkpointLocation", str(checkpoint)).start()


async def _run_worker(
    spark: SparkSession, connect: BackendConnect, workdir: Path, datasets: int, rows: int
) -> list[JobRecord]:
    """Produce the datasets and their messages, and handle them until all are done."""
    app = Worker(
        WorkerConfig(lease=LeaseConfig(visibility_s=VISIBILITY_S), wait_s=1, max_in_flight=2)
    )
    jobs, records, done = SparkJobs(spark), list[JobRecord](), anyio.Event()

    @app.handler(AGGREGATE)
    async def aggregate(message: Message) -> None:
        task = functools.partial(sales_totals, message.body["input"])
        result = await jobs.run(message, task, output=message.body["output"])
        day, lease = int(message.body["day"]), message.lease
        records.append(
            JobRecord(
                day, result.value or 0, result.duration_s, lease.renewals, message.receive_count
            )
        )
        if len(records) == datasets:
            done.set()

    @app.background
    async def produce(context: WorkerContext) -> None:
        for day in range(datasets):
            source = workdir / "inputs" / f"day-{day}.csv"
            await anyio.to_thread.run_sync(
                functools.partial(data.write_sales, source, day=day, rows=rows)
            )
            body = {
                "day": day,
                "input": str(source),
                "output": str(workdir / "totals" / f"day={day}"),
            }
            await context.backend.send(AGGREGATE, [OutgoingMessage(body=json.dumps(body))])
        await done.wait()
        context.request_shutdown()

    backend = await connect()
    try:
        await serve(app, backend)
    finally:
        await backend.aclose()
    return sorted(records, key=lambda record: record.day)


def _send(endpoint: SqsEndpoint, queue: str, bodies: Sequence[str]) -> None:
    async def run() -> None:
        backend = MemoryBackend(endpoint.engine)
        for start in range(0, len(bodies), 10):
            chunk = bodies[start : start + 10]
            await backend.send(
                queue, [OutgoingMessage(body=b, entry_id=str(i)) for i, b in enumerate(chunk)]
            )

    endpoint.portal.call(run)


def _wait_until_empty(
    endpoint: SqsEndpoint, queue: str, query: StreamingQuery, timeout_s: float = 180
) -> None:
    """Until every event was summarized, committed and deleted (the engine has no callback
    for it: an example may poll)."""
    deadline = time.monotonic() + timeout_s
    while True:
        counts = endpoint.call(endpoint.engine.counts, queue)
        if counts.visible == counts.in_flight == 0:
            return
        if query.exception() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the stream did not drain {queue!r}: {counts}")
        time.sleep(0.5)


def _drain(endpoint: SqsEndpoint, queue: str) -> list[dict[str, Any]]:
    async def run() -> list[dict[str, Any]]:
        backend, got = MemoryBackend(endpoint.engine), list[dict[str, Any]]()
        while batch := await backend.receive(queue, max_messages=10, wait_s=0):
            got.extend(json.loads(m.body) for m in batch)
            await backend.delete(
                queue, [Deletion(str(i), m.receipt_handle) for i, m in enumerate(batch)]
            )
        return got

    return endpoint.portal.call(run)
