"""Every call to the service is abandoned at the runtime's deadline (`call_by`), and only
its own deadline becomes a TransientBackendError: anyone else's cancellation goes on."""

from __future__ import annotations

import asyncio

import anyio
import pytest

from worker.errors import TransientBackendError
from worker.runtime.calls import call_by

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]


async def _hangs() -> str:
    await anyio.sleep_forever()
    return "never"


async def _answers_after(seconds: float) -> str:
    await anyio.sleep(seconds)
    return "answer"


async def test_an_answer_before_the_deadline_is_returned() -> None:
    deadline = anyio.current_time() + 10
    assert await call_by(deadline, lambda: _answers_after(9.9), operation="receive", queue="q")
    assert anyio.current_time() == pytest.approx(9.9)


async def test_a_hung_call_is_abandoned_at_the_deadline_as_a_transient_error() -> None:
    deadline = anyio.current_time() + 10
    with pytest.raises(TransientBackendError) as raised:
        await call_by(deadline, _hangs, operation="delete", queue="jobs", code="Stalled")
    assert anyio.current_time() == pytest.approx(10)
    error = raised.value
    assert (error.operation, error.queue, error.code) == ("delete", "jobs", "Stalled")
    assert str(error) == "delete on queue 'jobs': no answer in time"
    assert error.__cause__ is None and error.__suppress_context__
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0  # nothing left pending


async def test_a_deadline_already_past_abandons_the_call_at_its_first_wait() -> None:
    with pytest.raises(TransientBackendError):
        await call_by(anyio.current_time() - 1, _hangs, operation="receive", queue="q")
    assert anyio.current_time() == pytest.approx(0)


async def test_the_calls_own_timeout_error_is_not_taken_for_the_deadline() -> None:
    async def times_out() -> str:
        await anyio.sleep(1)
        raise TimeoutError("the socket's own")

    with pytest.raises(TimeoutError, match="the socket's own"):
        await call_by(anyio.current_time() + 10, times_out, operation="receive", queue="q")


async def test_an_outer_scope_that_ends_first_cancels_the_call_as_its_own() -> None:
    with anyio.move_on_after(3) as outer:
        await call_by(anyio.current_time() + 10, _hangs, operation="receive", queue="q")
    assert outer.cancelled_caught
    assert anyio.current_time() == pytest.approx(3)


async def test_a_cancelled_task_group_is_not_turned_into_a_transient_error() -> None:
    outcomes: list[str] = []

    async def caller() -> None:
        try:
            await call_by(anyio.current_time() + 10, _hangs, operation="receive", queue="q")
        except TransientBackendError:
            outcomes.append("transient")
        except anyio.get_cancelled_exc_class():
            outcomes.append("cancelled")
            raise

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(caller)
        await anyio.sleep(5)
        tasks.cancel_scope.cancel()
    assert outcomes == ["cancelled"]
    assert anyio.current_time() == pytest.approx(5)
