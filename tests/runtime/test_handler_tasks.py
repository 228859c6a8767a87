"""The handler tasks' group: structured like a task group, at a smaller cost per task."""

from __future__ import annotations

import asyncio
import gc
import inspect
import warnings

import anyio
import pytest

from worker.runtime.handler_tasks import TASK_NAME, HandlerTasks

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]


class Crashes:
    def __init__(self) -> None:
        self.errors: list[BaseException] = []
        self.heard = anyio.Event()

    def __call__(self, error: BaseException) -> None:
        self.errors.append(error)
        self.heard.set()


class Poison(BaseException):
    """What a bug of the runtime might raise in a handler task."""


async def test_after_close_it_ends_once_every_task_has() -> None:
    crashes = Crashes()
    tasks = await HandlerTasks(crashes).open()
    finished: list[float] = []

    async def work(seconds: float) -> None:
        await asyncio.sleep(seconds)
        finished.append(asyncio.get_running_loop().time())

    started = asyncio.get_running_loop().time()
    for seconds in (3, 1, 2):
        tasks.create_task(work(seconds))
    tasks.close()
    assert not tasks.ended
    await tasks.wait()
    assert tasks.ended
    assert [round(at - started) for at in finished] == [1, 2, 3]
    assert crashes.errors == []


async def test_closed_with_no_task_it_has_ended_and_a_group_never_opened_is_not_waited_for() -> (
    None
):
    opened = await HandlerTasks(Crashes()).open()
    opened.close()
    assert opened.ended
    never_opened = HandlerTasks(Crashes())
    never_opened.close()
    never_opened.cancel()
    with anyio.fail_after(0):  # returns without waiting
        await never_opened.wait()
    assert not never_opened.opened and not never_opened.ended


async def test_a_task_that_raises_is_reported_at_once_and_the_others_are_cancelled() -> None:
    crashes = Crashes()
    tasks = await HandlerTasks(crashes).open()
    cancelled = 0

    async def long() -> None:
        nonlocal cancelled
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled += 1
            await asyncio.sleep(5)  # cleaning up takes a while: the crash is not held back
            raise

    async def buggy() -> None:
        await asyncio.sleep(1)
        raise Poison("a bug")

    for _ in range(3):
        tasks.create_task(long())
    tasks.create_task(buggy())
    with anyio.fail_after(1.5):
        await crashes.heard.wait()
    [error] = crashes.errors
    assert isinstance(error, Poison)
    assert not tasks.ended
    await tasks.wait()  # ends without close(): the crash stops the group
    assert cancelled == 3
    assert asyncio.get_running_loop().time() == pytest.approx(6, abs=0.2)


async def test_no_new_task_once_it_stops_and_the_refused_coroutine_is_closed() -> None:
    tasks = await HandlerTasks(Crashes()).open()
    tasks.cancel()

    async def never() -> None:
        raise AssertionError("never runs")

    coro = never()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "coroutine ... was never awaited" would be an error
        with pytest.raises(RuntimeError, match="stopping or ended"):
            tasks.create_task(coro)
        gc.collect()
    assert inspect.getcoroutinestate(coro) == inspect.CORO_CLOSED
    with pytest.raises(RuntimeError, match="not open"):
        HandlerTasks(Crashes()).create_task(asyncio.sleep(0))


async def test_cancel_cancels_every_task_and_ends_the_group() -> None:
    crashes = Crashes()
    tasks = await HandlerTasks(crashes).open()
    made = [tasks.create_task(asyncio.sleep(3600)) for _ in range(4)]
    tasks.cancel()
    await tasks.wait()
    assert all(task.cancelled() for task in made)
    assert crashes.errors == []


async def test_every_task_shares_one_done_callback_one_context_and_one_name() -> None:
    """What asyncio.TaskGroup makes anew for each task (128 bytes a task) is made once, and
    the tasks share a name (a number each, unnamed)."""
    tasks = await HandlerTasks(Crashes()).open()
    made = [tasks.create_task(asyncio.sleep(1)) for _ in range(3)]
    pairs = [pair for task in made for pair in _done_callbacks(task)]
    assert len(pairs) == 3
    assert len({id(callback) for callback, _ in pairs}) == 1
    assert len({id(context) for _, context in pairs}) == 1
    assert {id(task.get_name()) for task in made} == {id(TASK_NAME)}
    tasks.close()
    await tasks.wait()


def _done_callbacks(task: asyncio.Task[object]) -> list[tuple[object, object]]:
    return list(task._callbacks or [])
