"""Contract: visibility timeouts, extension, release, stale receipt handles, the 12 h cap."""

from __future__ import annotations

import anyio
import pytest

from tests.contract import ContractBackend, MakeQueue, receive_one, release, send_bodies
from worker.types import Deletion, ReceivedMessage, VisibilityChange

pytestmark = pytest.mark.asyncio

_STALE_CODES = {"ReceiptHandleIsInvalid", "MessageNotInflight"}


async def test_received_message_is_invisible_until_its_timeout(
    backend: ContractBackend, make_queue: MakeQueue
) -> None:
    queue = await make_queue()
    await send_bodies(backend, queue, "m")
    first = await receive_one(backend, queue, visibility_s=2)
    received_at = anyio.current_time()
    assert list(await backend.receive(queue, max_messages=10, wait_s=0)) == []

    again = await receive_one(backend, queue, wait_s=6)
    assert again.message_id == first.message_id
    assert anyio.current_time() - received_at >= 1.5


async def test_visibility_zero_makes_it_visible_at_once(
    backend: ContractBackend, make_queue: MakeQueue
) -> None:
    queue = await make_queue()
    await send_bodies(backend, queue, "m")
    # The queue's own visibility is 30 s: a message back within the 2 s poll came back at once.
    first = await receive_one(backend, queue, visibility_s=0)
    second = await receive_one(backend, queue, wait_s=2)
    assert second.message_id == first.message_id
    assert second.receive_count == 2

    await release(backend, queue, second)
    third = await receive_one(backend, queue, wait_s=2)
    assert third.message_id == first.message_id


async def test_extend_keeps_it_invisible(backend: ContractBackend, make_queue: MakeQueue) -> None:
    queue = await make_queue()
    await send_bodies(backend, queue, "m")
    message = await receive_one(backend, queue, visibility_s=2)
    received_at = anyio.current_time()
    result = await backend.extend(queue, [VisibilityChange("e", message.receipt_handle, 4)])
    assert result.succeeded == ("e",) and not result.failed

    await anyio.sleep(2.5)
    assert list(await backend.receive(queue, max_messages=10, wait_s=0)) == []
    again = await receive_one(backend, queue, wait_s=5)
    assert again.message_id == message.message_id
    assert anyio.current_time() - received_at >= 3.5


async def received_twice(
    backend: ContractBackend, queue: str
) -> tuple[ReceivedMessage, ReceivedMessage]:
    """One message received, made visible at once, and received again: (old, new)."""
    await send_bodies(backend, queue, "m")
    old = await receive_one(backend, queue, visibility_s=0)
    new = await receive_one(backend, queue, wait_s=2, visibility_s=30)
    assert new.message_id == old.message_id
    return old, new


@pytest.mark.moto_gap("moto accepts any receipt handle the message ever had")
async def test_stale_handle_is_rejected_on_visibility_change(
    backend: ContractBackend, make_queue: MakeQueue
) -> None:
    queue = await make_queue()
    old, _ = await received_twice(backend, queue)

    result = await backend.extend(queue, [VisibilityChange("old", old.receipt_handle, 60)])
    failure = result.failure("old")
    assert failure is not None and failure.code in _STALE_CODES, result
    assert result.succeeded == ()


@pytest.mark.moto_gap("moto deletes a message by any receipt handle it ever had")
async def test_delete_with_a_stale_handle_leaves_the_message(
    backend: ContractBackend, make_queue: MakeQueue
) -> None:
    # SQS: "the request succeeds, but the message will not be deleted"; a failed entry is
    # acceptable too. Either way the message must survive.
    queue = await make_queue()
    old, new = await received_twice(backend, queue)
    await backend.delete(queue, [Deletion("old", old.receipt_handle)])

    await release(backend, queue, new)
    again = await receive_one(backend, queue, wait_s=2)
    assert again.message_id == old.message_id


@pytest.mark.moto_gap(
    "moto fails the whole ChangeMessageVisibilityBatch call (InvalidParameterValue) when one"
    " entry passes the 12 h cap, instead of failing that entry"
)
async def test_extension_past_twelve_hours_from_receive_is_rejected(
    backend: ContractBackend, make_queue: MakeQueue
) -> None:
    queue = await make_queue()
    await send_bodies(backend, queue, "m")
    message = await receive_one(backend, queue)
    await anyio.sleep(1.1)
    cap = backend.limits.max_lease_s
    too_long = await backend.extend(queue, [VisibilityChange("x", message.receipt_handle, cap)])
    failure = too_long.failure("x")
    assert failure is not None and failure.code == "InvalidParameterValue", too_long
    assert too_long.succeeded == ()


async def test_extension_within_twelve_hours_is_accepted(
    backend: ContractBackend, make_queue: MakeQueue
) -> None:
    queue = await make_queue()
    await send_bodies(backend, queue, "m")
    message = await receive_one(backend, queue)
    await anyio.sleep(1.1)
    cap = backend.limits.max_lease_s
    within = await backend.extend(queue, [VisibilityChange("y", message.receipt_handle, cap - 200)])
    assert within.succeeded == ("y",), within


@pytest.mark.moto_gap("moto counts the 12 h cap from the send, SQS from the receive")
async def test_twelve_hour_cap_counts_from_the_receive(
    backend: ContractBackend, make_queue: MakeQueue
) -> None:
    queue = await make_queue()
    await send_bodies(backend, queue, "m")
    await anyio.sleep(2.1)
    message = await receive_one(backend, queue)
    cap = backend.limits.max_lease_s
    result = await backend.extend(queue, [VisibilityChange("x", message.receipt_handle, cap - 1)])
    assert result.succeeded == ("x",), result
