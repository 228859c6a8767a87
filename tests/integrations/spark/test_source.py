"""The leased streaming source: leases held across Spark's calls, deletes only on commit,
at least once across a failed micro-batch and a restart from the checkpoint.

Real Spark, real processes, the engine behind its SQS endpoint; real time, every wait
bounded (`_eventually` polls the engine's exact counts, which have no callback)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession

from backends.serve.sqs import SqsEndpoint, sqs_endpoint_in_thread
from tests.integrations.spark.queues import connector, create, send
from worker.integrations.spark.source import read_leased_queue
from worker.types import QueueSpec

pytestmark = pytest.mark.timeout(150)

QUEUE = "events"
VISIBILITY_S = 3
SLOW_SINK_S = 4.0  # longer than the visibility: the leases must be renewed meanwhile


@pytest.fixture(scope="module")
def endpoint() -> Iterator[SqsEndpoint]:
    with sqs_endpoint_in_thread() as running:
        yield running


class Sink:
    """A foreachBatch sink that records what it finished, fails batches on demand, and
    takes its time over the first batch."""

    def __init__(self, *, fail_from: int | None) -> None:
        self.fail_from = fail_from
        self.finished: list[tuple[str, int, int]] = []  # (message id, n, receive count)
        self.changed = threading.Condition()
        self.slow_once = True

    def __call__(self, frame: DataFrame, batch_id: int) -> None:
        rows = [(r.message_id, json.loads(r.body)["n"], r.receive_count) for r in frame.collect()]
        if self.fail_from is not None and any(n >= self.fail_from for _, n, _ in rows):
            raise RuntimeError("injected failure of one micro-batch")
        if rows and self.slow_once:
            self.slow_once = False
            time.sleep(SLOW_SINK_S)  # stands for a slow write
        with self.changed:
            self.finished.extend(rows)
            self.changed.notify_all()

    def wait_for(self, count: int, timeout_s: float = 60) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: len(self.finished) >= count, timeout_s), (
                f"{len(self.finished)} of {count} rows reached the sink"
            )


def _start(spark: SparkSession, endpoint: SqsEndpoint, sink: Sink, checkpoint: Path) -> object:
    frame = read_leased_queue(
        spark, connector(endpoint), QUEUE, visibility_s=VISIBILITY_S, wait_s=0.2
    )
    writer = frame.writeStream.foreachBatch(sink).trigger(processingTime="200 milliseconds")
    return writer.option("checkpointLocation", str(checkpoint)).start()


def _eventually(check: Callable[[], bool], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.1)


def test_at_least_once_across_a_failed_batch_and_a_restart(
    spark: SparkSession, endpoint: SqsEndpoint, tmp_path: Path
) -> None:
    create(endpoint, QueueSpec(QUEUE, visibility_timeout_s=VISIBILITY_S))
    first = send(endpoint, QUEUE, [json.dumps({"n": n}) for n in range(10)])
    checkpoint = tmp_path / "checkpoint"

    failing = Sink(fail_from=10)
    query = _start(spark, endpoint, failing, checkpoint)
    failing.wait_for(10)
    # Held by the runner across its calls, renewed while the sink took 4 s with a 3 s
    # visibility: each message reached the sink once, on its first receive.
    assert sorted(n for _, n, _ in failing.finished) == list(range(10))
    assert {count for _, _, count in failing.finished} == {1}

    second = send(endpoint, QUEUE, [json.dumps({"n": n}) for n in range(10, 20)])
    with pytest.raises(StreamingQueryException, match="injected failure"):
        query.awaitTermination(60)  # type: ignore[attr-defined]
    # Committed (the first ten) are deleted; the failed batch's ten are not.
    assert [endpoint.call(endpoint.engine.peek, QUEUE, i) for i in first] == [None] * 10
    assert all(endpoint.call(endpoint.engine.peek, QUEUE, i) is not None for i in second)
    # Released when Spark stopped the runner (SIGTERM): visible again well before their
    # leases, renewed a second (the margin) or more ahead, could have lapsed.
    _eventually(lambda: endpoint.call(endpoint.engine.counts, QUEUE).visible == 10, 0.8)
    counts = endpoint.call(endpoint.engine.counts, QUEUE)
    assert (counts.visible, counts.in_flight) == (10, 0)

    resumed = Sink(fail_from=None)
    resumed.slow_once = False
    query = _start(spark, endpoint, resumed, checkpoint)
    try:
        resumed.wait_for(10)
        delivered = {n for _, n, _ in failing.finished + resumed.finished}
        assert delivered == set(range(20))  # every message, at least once
        assert {i for i, _, _ in resumed.finished} == set(second)
        _eventually(lambda: endpoint.call(endpoint.engine.counts, QUEUE).in_flight == 0)
    finally:
        query.stop()  # type: ignore[attr-defined]
    counts = endpoint.call(endpoint.engine.counts, QUEUE)
    assert (counts.visible, counts.in_flight) == (0, 0)  # all committed, all deleted
