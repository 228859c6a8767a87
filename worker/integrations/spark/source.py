"""A streaming source that reads a queue under leases (PySpark's Python Data Source API).

::

    events = read_leased_queue(spark, connect, "events", visibility_s=60)
    events.writeStream.foreachBatch(...).trigger(processingTime="1 second").start()

`connect` is a picklable zero-argument async callable opening a `Backend` (it runs in
Spark's source runner process, not the caller's): SQS through `backends.connect("sqs",
...)`, or the in-memory engine behind its SQS endpoint (`backends.serve.sqs`).

Delivery is **at least once**:
- A micro-batch's messages keep their leases, renewed in the runner process, until Spark
  commits the batch; then, and only then, they are deleted. Spark commits batch N when it
  plans batch N+1, after the sink finished N; on an idle queue the source moves its offset
  once more (an empty batch) so that the last batch is committed too.
- A failing batch ends the query; Spark stops the runner with SIGTERM and the source
  releases what it holds (visible again at once). Were it killed instead, the messages come
  back when their last renewal runs out (at most `extension_s`).
- A restart from the checkpoint replays the failed batch's offset range. Its messages cannot
  be named again (receipt handles and the old process are gone), so the range is served with
  the messages the queue delivers now, which include the released ones. A message whose
  batch reached the sink but whose delete was lost (crash between the sink and the commit)
  is delivered again: make the sink idempotent on `message_id`.
- Order is the queue's: none on a standard queue; on a FIFO queue a group's messages arrive
  in order within a batch, and a failed batch's group comes back in order.

Options (all strings, as Spark passes them): `queue` (required), `max_batch` (messages per
micro-batch, 10000), `visibility_s` (30), `extension_s` (= `visibility_s`),
`renew_margin_s` (a third of `extension_s`, at most 10), `wait_s` (long poll per
`latestOffset` when nothing was received ahead, 1), `rows_per_partition` (5000),
`concurrency` (SQS calls at once receiving ahead and deleting, 4). Use a processing-time
trigger: with the default trigger an idle query asks for new offsets ~70 times a second.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, ClassVar

import pyarrow as pa  # type: ignore[import-untyped]
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.types import IntegerType, StringType, StructField, StructType

from worker.errors import ConfigError
from worker.integrations.spark.holder import BackendConnect, HolderSettings, LeaseHolder
from worker.integrations.spark.ledger import Offset
from worker.types import ReceivedMessage

__all__ = ["LeasedQueueSource", "leased_queue_source", "read_leased_queue"]

SCHEMA = StructType(
    [
        StructField("message_id", StringType(), nullable=False),
        StructField("queue", StringType(), nullable=False),
        StructField("body", StringType(), nullable=False),
        StructField("receive_count", IntegerType(), nullable=False),
        StructField("group_id", StringType(), nullable=True),
    ]
)
#: SCHEMA in Arrow's terms, as Spark checks a `RecordBatch` that `read` yields against it.
ARROW_SCHEMA = pa.schema(
    [
        pa.field("message_id", pa.string(), nullable=False),
        pa.field("queue", pa.string(), nullable=False),
        pa.field("body", pa.string(), nullable=False),
        pa.field("receive_count", pa.int32(), nullable=False),
        pa.field("group_id", pa.string(), nullable=True),
    ]
)


class MessageRows(InputPartition):
    """One partition of a micro-batch: its rows as columns (`read` runs elsewhere, and makes
    them one Arrow `RecordBatch`: no Python object per row on either side)."""

    def __init__(self, messages: Sequence[ReceivedMessage]) -> None:
        super().__init__(len(messages))
        self.columns = (
            [m.message_id for m in messages],
            [m.queue for m in messages],
            [m.body for m in messages],
            [m.receive_count for m in messages],
            [m.group_id for m in messages],
        )

    def record_batch(self) -> pa.RecordBatch:
        fields = zip(self.columns, ARROW_SCHEMA, strict=True)
        arrays = [pa.array(column, type=field.type) for column, field in fields]
        return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)


class LeasedQueueReader(DataSourceStreamReader):
    """Control methods run in Spark's source runner process, which holds the leases."""

    def __init__(self, connect: BackendConnect, settings: HolderSettings, rows: int) -> None:
        self._connect = connect
        self._settings = settings
        self._rows_per_partition = rows
        self._holder: LeaseHolder | None = None

    def __getstate__(self) -> dict[str, Any]:
        # `read` runs on a pickled copy in an executor: it needs nothing but the partition.
        return {"_rows_per_partition": self._rows_per_partition}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._rows_per_partition = state["_rows_per_partition"]
        self._holder = None

    def _held(self) -> LeaseHolder:
        if self._holder is None:
            self._holder = LeaseHolder(self._connect, self._settings, run=uuid.uuid4().hex)
            self._holder.start()
        return self._holder

    def initialOffset(self) -> dict[str, Any]:
        return self._held().ledger.initial()

    def latestOffset(self, start: Offset | None = None, limit: object = None) -> dict[str, Any]:
        holder = self._held()
        most = getattr(limit, "max_rows", None)  # ReadMaxRows (Spark >= 4.2)
        result: Offset = holder.call(holder.latest, start, most)
        return result

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        holder = self._held()
        messages: list[ReceivedMessage] = holder.call(holder.batch, start, end)
        size = self._rows_per_partition
        return [MessageRows(messages[i : i + size]) for i in range(0, len(messages), size)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, MessageRows)
        return iter([partition.record_batch()])

    def commit(self, end: dict[str, Any]) -> None:
        holder = self._held()
        holder.call(holder.commit, end)

    def stop(self) -> None:
        if self._holder is not None:
            self._holder.close()


class LeasedQueueSource(DataSource):
    """Bind a backend with `leased_queue_source(connect)`; this class alone has none."""

    connect: ClassVar[BackendConnect | None] = None

    @classmethod
    def name(cls) -> str:
        return "leased_queue"

    def schema(self) -> StructType:
        return SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        connect = type(self).connect
        if connect is None:
            raise ConfigError("leased_queue: register leased_queue_source(connect), not the base")
        settings, rows = _settings(self.options)
        return LeasedQueueReader(connect, settings, rows)


def leased_queue_source(connect: BackendConnect) -> type[LeasedQueueSource]:
    """A `LeasedQueueSource` bound to `connect` (pickled with the class, by value)."""
    return type("LeasedQueueSource", (LeasedQueueSource,), {"connect": staticmethod(connect)})


def read_leased_queue(
    spark: SparkSession, connect: BackendConnect, queue: str, **options: object
) -> DataFrame:
    """Register the source bound to `connect` and answer a streaming DataFrame of `queue`."""
    spark.dataSource.register(leased_queue_source(connect))
    reader = spark.readStream.format(LeasedQueueSource.name()).option("queue", queue)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def _settings(options: Mapping[str, str]) -> tuple[HolderSettings, int]:
    queue = options.get("queue")
    if not queue:
        raise ConfigError("leased_queue: option 'queue' is required")
    visibility = _number(options, "visibility_s", 30, low=1, high=43_200)
    extension = _number(options, "extension_s", visibility, low=1, high=43_200)
    margin = _number(options, "renew_margin_s", min(10, extension / 3), low=0.1, high=extension)
    if margin >= min(visibility, extension):
        raise ConfigError(
            f"leased_queue: renew_margin_s={margin} must be < visibility_s and extension_s"
        )
    settings = HolderSettings(
        queue=queue,
        max_batch=int(_number(options, "max_batch", 10_000, low=1, high=1_000_000)),
        visibility_s=int(visibility),
        extension_s=int(extension),
        margin_s=margin,
        wait_s=_number(options, "wait_s", 1, low=0, high=20),
        concurrency=int(_number(options, "concurrency", 4, low=1, high=64)),
    )
    return settings, int(_number(options, "rows_per_partition", 5000, low=1, high=1_000_000))


def _number(
    options: Mapping[str, str], name: str, default: float, *, low: float, high: float
) -> float:
    raw = options.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"leased_queue: option {name}={raw!r} is not a number") from None
    if not low <= value <= high:
        raise ConfigError(f"leased_queue: option {name}={raw!r} must be in [{low}, {high}]")
    return value
