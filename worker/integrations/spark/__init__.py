"""Spark through PySpark: jobs under lease, a leased streaming source, a queue sink.

Install with the `[spark]` extra (pyspark >= 4.0, pyarrow; a Java 17+ runtime). Nothing in
`worker` or `backends` imports this package; an application does:

- `spark_session()`: the process's one SparkSession (local[*] unless `SPARK_MASTER` or
  `master=` names a cluster; the worker is then the driver).
- `SparkJobs(spark).run(message, job, output=...)`: a job for a message, in a thread, its
  lease renewed meanwhile; cancelled in Spark (job tags) with its handler; output committed
  by one rename.
- `read_leased_queue(spark, connect, queue)`: a streaming DataFrame of a queue whose
  messages stay leased until Spark commits their micro-batch, then are deleted.
- `QueueSink(connect=..., queue=...)`: a DataFrame's rows sent as messages in full batches.
- `stops_quietly(func)`: a `foreachBatch` function of your own, stopped by `query.stop()`
  without the JVM's ~1,000-line `StackOverflowError` (`BatchInterrupted`).

`connect` is a picklable zero-argument async callable that opens a `worker.Backend` in
Spark's Python processes (`BackendConnect`).
"""

from worker.integrations.spark.holder import BackendConnect
from worker.integrations.spark.interruption import BatchInterrupted, stops_quietly
from worker.integrations.spark.jobs import JobContext, JobResult, SparkJobs
from worker.integrations.spark.output import StagedOutput
from worker.integrations.spark.session import spark_session
from worker.integrations.spark.sink import (
    OversizedBodyError,
    QueueSink,
    RowFailure,
    SinkError,
    SinkReport,
)
from worker.integrations.spark.source import (
    LeasedQueueSource,
    leased_queue_source,
    read_leased_queue,
)

__all__ = (
    "BackendConnect",
    "BatchInterrupted",
    "JobContext",
    "JobResult",
    "LeasedQueueSource",
    "OversizedBodyError",
    "QueueSink",
    "RowFailure",
    "SinkError",
    "SinkReport",
    "SparkJobs",
    "StagedOutput",
    "leased_queue_source",
    "read_leased_queue",
    "spark_session",
    "stops_quietly",
)
