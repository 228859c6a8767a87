"""Contract: batch calls. Partial failure is a value; oversized or ambiguous batches never leave."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from tests.contract import ContractBackend, MakeQueue, receive_one, receive_until, send_bodies
from worker.errors import FatalBackendError
from worker.types import BatchResult, Deletion, OutgoingMessage, VisibilityChange

pytestmark = pytest.mark.asyncio

_BOGUS_HANDLE = "AQEBbogusreceipthandle0123456789abcdefghijklmnopqrstuvwxyz=="


async def test_extend_with_one_good_and_one_bad_entry(
    backend: ContractBackend, make_queue: MakeQueue
) -> None:
    queue = await make_queue()
    await send_bodies(backend, queue, "m")
    message = await receive_one(backend, queue)
    result = await backend.extend(
        queue,
        [
            VisibilityChange("good", message.receipt_handle, 60),
            VisibilityChange("bad", _BOGUS_HANDLE, 60),
        ],
    )
    assert result.succeeded == ("good",)
    failure = result.failure("bad")
    assert failure is not None and failure.code == "ReceiptHandleIsInvalid", result
    assert failure.sender_fault
    assert result.failure("good") is None


async def test_delete_with_one_good_and_one_bad_entry(
    backend: ContractBackend, make_queue: MakeQueue
) -> None:
    queue = await make_queue()
    await send_bodies(backend, queue, "m")
    message = await receive_one(backend, queue)
    result = await backend.delete(
        queue, [Deletion("good", message.receipt_handle), Deletion("bad", _BOGUS_HANDLE)]
    )
    assert result.succeeded == ("good",)
    failure = result.failure("bad")
    assert failure is not None and failure.code == "ReceiptHandleIsInvalid", result


async def test_delete_removes_the_message(backend: ContractBackend, make_queue: MakeQueue) -> None:
    queue = await make_queue()
    await send_bodies(backend, queue, *(f"b{i}" for i in range(3)))
    messages = await receive_until(backend, queue, 3)
    assert len(messages) == 3
    entries = [Deletion(f"d{i}", m.receipt_handle) for i, m in enumerate(messages)]
    for entry in entries:
        # Each one gets a visibility of 1 s, so an undeleted one would be back at once.
        await backend.release(queue, [VisibilityChange("v", entry.receipt_handle, 1)])
    result = await backend.delete(queue, entries)
    assert sorted(result.succeeded) == ["d0", "d1", "d2"] and not result.failed
    assert list(await backend.receive(queue, max_messages=10, wait_s=2)) == []


async def test_send_reports_a_message_id_per_entry(
    backend: ContractBackend, make_queue: MakeQueue
) -> None:
    queue = await make_queue()
    messages = [OutgoingMessage(body=f"b{i}", entry_id=f"e{i}") for i in range(10)]
    result = await backend.send(queue, messages)
    assert sorted(result.succeeded) == sorted(m.entry_id for m in messages)
    assert set(result.message_ids) == set(result.succeeded)
    assert len(set(result.message_ids.values())) == 10


BatchCall = Callable[[ContractBackend, str, list[str]], Awaitable[BatchResult]]


async def _extend(backend: ContractBackend, queue: str, ids: list[str]) -> BatchResult:
    return await backend.extend(queue, [VisibilityChange(i, _BOGUS_HANDLE, 30) for i in ids])


async def _release(backend: ContractBackend, queue: str, ids: list[str]) -> BatchResult:
    return await backend.release(queue, [VisibilityChange(i, _BOGUS_HANDLE, 0) for i in ids])


async def _delete(backend: ContractBackend, queue: str, ids: list[str]) -> BatchResult:
    return await backend.delete(queue, [Deletion(i, _BOGUS_HANDLE) for i in ids])


async def _send(backend: ContractBackend, queue: str, ids: list[str]) -> BatchResult:
    return await backend.send(queue, [OutgoingMessage(body="x", entry_id=i) for i in ids])


# Refused as a whole call, never as per-entry values: a backend may check before calling
# (ValueError, as SqsBackend does) or answer as SQS itself would (FatalBackendError).
_REFUSED = (ValueError, FatalBackendError)

_CALLS = pytest.mark.parametrize(
    "call", [_extend, _release, _delete, _send], ids=["extend", "release", "delete", "send"]
)


@_CALLS
async def test_too_many_entries_refuse_the_call(
    backend: ContractBackend, make_queue: MakeQueue, call: BatchCall
) -> None:
    queue = await make_queue()
    limits = backend.limits
    over = max(limits.extend_batch, limits.release_batch, limits.delete_batch, limits.send_batch)
    with pytest.raises(_REFUSED):
        await call(backend, queue, [f"e{i}" for i in range(over + 1)])


@_CALLS
async def test_duplicate_entry_ids_refuse_the_call(
    backend: ContractBackend, make_queue: MakeQueue, call: BatchCall
) -> None:
    queue = await make_queue()
    with pytest.raises(_REFUSED):
        await call(backend, queue, ["same", "other", "same"])
