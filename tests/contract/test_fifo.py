"""Contract: FIFO queues. Order within a group, a group blocked while in flight, deduplication."""

from __future__ import annotations

import pytest

from tests.contract import (
    ContractBackend,
    MakeQueue,
    delete_all,
    receive_one,
    receive_until,
    release,
    send_bodies,
)
from worker.types import Deletion, OutgoingMessage

pytestmark = pytest.mark.asyncio


async def test_order_within_a_group(backend: ContractBackend, make_queue: MakeQueue) -> None:
    queue = await make_queue(fifo=True, content_based_deduplication=True)
    bodies = [f"step-{i}" for i in range(6)]
    await send_bodies(backend, queue, *bodies[:3], group_id="g")
    await send_bodies(backend, queue, *bodies[3:], group_id="g")

    seen: list[str] = []
    for _ in range(len(bodies)):
        got = await backend.receive(queue, max_messages=10, wait_s=2)
        assert got, f"group stalled after {seen}"
        assert all(m.group_id == "g" for m in got)
        seen.extend(m.body for m in got)
        await delete_all(backend, queue, got)
        if len(seen) == len(bodies):
            break
    assert seen == bodies


async def test_a_group_is_blocked_while_one_of_its_messages_is_in_flight(
    backend: ContractBackend, make_queue: MakeQueue
) -> None:
    queue = await make_queue(fifo=True, content_based_deduplication=True)
    await send_bodies(backend, queue, "a1", "a2", group_id="a")
    await send_bodies(backend, queue, "b1", group_id="b")

    head = await receive_one(backend, queue, wait_s=2)
    blocked = head.group_id
    first_of = {"a": "a1", "b": "b1"}
    assert blocked is not None and head.body == first_of[blocked]

    others = await backend.receive(queue, max_messages=10, wait_s=2)
    assert others, "the other group should proceed"
    assert all(m.group_id != blocked for m in others), [m.body for m in others]
    assert others[0].body == first_of["b" if blocked == "a" else "a"]
    assert list(await backend.receive(queue, max_messages=10, wait_s=0)) == []

    # Settling the head unblocks its group, in order.
    result = await backend.delete(queue, [Deletion("h", head.receipt_handle)])
    assert result.succeeded == ("h",)
    if blocked == "a":
        nxt = await receive_one(backend, queue, wait_s=2)
        assert nxt.body == "a2"


async def test_released_message_comes_back_first_in_its_group(
    backend: ContractBackend, make_queue: MakeQueue
) -> None:
    queue = await make_queue(fifo=True, content_based_deduplication=True)
    await send_bodies(backend, queue, "x1", "x2", group_id="x")
    head = await receive_one(backend, queue, wait_s=2)
    assert head.body == "x1"
    await release(backend, queue, head)
    again = await receive_one(backend, queue, wait_s=2)
    assert again.body == "x1" and again.receive_count == 2


async def test_deduplication(backend: ContractBackend, make_queue: MakeQueue) -> None:
    queue = await make_queue(fifo=True, content_based_deduplication=True)
    for _ in range(2):
        sent = await backend.send(
            queue,
            [
                OutgoingMessage(body="same body", entry_id="c", group_id="g1"),
                OutgoingMessage(
                    body="explicit", entry_id="e", group_id="g2", deduplication_id="dedup-1"
                ),
            ],
        )
        assert sorted(sent.succeeded) == ["c", "e"], sent
    explicit_again = await backend.send(
        queue,
        [OutgoingMessage(body="other body", group_id="g2", deduplication_id="dedup-1")],
    )
    assert explicit_again.succeeded == ("0",)

    got = await receive_until(backend, queue, 3, budget_s=2)
    assert sorted(m.body for m in got) == ["explicit", "same body"]
    assert {m.group_id for m in got} == {"g1", "g2"}
