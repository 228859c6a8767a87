"""The queue sink: full batches (counted on the wire), FIFO groups and deduplication ids from
columns, per-entry failures retried and reported by row, oversized bodies refused."""

from __future__ import annotations

import functools
import json
from collections import defaultdict
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

pytest.importorskip("pyspark")

from anyio.from_thread import start_blocking_portal
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from backends.memory import MemoryBackend
from backends.serve.sqs import SqsEndpoint, sqs_endpoint_in_thread
from tests.fault_proxy import FaultProxy
from tests.integrations.spark.queues import connect_endpoint, connect_flaky, connector, create
from worker.integrations.spark.sink import (
    OversizedBodyError,
    QueueSink,
    RowFailure,
    SinkError,
    SinkReport,
)
from worker.types import Deletion, QueueSpec

pytestmark = pytest.mark.timeout(120)

ROWS, GROUPS = 10_000, 8


@pytest.fixture(scope="module")
def endpoint() -> Iterator[SqsEndpoint]:
    with sqs_endpoint_in_thread() as running:
        yield running


def _drain(endpoint: SqsEndpoint, queue: str, count: int) -> list[tuple[str | None, int]]:
    """Receive and delete `count` messages, in the order the queue delivers them."""

    async def run() -> list[tuple[str | None, int]]:
        backend, got = MemoryBackend(endpoint.engine), list[tuple[str | None, int]]()
        while len(got) < count:
            batch = await backend.receive(queue, max_messages=10, wait_s=0, visibility_s=60)
            assert batch, f"{len(got)} of {count} messages in {queue}"
            got.extend((m.group_id, json.loads(m.body)["seq"]) for m in batch)
            deletions = [Deletion(str(i), m.receipt_handle) for i, m in enumerate(batch)]
            assert not (await backend.delete(queue, deletions)).failed
        return got

    return endpoint.portal.call(run)


def test_ten_thousand_rows_go_in_full_batches_with_their_fifo_groups(
    spark: SparkSession, endpoint: SqsEndpoint
) -> None:
    queue = "sink.fifo"
    create(endpoint, QueueSpec(queue))
    frame = spark.range(ROWS).select(
        F.format_string('{"seq": %d}', "id").alias("body"),
        (F.col("id") % GROUPS).cast("string").alias("group"),
        F.col("id").cast("string").alias("dedup"),
        F.col("id").alias("seq"),
    )
    # A group's rows in one partition, in order: the sink keeps that order.
    frame = frame.repartition(2, "group").sortWithinPartitions("seq")
    port = urlsplit(endpoint.url).port
    assert port is not None
    with (
        start_blocking_portal() as portal,
        portal.wrap_async_context_manager(FaultProxy.running(port)) as proxy,
    ):
        connect = functools.partial(connect_endpoint, proxy.endpoint_url)
        sink = QueueSink(connect=connect, queue=queue, group_id="group", deduplication_id="dedup")
        report = sink.write(frame)
        calls = proxy.count("SendMessageBatch")
    # Each partition holds whole groups of 1,250 rows: 125 full batches per group.
    assert report == SinkReport(rows=ROWS, sent=ROWS, calls=ROWS // 10)
    assert calls == ROWS // 10
    delivered = _drain(endpoint, queue, ROWS)
    by_group: dict[str | None, list[int]] = defaultdict(list)
    for group, seq in delivered:
        by_group[group].append(seq)
    assert sorted(by_group, key=str) == [str(g) for g in range(GROUPS)]
    for group, seqs in by_group.items():
        assert seqs == list(range(int(str(group)), ROWS, GROUPS))  # all, in order
    print(f"sink: {ROWS} rows in {calls} SendMessageBatch calls")


def test_failed_entries_are_retried_and_the_rest_reported_by_row(
    spark: SparkSession, endpoint: SqsEndpoint
) -> None:
    queue = "sink-retries"
    create(endpoint, QueueSpec(queue))
    marks = {3: "flaky", 17: "flaky", 25: "reject"}
    rows = [(str(n), json.dumps({"seq": n, marks.get(n, "ok"): True})) for n in range(40)]
    frame = spark.createDataFrame(rows, "id string, body string").repartition(2)
    sink = QueueSink(
        connect=functools.partial(connect_flaky, endpoint.url),
        queue=queue,
        key="id",
        backoff_s=0.01,
    )
    with pytest.raises(SinkError, match=r"1 of 40 rows not sent \(row id='25': Invalid") as caught:
        sink.write(frame)
    report = caught.value.report
    assert (report.rows, report.sent, report.retried) == (40, 39, 2)
    assert report.failures == (RowFailure("row id='25'", "InvalidParameterValue", "no"),)
    assert "reject" not in str(caught.value)  # rows are named, bodies never shown
    assert endpoint.call(endpoint.engine.counts, queue).visible == 39


def test_an_oversized_body_is_refused_by_row_before_anything_is_sent(
    spark: SparkSession, endpoint: SqsEndpoint
) -> None:
    queue = "sink-sizes"
    create(endpoint, QueueSpec(queue))
    rows = [(str(n), "x" * (2_000 if n == 7 else 10)) for n in range(20)]
    frame = spark.createDataFrame(rows, "id string, body string")
    keyed = QueueSink(connect=connector(endpoint), queue=queue, key="id", max_body_bytes=1_000)
    with pytest.raises(OversizedBodyError, match=r"over 1,000 bytes or null in row id='7'"):
        keyed.write(frame)
    unkeyed = QueueSink(connect=connector(endpoint), queue=queue, max_body_bytes=1_000)
    with pytest.raises(OversizedBodyError, match=r"in row 7; nothing was sent"):
        unkeyed.write(frame.orderBy(F.col("id").cast("int")))
    assert endpoint.call(endpoint.engine.counts, queue).visible == 0
