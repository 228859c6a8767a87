"""Every call to the service is abandoned at the runtime's deadline (`call_by`), and only
its own deadline becomes a TransientBackendError: anyone else's cancellation goes on."""

from __future__ import annotations

import asyncio

import anyio
import pytest

from worker.errors import TransientBackendError
from worker.runtime.calls import call_by, hedged_call_by

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


# -- hedged calls (an idempotent call whose late answer must not be thrown away) ------------


async def test_a_late_answer_wins_over_the_hedge_sent_beside_it() -> None:
    sent: list[float] = []
    hedges: list[float] = []

    async def call() -> str:
        sent.append(anyio.current_time())
        await anyio.sleep(2.5 if len(sent) == 1 else 10)  # the first answers late, not lost
        return f"answer {len(sent)}"

    start = anyio.current_time()
    answer, sent_at = await hedged_call_by(
        1.0,
        start + 4,
        call,
        operation="Extend",
        queue="q",
        on_hedge=lambda: hedges.append(anyio.current_time() - start),
    )
    assert answer == "answer 3"  # the first call answers while three are out
    assert sent_at == start  # it was the first call that answered
    assert anyio.current_time() - start == pytest.approx(2.5)
    assert hedges == [pytest.approx(1.0), pytest.approx(2.0)]
    assert [t - start for t in sent] == [0, pytest.approx(1.0), pytest.approx(2.0)]


async def test_a_lost_answer_is_covered_by_the_next_call() -> None:
    sent: list[float] = []

    async def call() -> int:
        sent.append(anyio.current_time())
        if len(sent) == 1:
            await anyio.sleep_forever()  # landed, the answer lost
        await anyio.sleep(0.2)
        return len(sent)

    start = anyio.current_time()
    answer, sent_at = await hedged_call_by(1.0, start + 4, call, operation="Extend", queue="q")
    assert answer == 2
    assert sent_at - start == pytest.approx(1.0)
    assert anyio.current_time() - start == pytest.approx(1.2)


async def test_every_call_failing_raises_the_first_error_and_the_deadline_gives_up() -> None:
    errors = iter([ValueError("first"), ValueError("second")])

    async def failing() -> None:
        await anyio.sleep(0.5)
        raise next(errors)

    start = anyio.current_time()
    with pytest.raises(ValueError, match="first"):
        await hedged_call_by(10.0, start + 4, failing, operation="Extend", queue="q")

    async def hanging() -> None:
        await anyio.sleep_forever()

    start = anyio.current_time()
    with pytest.raises(TransientBackendError) as raised:
        await hedged_call_by(1.0, start + 3, hanging, operation="Extend", queue="q")
    assert raised.value.code == "DeadlineReached"
    assert anyio.current_time() - start == pytest.approx(3)
