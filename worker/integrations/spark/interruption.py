"""A micro-batch interrupted by its query's `stop()`, said in one line so that Spark stops
quietly.

::

    @stops_quietly
    def handle_batch(frame: DataFrame, batch_id: int) -> None: ...

    stream.writeStream.foreachBatch(handle_batch).start()

Rules:
- `query.stop()` interrupts the thread that runs the micro-batch. With PySpark's pinned
  threads (the default), a `foreachBatch` function in a Spark call then gets a
  `Py4JJavaError` whose Java exception is an interruption (`InterruptedException`,
  `InterruptedIOException`, `ClosedByInterruptException`), with its whole Java stack: ~6 KB.
- Spark receives the function's traceback as a `Py4JException`, and tells an interruption
  by stop from a failure with a regular expression (`StreamExecution.PROXY_ERROR`,
  `((.|\\r\\n|\\r|\\n)*)` after "Py4JJavaError: An error occurred while calling") that
  recurses once per character: on a few kilobytes the stream thread's stack overflows, and
  the JVM prints a `StackOverflowError` of ~1,000 lines instead of stopping as asked.
- The stop may instead cancel the batch's job first (Spark 4 tags a query's jobs):
  `SparkException: [SPARK_JOB_CANCELLED] Job N cancelled Query [...] was stopped`, which
  Spark's expression does not count as an interruption: the same overflow, now and then.
  It is the same stop, and is said as an interruption too.
- So an interruption is raised again as `BatchInterrupted`, without the chained original
  (`from None`): a traceback of a few lines whose last one is what Spark's expression looks
  for, found at once. Any other error passes unchanged. The batch is not committed either
  way (its messages are delivered again): only the noise goes.
- `QueueSink.write` and `QueueSink.foreach_batch` do this themselves; wrap a `foreachBatch`
  function of your own with `stops_quietly`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from py4j.protocol import Py4JJavaError  # type: ignore[import-untyped]
from pyspark.sql import DataFrame

from worker.errors import LeaseWorkerError

__all__ = ["BatchInterrupted", "interruption_of", "quiet_interruption", "stops_quietly"]

#: The Java exceptions Spark counts as "interrupted" (`StreamExecution.IO_EXCEPTION_NAMES`).
INTERRUPTIONS = (
    "java.lang.InterruptedException",
    "java.io.InterruptedIOException",
    "java.nio.channels.ClosedByInterruptException",
)
_CALLING = "An error occurred while calling "
#: Spark's error class for a job cancelled because its streaming query was stopped.
_CANCELLED_BY_STOP = "[SPARK_JOB_CANCELLED]"

BatchFunction = Callable[[DataFrame, int], None]


class BatchInterrupted(LeaseWorkerError):
    """A micro-batch's Spark call was interrupted: its streaming query is stopping.

    Its text starts as Py4J's own (`py4j.protocol.Py4JJavaError: An error occurred while
    calling <call>: <Java exception>`): that is what Spark looks for to end the query
    quietly (see the module's rules).
    """

    def __init__(self, call: str, java_exception: str) -> None:
        self.call = call
        self.java_exception = java_exception
        super().__init__(
            f"py4j.protocol.Py4JJavaError: {_CALLING}{call}: {java_exception} "
            "(the micro-batch was interrupted: its streaming query is stopping)"
        )


def interruption_of(error: BaseException) -> BatchInterrupted | None:
    """`error` as a `BatchInterrupted` when it is a Spark call's interruption, else None."""
    if not isinstance(error, Py4JJavaError):
        return None
    try:
        text = str(error)  # asks the JVM for the Java stack
    except Exception:
        return None
    name = next((name for name in INTERRUPTIONS if name in text), None)
    head = "\n".join(text.split("\n", 2)[:2])  # the call, then the Java exception's line
    if name is None and _CANCELLED_BY_STOP in head and "was stopped" in head:
        # The stop cancelled the batch's job before it interrupted the thread (Spark 4 tags
        # a query's jobs): the same stop, said with an interruption Spark's check knows.
        name = INTERRUPTIONS[0]
    if name is None:
        return None
    first = text.split("\n", 1)[0]
    call = first.split(_CALLING, 1)[-1].rstrip(".") if _CALLING in first else "Spark"
    return BatchInterrupted(call, name)


@contextmanager
def quiet_interruption() -> Iterator[None]:
    """Raise a Spark call's interruption inside the block as `BatchInterrupted`."""
    try:
        yield
    except Py4JJavaError as error:
        interrupted = interruption_of(error)
        if interrupted is None:
            raise
        raise interrupted from None


def stops_quietly(func: BatchFunction) -> BatchFunction:
    """`func`, a `foreachBatch` function, with its interruption by `query.stop()` raised as
    `BatchInterrupted` (see the module's rules)."""

    @functools.wraps(func)
    def batch(frame: DataFrame, batch_id: int) -> None:
        with quiet_interruption():
            func(frame, batch_id)

    return batch
