"""The streaming source's lease holder on its own (no Spark session): the next batch received
ahead and kept leased, a committed batch deleted in the background, going away.

The engine behind its SQS endpoint on loopback, reached with the real SQS backend; the
holder runs its loop in a thread of its own, as in Spark's source runner. Every wait is a
bounded poll of the engine's exact counts or of the calls it answered."""

from __future__ import annotations

import json
import signal
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Sequence

import anyio
import pytest

pytest.importorskip("pyspark")  # the package's __init__ imports it

from backends.serve.sqs import SqsEndpoint, sqs_endpoint_in_thread
from tests.integrations.spark.queues import connect_endpoint, create, send
from worker.backend import Backend, Limits
from worker.integrations.spark.holder import HolderSettings, LeaseHolder
from worker.types import (
    BatchResult,
    Deletion,
    EntryFailure,
    QueueSpec,
    ReceivedMessage,
    VisibilityChange,
)

pytestmark = pytest.mark.timeout(60)

QUEUE = "ahead"


@pytest.fixture
def endpoint() -> Iterator[SqsEndpoint]:
    with sqs_endpoint_in_thread() as running:
        create(running, QueueSpec(QUEUE, visibility_timeout_s=2))
        yield running


@pytest.fixture(autouse=True)
def sigterm_kept() -> Iterator[None]:
    """The holder sets a SIGTERM handler only where none is set: keep it out of pytest's."""
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    yield
    signal.signal(signal.SIGTERM, previous)


def _settings(max_batch: int) -> HolderSettings:
    return HolderSettings(
        queue=QUEUE,
        max_batch=max_batch,
        visibility_s=2,
        extension_s=2,
        margin_s=0.7,
        wait_s=0.2,
        concurrency=4,
    )


def _calls(endpoint: SqsEndpoint, operation: str) -> int:
    with urllib.request.urlopen(f"{endpoint.url}/_stats", timeout=5) as answer:
        return int(json.load(answer)["requests"].get(operation, 0))


def _eventually(check: Callable[[], bool], timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


def _ids(messages: Sequence[ReceivedMessage]) -> set[str]:
    return {message.message_id for message in messages}


def test_the_next_batch_is_received_ahead_kept_leased_and_released_on_close(
    endpoint: SqsEndpoint,
) -> None:
    sent = send(endpoint, QUEUE, [str(n) for n in range(50)])
    holder = LeaseHolder(lambda: connect_endpoint(endpoint.url), _settings(20), run="r")
    start = holder.ledger.initial()
    first = holder.call(holder.latest, start, None)
    in_first = _ids(holder.call(holder.batch, start, first))
    assert len(in_first) == 20
    # While Spark would run the first batch, the next 20 are received without being asked.
    _eventually(lambda: endpoint.call(endpoint.engine.counts, QUEUE).in_flight == 40)
    # And kept: renewed past their 2 s visibility like the planned ones, none visible again.
    renewals = _calls(endpoint, "ChangeMessageVisibilityBatch")
    _eventually(lambda: _calls(endpoint, "ChangeMessageVisibilityBatch") >= renewals + 4)
    assert endpoint.call(endpoint.engine.counts, QUEUE).in_flight == 40

    receives = _calls(endpoint, "ReceiveMessage")
    holder.call(holder.commit, first)
    second = holder.call(holder.latest, first, None)
    in_second = _ids(holder.call(holder.batch, first, second))
    assert len(in_second) == 20 and not in_second & in_first  # the ones received ahead
    _eventually(
        lambda: all(endpoint.call(endpoint.engine.peek, QUEUE, i) is None for i in in_first)
    )
    _eventually(lambda: endpoint.call(endpoint.engine.counts, QUEUE).in_flight == 30)
    assert _calls(endpoint, "ReceiveMessage") > receives  # the last 10, received ahead again

    holder.close()  # the second batch (never committed) and the 10 ahead: released at once
    counts = endpoint.call(endpoint.engine.counts, QUEUE)
    assert (counts.visible, counts.in_flight) == (30, 0)
    assert {i for i in sent if endpoint.call(endpoint.engine.peek, QUEUE, i)} == set(
        sent
    ) - in_first


class SlowDeletes:
    """A backend whose deletes take 0.5 s: a close comes while they are on the wire."""

    def __init__(self, inner: Backend) -> None:
        self.inner = inner

    @property
    def limits(self) -> Limits:
        return self.inner.limits

    async def receive(self, queue: str, **options: object) -> Sequence[ReceivedMessage]:
        return await self.inner.receive(queue, **options)  # type: ignore[arg-type]

    async def extend(self, queue: str, entries: Sequence[VisibilityChange]) -> BatchResult:
        return await self.inner.extend(queue, entries)

    async def release(self, queue: str, entries: Sequence[VisibilityChange]) -> BatchResult:
        return await self.inner.release(queue, entries)

    async def delete(self, queue: str, entries: Sequence[Deletion]) -> BatchResult:
        await anyio.sleep(0.5)
        return await self.inner.delete(queue, entries)

    async def aclose(self) -> None:
        await self.inner.aclose()


def test_a_close_finishes_the_committed_batchs_deletes_before_releasing(
    endpoint: SqsEndpoint,
) -> None:
    send(endpoint, QUEUE, [str(n) for n in range(30)])
    backends: list[SlowDeletes] = []

    async def connect() -> Backend:
        backends.append(SlowDeletes(await connect_endpoint(endpoint.url)))
        return backends[0]  # type: ignore[return-value]

    holder = LeaseHolder(connect, _settings(20), run="r")
    start = holder.ledger.initial()
    first = holder.call(holder.latest, start, None)
    committed = _ids(holder.call(holder.batch, start, first))
    holder.call(holder.commit, first)  # returns at once: the deletes run in the background
    assert all(endpoint.call(endpoint.engine.peek, QUEUE, i) is not None for i in committed)
    holder.close()
    # Deleted, not released: a committed message handed back would be delivered twice.
    assert all(endpoint.call(endpoint.engine.peek, QUEUE, i) is None for i in committed)
    counts = endpoint.call(endpoint.engine.counts, QUEUE)
    assert (counts.visible, counts.in_flight) == (10, 0)


class RotatingHandles(SlowDeletes):
    """SMQ's rule over the engine: an extension answers a new handle and the old one stops
    working. Extensions take 0.6 s, so that a commit comes while one is on the wire."""

    def __init__(self, inner: Backend) -> None:
        super().__init__(inner)
        self.current: dict[str, str] = {}
        self.extending = threading.Event()

    def _stale(self, handle: str) -> bool:
        return handle != self.current.get(_base(handle), _base(handle))

    async def extend(self, queue: str, entries: Sequence[VisibilityChange]) -> BatchResult:
        self.extending.set()
        await anyio.sleep(0.6)
        fresh = [e for e in entries if not self._stale(e.receipt_handle)]
        inner = [
            VisibilityChange(e.entry_id, _base(e.receipt_handle), e.visibility_s) for e in fresh
        ]
        await self.inner.extend(queue, inner)
        new = {e.entry_id: f"{_base(e.receipt_handle)}#{uuid.uuid4().hex}" for e in fresh}
        for entry in fresh:
            self.current[_base(entry.receipt_handle)] = new[entry.entry_id]
        return BatchResult(succeeded=tuple(new), new_handles=new)

    async def delete(self, queue: str, entries: Sequence[Deletion]) -> BatchResult:
        stale = [e for e in entries if self._stale(e.receipt_handle)]
        fresh = [Deletion(e.entry_id, _base(e.receipt_handle)) for e in entries if e not in stale]
        result = await self.inner.delete(queue, fresh)
        refused = tuple(EntryFailure(e.entry_id, "ReceiptHandleIsInvalid", "old") for e in stale)
        return BatchResult(succeeded=result.succeeded, failed=result.failed + refused)


def _base(handle: str) -> str:
    return handle.split("#")[0]


def test_a_commit_during_a_renewal_deletes_with_the_handle_the_renewal_answered(
    endpoint: SqsEndpoint,
) -> None:
    send(endpoint, QUEUE, [str(n) for n in range(10)])
    backends: list[RotatingHandles] = []

    async def connect() -> Backend:
        backends.append(RotatingHandles(await connect_endpoint(endpoint.url)))
        return backends[0]  # type: ignore[return-value]

    holder = LeaseHolder(connect, _settings(10), run="r")
    start = holder.ledger.initial()
    first = holder.call(holder.latest, start, None)
    committed = _ids(holder.call(holder.batch, start, first))
    assert backends[0].extending.wait(10)  # a renewal round is on the wire (for 0.6 s)
    holder.call(holder.commit, first)
    holder.close()
    # Deleted with the rotated handles: before, the renewal's answer was dropped for a
    # message committed meanwhile, its delete refused, the message delivered again.
    assert all(endpoint.call(endpoint.engine.peek, QUEUE, i) is None for i in committed)


def test_an_idle_queue_costs_one_long_poll_per_offset_request(endpoint: SqsEndpoint) -> None:
    holder = LeaseHolder(lambda: connect_endpoint(endpoint.url), _settings(20), run="r")
    start = holder.ledger.initial()
    before = _calls(endpoint, "ReceiveMessage")
    for _ in range(3):
        assert holder.call(holder.latest, start, None) == start
    holder.close()
    assert _calls(endpoint, "ReceiveMessage") - before == 3  # nothing received ahead
