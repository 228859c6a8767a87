"""The lease as a fence (issue 27): no handler code runs on past a lease that is gone.

- A cancellation reaches a handler whose awaited answer came while the loop stood still
  (the answer is there, but the lease was lost first): the await raises, the side effect
  after it never happens.
"""

from __future__ import annotations

import asyncio

import pytest

from worker.runtime.scope import HandlerScope

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]


async def test_a_cancel_reaches_a_handler_whose_awaited_answer_is_already_there() -> None:
    """Issue 27 (1): the answer and the loss land in the same loop step (after a stall, the
    I/O and the keeper's timer run together); the handler must not see the answer."""
    answer: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    effects: list[str] = []
    scopes: list[HandlerScope] = []

    async def handler() -> str:
        scope = HandlerScope()
        scopes.append(scope)
        try:
            effects.append(await answer)  # the side effect after the await
        except asyncio.CancelledError:
            assert scope.close()
            return "cancelled"
        scope.close()
        return "ran on"

    task = asyncio.create_task(handler())
    await asyncio.sleep(0)

    def stall_over() -> None:  # one loop step: the answer arrives, then the lease is lost
        answer.set_result("reply")
        scopes[0].cancel()

    asyncio.get_running_loop().call_soon(stall_over)
    assert await task == "cancelled"
    assert effects == []
    assert task.cancelling() == 0
