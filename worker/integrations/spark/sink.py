"""A queue sink for DataFrames: batch writes and streaming `foreachBatch`.

::

    sink = QueueSink(connect, "orders.fifo", group_id="customer", deduplication_id="order_id")
    report = sink.write(frame)                                   # a batch DataFrame
    frame.writeStream.foreachBatch(sink.foreach_batch).start()   # a streaming one

Rules:
- Each partition is sent from its executor, in full batches of the backend's `send_batch`
  (SQS 10): a partition of n rows costs ceil(n / 10) calls when nothing fails.
- A failed entry is a value (`BatchResult`): one the service blames on the sender (bad
  group id, say) is reported at once; any other is retried, up to `attempts` calls in all,
  with a doubling pause. A whole call that fails transiently is retried the same way.
- What still failed is reported by row, never by body: `SinkError` after every partition
  was tried, naming each row by its `key` column (else its partition and position), with
  the service's code. Rows sent are not sent again by the sink; a rerun of a failed write
  sends them again (give FIFO queues a deduplication id column).
- Before anything is sent, rows whose body is null or longer than `max_body_bytes` (UTF-8)
  are looked for, and the write is refused with an error naming them: nothing is sent.
- A streaming query's `stop()` that interrupts a write raises `BatchInterrupted`, a short
  error Spark takes for the stop it is (`worker.integrations.spark.interruption`): the
  query ends quietly, the batch is not committed.
- FIFO: `group_id` and `deduplication_id` name columns. Order within a group is the order
  of its rows in their partition: put a group in one partition, sorted
  (`repartition("group").sortWithinPartitions(...)`). A retried entry may land after later
  rows of its own batch.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import anyio
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from worker.backend import Backend
from worker.errors import LeaseWorkerError, TransientBackendError
from worker.integrations.spark.holder import BackendConnect
from worker.integrations.spark.interruption import quiet_interruption
from worker.types import OutgoingMessage

__all__ = ["OversizedBodyError", "QueueSink", "RowFailure", "SinkError", "SinkReport"]

#: SQS's largest message (1 MiB since 2025), body and attributes together.
SQS_MAX_BYTES = 1_048_576
_SHOWN = 5


@dataclass(frozen=True, slots=True)
class RowFailure:
    """One row that was not sent: which row, and the service's code (never its body)."""

    row: str
    code: str
    message: str = ""


@dataclass(frozen=True, slots=True)
class SinkReport:
    """What a write did, summed over its partitions."""

    rows: int = 0
    sent: int = 0
    #: Send calls made, retries included.
    calls: int = 0
    #: Entries sent again after a failure of their own or of their whole call.
    retried: int = 0
    failures: tuple[RowFailure, ...] = ()

    def __add__(self, other: SinkReport) -> SinkReport:
        return SinkReport(
            rows=self.rows + other.rows,
            sent=self.sent + other.sent,
            calls=self.calls + other.calls,
            retried=self.retried + other.retried,
            failures=self.failures + other.failures,
        )


class SinkError(LeaseWorkerError):
    """Rows that could not be sent; `report` says what was."""

    def __init__(self, report: SinkReport) -> None:
        self.report = report
        shown = "; ".join(f"{f.row}: {f.code}" for f in report.failures[:_SHOWN])
        more = len(report.failures) - _SHOWN
        super().__init__(
            f"{len(report.failures)} of {report.rows} rows not sent ({shown}"
            f"{f'; and {more} more' if more > 0 else ''}); {report.sent} sent"
        )


class OversizedBodyError(LeaseWorkerError, ValueError):
    """Rows whose body is null or too large; nothing was sent."""

    def __init__(self, rows: list[str], limit: int) -> None:
        self.rows = rows
        super().__init__(
            f"refused: body over {limit:,} bytes or null in {', '.join(rows)}; nothing was sent"
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueSink:
    """Sends a DataFrame's rows to `queue`, one message per row (see the module's rules)."""

    connect: BackendConnect = field(repr=False)
    queue: str
    body: str = "body"
    group_id: str | None = None
    deduplication_id: str | None = None
    #: A column that names a row in errors (an id: never the body).
    key: str | None = None
    max_body_bytes: int = SQS_MAX_BYTES
    attempts: int = 4
    backoff_s: float = 0.2

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"attempts must be >= 1, got {self.attempts}")
        if self.max_body_bytes < 1:
            raise ValueError(f"max_body_bytes must be >= 1, got {self.max_body_bytes}")

    def write(self, frame: DataFrame) -> SinkReport:
        """Send every row; the report, or `SinkError` when some rows could not be sent
        (`BatchInterrupted` when a streaming query's stop interrupts it)."""
        with quiet_interruption():  # worker.integrations.spark.interruption
            self._refuse_oversized(frame)
            columns = [self.body, self.group_id, self.deduplication_id, self.key]
            chosen = frame.select(*[F.col(c) if c else F.lit(None) for c in columns])
            send = functools.partial(_send_partition, self)
            reports = chosen.rdd.mapPartitionsWithIndex(send).collect()
        report = sum(reports, SinkReport())
        if report.failures:
            raise SinkError(report)
        return report

    def foreach_batch(self, frame: DataFrame, batch_id: int) -> None:
        """For `writeStream.foreachBatch`: a failed send fails the micro-batch."""
        self.write(frame)

    def _refuse_oversized(self, frame: DataFrame) -> None:
        bad: Column = F.col(self.body).isNull() | (
            F.octet_length(F.col(self.body)) > self.max_body_bytes
        )
        if self.key is not None:
            found = frame.where(bad).select(self.key).limit(_SHOWN).collect()
            names = [f"row {self.key}={row[0]!r}" for row in found]
        else:  # positions are counted only when there is something to report
            indexed = frame.select(bad.alias("bad")).rdd.zipWithIndex()
            positions = indexed.filter(lambda pair: bool(pair[0][0])).take(_SHOWN)
            names = [f"row {index}" for _, index in positions]
        if names:
            raise OversizedBodyError(names, self.max_body_bytes)


Row = tuple[str, str | None, str | None, object]


def _send_partition(sink: QueueSink, index: int, rows: Iterable[Row]) -> Iterator[SinkReport]:
    """On an executor: send one partition's rows; its report."""
    yield anyio.run(_send_rows, sink, index, rows)


async def _send_rows(sink: QueueSink, partition: int, rows: Iterable[Row]) -> SinkReport:
    backend = await sink.connect()
    report = SinkReport()
    try:
        size = backend.limits.send_batch
        batch: list[tuple[str, OutgoingMessage]] = []
        for position, (body, group, dedup, key) in enumerate(rows):
            name = (
                f"row {sink.key}={key!r}" if sink.key else f"partition {partition} row {position}"
            )
            outgoing = OutgoingMessage(
                body=body, entry_id=str(len(batch)), group_id=group, deduplication_id=dedup
            )
            batch.append((name, outgoing))
            if len(batch) == size:
                report += await _send_batch(sink, backend, batch)
                batch = []
        if batch:
            report += await _send_batch(sink, backend, batch)
    finally:
        await backend.aclose()
    return report


async def _send_batch(
    sink: QueueSink, backend: Backend, batch: list[tuple[str, OutgoingMessage]]
) -> SinkReport:
    """One batch, with its failed entries retried (see the rules)."""
    pending, failures, calls, retried = batch, list[RowFailure](), 0, 0
    last: list[RowFailure] = []
    for attempt in range(sink.attempts):
        if attempt:
            retried += len(pending)
            await anyio.sleep(sink.backoff_s * 2 ** (attempt - 1))
        calls += 1
        try:
            result = await backend.send(sink.queue, [message for _, message in pending])
        except TransientBackendError as error:
            last = [RowFailure(name, type(error).__name__) for name, _ in pending]
            continue
        again, last = [], []
        for name, message in pending:
            failure = result.failure(message.entry_id)
            if failure is None:
                continue
            if failure.sender_fault:  # it would fail again: reported at once
                failures.append(RowFailure(name, failure.code, failure.message[:200]))
            else:
                again.append((name, message))
                last.append(RowFailure(name, failure.code, failure.message[:200]))
        pending = again
        if not pending:
            break
    else:
        failures.extend(last)
    return SinkReport(
        rows=len(batch),
        sent=len(batch) - len(failures),
        calls=calls,
        retried=retried,
        failures=tuple(failures),
    )
