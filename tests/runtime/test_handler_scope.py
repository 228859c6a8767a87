"""The handler's cancel scope: its own cancellation is consumed, anyone else's goes on."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from worker.runtime.scope import HandlerScope

pytestmark = pytest.mark.asyncio


async def test_our_cancellation_alone_is_caught() -> None:
    async def handler() -> str:
        scope = HandlerScope()
        asyncio.get_running_loop().call_soon(scope.cancel)
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            assert scope.caught()
            return "cancelled by the lease"
        return "ran on"

    task = asyncio.create_task(handler())
    assert await task == "cancelled by the lease"
    assert task.cancelling() == 0


async def test_an_outside_cancellation_is_not_swallowed() -> None:
    scopes: list[HandlerScope] = []

    async def handler() -> None:
        scope = HandlerScope()
        scopes.append(scope)
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            if not scope.caught():
                raise

    task = asyncio.create_task(handler())
    await asyncio.sleep(0)
    scopes[0].cancel()  # the lease keeper
    task.cancel()  # and the task group going down, at the same time
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_cancellation_the_handler_swallowed_is_taken_back() -> None:
    async def handler() -> int:
        scope = HandlerScope()
        asyncio.get_running_loop().call_soon(scope.cancel)
        with contextlib.suppress(asyncio.CancelledError):  # a handler that swallows it
            await asyncio.sleep(3600)
        scope.settle()
        await asyncio.sleep(0)  # no cancellation left over for what the task does next
        task = asyncio.current_task()
        assert task is not None
        return task.cancelling()

    assert await asyncio.create_task(handler()) == 0
