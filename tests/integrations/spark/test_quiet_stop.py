"""`query.stop()` while a micro-batch's foreachBatch function runs a Spark job ends the query
quietly: no JVM `StackOverflowError`.

Why it did not: with PySpark's pinned threads, the stop interrupts the batch's job, the
function raises `Py4JJavaError` (java.lang.InterruptedException with its whole Java stack,
~6 KB), and the JVM receives it as a `Py4JException` holding the Python traceback. Spark
decides whether that is "interrupted by stop" with a regex, `((.|\\r\\n|\\r|\\n)*)`, that
recurses once per character (`StreamExecution.PROXY_ERROR`): on a message that long the
stream thread's stack overflows and the JVM prints ~1,000 lines. The queue sink's
`foreach_batch` and `stops_quietly(func)` turn the interruption into a short
`BatchInterrupted`, which Spark's regex matches at once: the query stops as asked.

The JVM's `System.err` (where an uncaught thread error is printed) is captured around the
stop (`tests.integrations.spark.jvm`).
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterator

import anyio
import pytest

pytest.importorskip("pyspark")

from pyspark.sql import DataFrame, SparkSession

from backends.serve.sqs import SqsEndpoint, sqs_endpoint_in_thread
from tests.integrations.spark.jvm import jvm_stderr
from tests.integrations.spark.queues import connect_endpoint, create
from worker.backend import Backend
from worker.integrations.spark.sink import QueueSink
from worker.types import QueueSpec

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def endpoint() -> Iterator[SqsEndpoint]:
    with sqs_endpoint_in_thread() as running:
        create(running, QueueSpec("stopped"))
        yield running


async def connect_slowly(url: str, delay_s: float) -> Backend:
    """On an executor: a backend that takes `delay_s` to open (a slow network)."""
    await anyio.sleep(delay_s)
    return await connect_endpoint(url)


def _stop_mid_batch(spark: SparkSession, batch: Callable[[DataFrame, int], None]) -> str:
    """Start a rate stream through `batch`, stop it while a batch's job runs; what the JVM
    printed on System.err meanwhile (an uncaught error of the stream thread lands there)."""
    stream = spark.readStream.format("rate").option("rowsPerSecond", 20).load()
    query = stream.writeStream.foreachBatch(batch).trigger(processingTime="1 second").start()
    tracker = spark.sparkContext.statusTracker()
    deadline = time.monotonic() + 60
    while not tracker.getActiveJobsIds():  # no callback in PySpark: bounded polling
        assert time.monotonic() < deadline, "no batch job started"
        time.sleep(0.05)
    time.sleep(0.5)  # well inside the job (each task takes seconds)
    with jvm_stderr(spark) as printed:
        query.stop()
    assert query.exception() is None
    assert not query.isActive
    return printed.text


def test_stopping_a_query_in_the_sinks_batch_prints_no_stack_overflow(
    spark: SparkSession, endpoint: SqsEndpoint
) -> None:
    sink = QueueSink(
        connect=functools.partial(connect_slowly, endpoint.url, 5.0),
        queue="stopped",
        body="body",
    )

    def bodies(frame: DataFrame, batch_id: int) -> None:
        sink.foreach_batch(frame.selectExpr("CAST(value AS STRING) AS body"), batch_id)

    printed = _stop_mid_batch(spark, bodies)
    assert "StackOverflowError" not in printed
    assert printed == ""


def test_stops_quietly_wraps_a_foreach_batch_function_of_ones_own(spark: SparkSession) -> None:
    from worker.integrations.spark import stops_quietly

    started = threading.Event()

    def slow(_: object) -> None:
        time.sleep(5)

    @stops_quietly
    def count_slowly(frame: DataFrame, batch_id: int) -> None:
        started.set()
        frame.rdd.foreach(slow)

    printed = _stop_mid_batch(spark, count_slowly)
    assert started.is_set()
    assert "StackOverflowError" not in printed
    assert printed == ""
