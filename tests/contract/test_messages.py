"""Contract: sending, receiving, long polling, queue attributes, unknown queues."""

from __future__ import annotations

import uuid

import anyio
import pytest

from tests.contract import (
    ContractBackend,
    MakeQueue,
    receive_one,
    receive_until,
    release,
    send_bodies,
)
from worker.errors import FatalBackendError, QueueNotFound
from worker.types import MessageAttribute, OutgoingMessage, QueueSpec, RedrivePolicy

pytestmark = pytest.mark.asyncio


async def test_round_trip_keeps_body_and_attributes(
    backend: ContractBackend, make_queue: MakeQueue
) -> None:
    queue = await make_queue()
    attributes = {
        "kind": MessageAttribute("String", string_value="invoice"),
        "n": MessageAttribute("Number", string_value="42"),
        "raw": MessageAttribute("Binary", binary_value=b"\x00\xff"),
    }
    sent = await backend.send(
        queue, [OutgoingMessage(body="héllo {}", entry_id="a", message_attributes=attributes)]
    )
    assert sent.succeeded == ("a",) and not sent.failed

    first = await receive_one(backend, queue)
    assert first.message_id == sent.message_ids["a"]
    assert first.queue == queue
    assert first.body == "héllo {}"
    assert dict(first.message_attributes) == attributes
    assert first.receive_count == 1
    assert first.attributes["ApproximateReceiveCount"] == "1"
    assert first.attributes["SentTimestamp"].isdigit()
    assert all(isinstance(v, str) for v in first.attributes.values())
    assert first.group_id is None

    await release(backend, queue, first)
    second = await receive_one(backend, queue)
    assert second.message_id == first.message_id
    assert second.receive_count == 2
    assert second.receipt_handle != first.receipt_handle


async def test_receive_returns_at_most_max_messages(
    backend: ContractBackend, make_queue: MakeQueue
) -> None:
    queue = await make_queue()
    await send_bodies(backend, queue, *(f"b{i}" for i in range(5)))
    got = await backend.receive(queue, max_messages=2, wait_s=2)
    assert 1 <= len(got) <= 2
    rest = await receive_until(backend, queue, 5 - len(got))
    assert sorted(m.body for m in [*got, *rest]) == [f"b{i}" for i in range(5)]


async def test_receive_bounds_are_checked(backend: ContractBackend, make_queue: MakeQueue) -> None:
    queue = await make_queue()
    refused = (ValueError, FatalBackendError)  # checked before the call, or by the service
    with pytest.raises(refused):
        await backend.receive(queue, max_messages=backend.limits.receive_batch + 1, wait_s=0)
    with pytest.raises(refused):
        await backend.receive(queue, max_messages=0, wait_s=0)


async def test_long_poll_returns_when_a_message_arrives(
    backend: ContractBackend, make_queue: MakeQueue
) -> None:
    queue = await make_queue()
    start = anyio.current_time()
    async with anyio.create_task_group() as tg:

        async def send_later() -> None:
            await anyio.sleep(0.5)
            await send_bodies(backend, queue, "late")

        tg.start_soon(send_later)
        got = await backend.receive(queue, max_messages=10, wait_s=10)
    elapsed = anyio.current_time() - start
    assert [m.body for m in got] == ["late"]
    assert 0.5 <= elapsed < 5, elapsed


async def test_empty_long_poll_waits_then_returns_nothing(
    backend: ContractBackend, make_queue: MakeQueue
) -> None:
    queue = await make_queue()
    start = anyio.current_time()
    assert list(await backend.receive(queue, max_messages=10, wait_s=1)) == []
    assert anyio.current_time() - start >= 0.9


async def test_delayed_message_arrives_after_its_delay(
    backend: ContractBackend, make_queue: MakeQueue
) -> None:
    queue = await make_queue()
    await backend.send(queue, [OutgoingMessage(body="later", delay_s=2)])
    assert list(await backend.receive(queue, max_messages=1, wait_s=0)) == []
    message = await receive_one(backend, queue, wait_s=5)
    assert message.body == "later"


async def test_queue_info(backend: ContractBackend, make_queue: MakeQueue) -> None:
    dlq = await make_queue()
    queue = await make_queue(visibility_timeout_s=45, redrive=RedrivePolicy(dlq, 3))
    info = await backend.queue_info(queue)
    assert info.name == queue
    assert info.visibility_timeout_s == 45
    assert info.redrive == RedrivePolicy(dead_letter_queue=dlq, max_receive_count=3)
    assert not info.fifo
    assert info.delay_s == 0

    fifo = await make_queue(fifo=True)
    assert (await backend.queue_info(fifo)).fifo


async def test_create_queue_is_idempotent(backend: ContractBackend, make_queue: MakeQueue) -> None:
    queue = await make_queue()
    first = (await backend.queue_info(queue)).url
    again = await backend.create_queue(QueueSpec(queue))
    assert again == first


async def test_unknown_queue_is_queue_not_found(backend: ContractBackend) -> None:
    missing = f"contract-missing-{uuid.uuid4().hex[:12]}"
    with pytest.raises(QueueNotFound) as caught:
        await backend.receive(missing, max_messages=1, wait_s=0)
    assert caught.value.queue == missing
    with pytest.raises(QueueNotFound):
        await backend.queue_info(missing)
    with pytest.raises(QueueNotFound):
        await backend.send(missing, [OutgoingMessage(body="x")])


async def test_deleted_queue_is_gone(backend: ContractBackend, make_queue: MakeQueue) -> None:
    queue = await make_queue()
    await backend.delete_queue(queue)
    with pytest.raises(QueueNotFound):
        await backend.queue_info(queue)


async def test_purge_empties_the_queue(backend: ContractBackend, make_queue: MakeQueue) -> None:
    queue = await make_queue()
    await send_bodies(backend, queue, "a", "b")
    await backend.purge(queue)
    assert list(await backend.receive(queue, max_messages=10, wait_s=1)) == []


async def test_queue_info_counts(backend: ContractBackend, make_queue: MakeQueue) -> None:
    queue = await make_queue()
    await send_bodies(backend, queue, "a", "b", "c")
    await backend.send(queue, [OutgoingMessage(body="later", delay_s=60)])
    await receive_one(backend, queue)
    info = await backend.queue_info(queue)
    assert (info.approximate_visible, info.approximate_in_flight) == (2, 1)
    assert info.approximate_delayed == 1
