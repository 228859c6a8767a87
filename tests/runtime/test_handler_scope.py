"""The handler's cancel scope: level-triggered; its own cancellation is consumed, anyone
else's goes on; a handler's own CancelledError is told apart from both."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from worker.runtime.scope import HandlerScope

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]


def _current() -> asyncio.Task[object]:
    task = asyncio.current_task()
    assert task is not None
    return task


async def test_our_cancellation_alone_is_caught() -> None:
    async def handler() -> str:
        scope = HandlerScope()
        asyncio.get_running_loop().call_soon(scope.cancel)
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            assert scope.close()
            assert scope.requested
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
            if not scope.close():
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
        scope.close()
        await asyncio.sleep(0)  # no cancellation left over for what the task does next
        await asyncio.sleep(1)
        return _current().cancelling()

    assert await asyncio.create_task(handler()) == 0


# Issue 12, defect 6: the scope cancelled once, asyncio style; a handler that caught the
# cancellation and kept awaiting (a rollback) ran on for ever.
async def test_cancellation_is_level_triggered_a_swallowed_one_comes_back() -> None:
    loop = asyncio.get_running_loop()
    awaits_cancelled: list[tuple[str, float]] = []

    async def handler() -> None:
        scope = HandlerScope()
        loop.call_later(1, scope.cancel)
        for step in ("work", "rollback", "retry"):
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                awaits_cancelled.append((step, loop.time()))
        assert scope.close()

    task = asyncio.create_task(handler())
    await asyncio.wait((task,), timeout=60)  # virtual time; the old scope ran on here
    task.cancel()
    # The first swallowed one comes back at once, later ones every 0.1 s (no busy loop).
    assert awaits_cancelled == [("work", 1), ("rollback", 1), ("retry", pytest.approx(1.1))]
    await task


async def test_a_cancelled_error_the_handler_raised_itself_is_neither_ours_nor_outside() -> None:
    async def handler() -> tuple[bool, bool]:
        scope = HandlerScope()
        try:
            raise asyncio.CancelledError  # e.g. a library's own cancelled future
        except asyncio.CancelledError:
            return scope.close(), scope.requested

    assert await asyncio.create_task(handler()) == (True, False)


async def test_held_scope_wakes_its_waiter_once_per_cancel_and_resumes_level_triggered() -> None:
    events: list[str] = []
    thread_done = asyncio.get_running_loop().create_future()

    async def handler() -> None:
        scope = HandlerScope()
        scope.hold()
        loop = asyncio.get_running_loop()
        loop.call_later(1, scope.cancel)
        loop.call_later(2, thread_done.set_result, "done")
        while True:
            try:
                events.append(await asyncio.shield(thread_done))
                break
            except asyncio.CancelledError:
                assert scope.take_back()
                events.append("woken")
        scope.resume()  # from the task itself: delivered at the next await, not left over
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            events.append("cancelled after the thread")
        assert scope.close()
        await asyncio.sleep(1)
        assert _current().cancelling() == 0

    async with asyncio.timeout(60):
        await asyncio.create_task(handler())
    assert events == ["woken", "done", "cancelled after the thread"]


async def test_resume_without_a_request_leaves_nothing_pending() -> None:
    async def handler() -> float:
        scope = HandlerScope()
        scope.hold()
        scope.resume()
        assert scope.close()
        started = asyncio.get_running_loop().time()
        await asyncio.sleep(5)
        return asyncio.get_running_loop().time() - started

    assert await asyncio.create_task(handler()) == 5
