"""The backend contract: one suite that every `Backend` + `QueueAdmin` must pass unchanged.

Each test gets a fresh backend from the `backend` fixture (`conftest.py`), parametrized as
`memory` (the in-memory engine, on a fast-forwarded loop clock: looptime) and `moto` (our SQS
backend against a moto server on loopback). Tests let time pass only through `anyio.sleep` and
`receive(wait_s=...)`, so the same test costs nothing on the memory engine and a few real
seconds on moto. Where moto is known to differ from real SQS, a test carries
`@pytest.mark.moto_gap("why")`, which makes it a strict xfail on moto only.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

import anyio

from worker.backend import Backend, QueueAdmin
from worker.types import Deletion, OutgoingMessage, ReceivedMessage, VisibilityChange

__all__ = [
    "ContractBackend",
    "MakeQueue",
    "delete_all",
    "receive_one",
    "receive_until",
    "release",
    "send_bodies",
]


class ContractBackend(Backend, QueueAdmin, Protocol):
    """What the suite drives: the runtime's protocol plus queue administration."""


#: The `make_queue` fixture: `await make_queue(fifo=..., **create_queue_options)` -> name.
MakeQueue = Callable[..., Awaitable[str]]


async def send_bodies(
    backend: ContractBackend, queue: str, *bodies: str, group_id: str | None = None
) -> list[str]:
    """Send `bodies` in one batch; returns their message ids in order."""
    messages = [
        OutgoingMessage(body=body, entry_id=f"m{i}", group_id=group_id)
        for i, body in enumerate(bodies)
    ]
    result = await backend.send(queue, messages)
    assert not result.failed, result.failed
    return [result.message_ids[f"m{i}"] for i in range(len(bodies))]


async def receive_one(
    backend: ContractBackend, queue: str, *, wait_s: float = 5, visibility_s: int | None = None
) -> ReceivedMessage:
    """Long-poll for exactly one message; fails the test if none comes within `wait_s`."""
    got = await backend.receive(queue, max_messages=1, wait_s=wait_s, visibility_s=visibility_s)
    assert len(got) == 1, f"expected one message from {queue} within {wait_s} s, got {got}"
    return got[0]


async def receive_until(
    backend: ContractBackend, queue: str, count: int, *, budget_s: float = 8
) -> list[ReceivedMessage]:
    """Receive (10 at a time, long polls) until `count` messages came or `budget_s` ran out."""
    received: list[ReceivedMessage] = []
    deadline = anyio.current_time() + budget_s
    while len(received) < count:
        left = deadline - anyio.current_time()
        if left <= 0:
            break
        wait_s = min(left, 2.0)
        received.extend(await backend.receive(queue, max_messages=10, wait_s=wait_s))
    return received


async def delete_all(
    backend: ContractBackend, queue: str, messages: Sequence[ReceivedMessage]
) -> None:
    for start in range(0, len(messages), 10):
        chunk = messages[start : start + 10]
        entries = [Deletion(f"d{i}", m.receipt_handle) for i, m in enumerate(chunk)]
        result = await backend.delete(queue, entries)
        assert not result.failed, result.failed


async def release(backend: ContractBackend, queue: str, message: ReceivedMessage) -> None:
    result = await backend.release(queue, [VisibilityChange("r", message.receipt_handle, 0)])
    assert result.succeeded == ("r",), result
