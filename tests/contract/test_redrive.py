"""Contract: a message received more than maxReceiveCount times goes to the dead-letter queue."""

from __future__ import annotations

import pytest

from tests.contract import ContractBackend, MakeQueue, receive_one, send_bodies
from worker.types import RedrivePolicy

pytestmark = pytest.mark.asyncio


async def test_message_reaches_the_dlq_on_receive_max_plus_one(
    backend: ContractBackend, make_queue: MakeQueue
) -> None:
    dlq = await make_queue()
    queue = await make_queue(redrive=RedrivePolicy(dead_letter_queue=dlq, max_receive_count=2))
    [message_id] = await send_bodies(backend, queue, "poison")

    counts = []
    for _ in range(2):
        message = await receive_one(backend, queue, wait_s=2, visibility_s=0)
        assert message.message_id == message_id
        counts.append(message.receive_count)
    assert counts == [1, 2]

    # The third receive moves it instead of delivering it.
    assert list(await backend.receive(queue, max_messages=10, wait_s=1)) == []
    dead = await receive_one(backend, dlq, wait_s=2)
    assert dead.body == "poison"
    assert dead.message_id == message_id


async def test_visibility_zero_alone_does_not_redrive(
    backend: ContractBackend, make_queue: MakeQueue
) -> None:
    dlq = await make_queue()
    queue = await make_queue(redrive=RedrivePolicy(dead_letter_queue=dlq, max_receive_count=2))
    await send_bodies(backend, queue, "m")
    message = await receive_one(backend, queue, wait_s=2, visibility_s=0)
    again = await receive_one(backend, queue, wait_s=2)
    assert again.message_id == message.message_id
    assert list(await backend.receive(dlq, max_messages=10, wait_s=0)) == []
