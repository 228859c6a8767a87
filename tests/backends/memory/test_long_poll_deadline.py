"""A long poll on the in-memory engine ends at its deadline, whatever the clock's ticks.

Under looptime the loop's time moves in whole microseconds, while `now + wait_s` is a float
that can fall between two ticks (77.3 + 0.000001 is 77.30000100000001): the alarm for the
deadline fired at 77.300001, the clock read less than the deadline, and the poll asked
again and again without time moving, for ever.
"""

from __future__ import annotations

import asyncio

import anyio
import pytest

from backends.memory import MemoryBackend
from worker.types import OutgoingMessage, QueueSpec, VisibilityChange

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]


def _count_receives(backend: MemoryBackend) -> list[float]:
    """Note when the engine is asked to receive (the loop time of each ask); a poll that asks
    more than 100 times without an answer is spinning, and raises."""
    engine_receive = backend.engine.receive
    asked: list[float] = []

    def counted(*args: object, **kwargs: object) -> object:
        asked.append(anyio.current_time())
        if len(asked) > 100:
            raise RuntimeError("the long poll spins without time moving")
        return engine_receive(*args, **kwargs)  # type: ignore[arg-type]

    backend.engine.receive = counted  # type: ignore[method-assign,assignment]
    return asked


@pytest.mark.parametrize(("start", "wait_s"), [(77.3, 0.000001), (0.1, 0.2), (1.0, 20.0)])
async def test_an_empty_long_poll_ends_at_its_deadline(start: float, wait_s: float) -> None:
    backend = MemoryBackend()
    await backend.create_queue(QueueSpec("jobs"))
    asked = _count_receives(backend)
    await asyncio.sleep(start)
    began = anyio.current_time()
    assert await backend.receive("jobs", max_messages=1, wait_s=wait_s) == []
    assert anyio.current_time() - began == pytest.approx(wait_s, abs=2e-6)
    assert len(asked) == 2  # at the start, and once the alarm rang


async def test_a_long_poll_takes_a_message_due_between_two_ticks() -> None:
    """The same for the engine's own wakeup, a message's visibility running out: released
    at 6.250001 for 3 s, it is due at 9.250001000000001; the alarm for it fired at 9.250001,
    the engine (on the same clock) saw nothing due yet, and the poll spun (seen hanging a
    worker with per-tenant caps, whose releases carry a visibility)."""
    backend = MemoryBackend()
    await backend.create_queue(QueueSpec("jobs"))
    await backend.send("jobs", [OutgoingMessage(body="{}")])
    await asyncio.sleep(6.250001)
    [taken] = await backend.receive("jobs", max_messages=1, wait_s=0, visibility_s=30)
    await backend.release("jobs", [VisibilityChange("0", taken.receipt_handle, 3)])
    asked = _count_receives(backend)
    [again] = await backend.receive("jobs", max_messages=1, wait_s=20, visibility_s=30)
    assert again.message_id == taken.message_id
    assert anyio.current_time() == pytest.approx(9.250001, abs=2e-6)
    assert len(asked) <= 3
