"""The producer: full batches, retries of failed entries only, checks before any call."""

from __future__ import annotations

import dataclasses
import threading

import anyio
import pytest

from backends.memory import MemoryBackend
from tests.producer.sending import SendingBackend
from worker.envelope.codecs import codec_for
from worker.errors import MessageRejected, SendFailed, TransientBackendError
from worker.sending.outgoing import AttributeValue, Outgoing
from worker.sending.producer import Producer
from worker.sending.sync_producer import SyncProducer
from worker.types import EntryFailure, MessageAttribute, QueueSpec

LOOPTIME = pytest.mark.looptime

SERVICE_FAULT = EntryFailure("", "InternalError", "try again", sender_fault=False)


@dataclasses.dataclass(frozen=True)
class Order:
    id: int


async def _backend(*queues: QueueSpec) -> SendingBackend:
    backend = SendingBackend()
    for spec in queues or (QueueSpec("orders"),):
        await backend.inner.create_queue(spec)
    return backend


@pytest.mark.asyncio
@LOOPTIME
async def test_1000_messages_go_in_100_calls_of_10() -> None:
    backend = await _backend()
    results = await Producer(backend).send_many("orders", (Order(i) for i in range(1000)))
    assert len(backend.calls) == 100
    assert {len(call) for call in backend.calls} == {10}
    assert [r.index for r in results] == list(range(1000))
    assert all(r.ok and r.attempts == 1 and r.message_id for r in results)
    assert backend.inner.engine.counts("orders").visible == 1000
    # Encoded with the codec a handler typed `Order` decodes with.
    codec = codec_for(Order)
    assert codec is not None and codec.decode(backend.calls[3][4]) == Order(34)


@pytest.mark.asyncio
@LOOPTIME
async def test_a_failed_entry_is_retried_alone_after_a_backoff() -> None:
    backend = await _backend()
    backend.entry_failures['{"id":7}'] = [SERVICE_FAULT]
    producer = Producer(backend, backoff_s=0.5)
    results = await producer.send_many("orders", [Order(i) for i in range(25)])
    assert [len(call) for call in backend.calls] == [10, 1, 10, 5]
    assert backend.calls[1] == ['{"id":7}']
    assert results[7].ok and results[7].attempts == 2
    assert sum(r.attempts for r in results) == 26
    assert backend.inner.engine.counts("orders").visible == 25


@pytest.mark.asyncio
@LOOPTIME
async def test_a_sender_fault_is_not_retried_and_send_raises() -> None:
    backend = await _backend()
    refused = EntryFailure("", "InvalidMessageContents", "bad", sender_fault=True)
    backend.entry_failures['"x"'] = [refused]
    results = await Producer(backend).send_many("orders", ["a", '"x"', "b"])
    assert [r.ok for r in results] == [True, False, True]
    assert results[1].failure is not None and results[1].failure.code == "InvalidMessageContents"
    assert len(backend.calls) == 1
    backend.entry_failures["y"] = [SERVICE_FAULT] * 3
    with pytest.raises(SendFailed, match="InternalError"):
        await Producer(backend, max_attempts=3).send("orders", "y")
    assert backend.calls[1:] == [["y"], ["y"], ["y"]]


@pytest.mark.asyncio
@LOOPTIME
async def test_a_transient_whole_call_failure_is_retried_whole() -> None:
    backend = await _backend()
    backend.call_failures.append(TransientBackendError("throttled", operation="SendMessageBatch"))
    results = await Producer(backend).send_many("orders", ["a", "b"])
    assert backend.calls == [["a", "b"], ["a", "b"]]
    assert all(r.ok and r.attempts == 2 for r in results)


@pytest.mark.parametrize(
    ("queue", "item", "reason"),
    [
        ("orders", Outgoing(body="x" * 1_048_577), "1048577 bytes with its attributes, over"),
        ("jobs.fifo", Outgoing(body="x"), "'jobs.fifo' is a FIFO queue: a group_id is required"),
        ("jobs.fifo", Outgoing(body="x", group_id="g", delay_s=5), "no per-message delay_s"),
        ("orders", Outgoing(body="x", deduplication_id="d"), "deduplication_id is for FIFO"),
        ("orders", Outgoing(body="x", delay_s=901), "delay_s=901: must be 0-900"),
        ("orders", Outgoing(body="x", attributes={"ok": True}), "'ok': a bool has no SQS data"),
        ("orders", Outgoing(body=object()), "cannot encode a object as JSON"),
        ("orders", Outgoing(body=""), "an empty body"),
    ],
)
@pytest.mark.asyncio
@LOOPTIME
async def test_bad_input_raises_before_any_call(queue: str, item: Outgoing, reason: str) -> None:
    backend = await _backend(QueueSpec("orders"), QueueSpec("jobs.fifo"))
    fine = Outgoing(body="fine", group_id="g" if queue.endswith(".fifo") else None)
    with pytest.raises(MessageRejected, match=r"^message 2: ") as caught:
        await Producer(backend).send_many(queue, [fine, fine, item])
    assert reason in caught.value.reason
    assert backend.calls == []


@pytest.mark.asyncio
@LOOPTIME
async def test_fifo_ids_attributes_and_delays_reach_the_queue() -> None:
    backend = await _backend(QueueSpec("jobs.fifo"), QueueSpec("orders"))
    producer = Producer(backend, content_deduplication=True)
    for _ in range(2):  # the second is a duplicate by its content's SHA-256
        await producer.send("jobs.fifo", {"n": 1}, group_id="g1")
    await producer.send("jobs.fifo", {"n": 1}, group_id="g1", deduplication_id="other")
    assert backend.inner.engine.counts("jobs.fifo").visible == 2
    attributes: dict[str, AttributeValue] = {"tenant": "acme", "n": 3, "raw": b"\x01"}
    await producer.send("orders", "later", delay_s=60, attributes=attributes)
    assert await backend.inner.receive("orders", max_messages=10, wait_s=0) == []
    await anyio.sleep(60)
    [received] = await backend.inner.receive("orders", max_messages=10, wait_s=0)
    assert dict(received.message_attributes) == {
        "tenant": MessageAttribute("String", string_value="acme"),
        "n": MessageAttribute("Number", string_value="3"),
        "raw": MessageAttribute("Binary", binary_value=b"\x01"),
    }


def test_sync_producer_sends_from_a_thread_with_no_event_loop() -> None:
    async def connect() -> MemoryBackend:
        backend = MemoryBackend()
        await backend.create_queue(QueueSpec("orders"))
        return backend

    counts: list[int] = []
    with SyncProducer(connect) as producer:
        ids = [producer.send("orders", Order(1))]
        worker = threading.Thread(target=lambda: ids.append(producer.send("orders", "b")))
        worker.start()
        worker.join()
        results = producer.send_many("orders", [Order(i) for i in range(12)])
        backend = producer.producer.backend
        assert isinstance(backend, MemoryBackend)

        async def visible() -> int:  # on the producer's loop: the engine's clock is there
            return backend.engine.counts("orders").visible

        counts.append(producer._run(visible))
    assert len(set(ids)) == 2 and all(r.ok for r in results)
    assert counts == [14]
    with pytest.raises(RuntimeError, match="not open"):
        producer.send("orders", "late")
