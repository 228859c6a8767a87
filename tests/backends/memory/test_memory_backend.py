"""`MemoryBackend` on a fast-forwarded event loop (looptime): long polls, cancellation, wiring.

The loop clock starts at 0 in every test, so `anyio.current_time()` is the virtual time.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace

import anyio
import pytest
import pytest_asyncio

from backends.memory import MemoryBackend, MemoryEngine
from backends.memory.dialects import SQS_DIALECT
from worker.backend import Backend, QueueAdmin
from worker.clock import LoopClock, ManualClock
from worker.errors import FatalBackendError, OverLimit, QueueNotFound
from worker.types import (
    Deletion,
    OutgoingMessage,
    QueueSpec,
    ReceivedMessage,
    RedrivePolicy,
    VisibilityChange,
)

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]


@pytest_asyncio.fixture
async def backend() -> AsyncIterator[MemoryBackend]:
    memory = MemoryBackend()
    await memory.create_queue(QueueSpec("jobs"))
    yield memory
    await memory.aclose()


async def send(backend: MemoryBackend, queue: str, body: str, **fields: object) -> str:
    result = await backend.send(queue, [OutgoingMessage(body=body, **fields)])  # type: ignore[arg-type]
    assert not result.failed, result.failed
    return result.message_ids["0"]


def now() -> float:
    return anyio.current_time()


async def test_implements_both_protocols(backend: MemoryBackend) -> None:
    assert isinstance(backend, Backend)
    assert isinstance(backend, QueueAdmin)
    # SQS's numbers, and a peek (the engine has one whatever its dialect).
    assert backend.limits == replace(
        SQS_DIALECT.limits, supports_peek=True, cancelled_receive_takes_nothing=True
    )
    assert isinstance(backend.engine, MemoryEngine)
    assert isinstance(backend.engine.clock, LoopClock)


async def test_an_engine_and_a_clock_are_not_both_taken() -> None:
    clock = ManualClock()
    assert MemoryBackend(clock=clock).engine.clock is clock
    engine = MemoryEngine(clock)
    assert MemoryBackend(engine).engine is engine
    assert MemoryBackend(engine, clock=clock).engine is engine
    with pytest.raises(ValueError, match="not both"):
        MemoryBackend(engine, clock=LoopClock())


async def test_receive_returns_at_once_when_messages_are_there(backend: MemoryBackend) -> None:
    await send(backend, "jobs", "a")
    got = await backend.receive("jobs", max_messages=10, wait_s=20)
    assert [m.body for m in got] == ["a"]
    assert now() == 0


async def test_long_poll_wakes_exactly_when_a_delayed_message_is_due(
    backend: MemoryBackend,
) -> None:
    await send(backend, "jobs", "late", delay_s=7)
    got = await backend.receive("jobs", max_messages=1, wait_s=20)
    assert [m.body for m in got] == ["late"]
    assert now() == pytest.approx(7)


async def test_long_poll_wakes_when_a_lease_lapses(backend: MemoryBackend) -> None:
    await send(backend, "jobs", "a")
    await backend.receive("jobs", max_messages=1, wait_s=0, visibility_s=12)
    [again] = await backend.receive("jobs", max_messages=1, wait_s=20)
    assert again.receive_count == 2
    assert now() == pytest.approx(12)


async def test_long_poll_ends_empty_at_its_deadline(backend: MemoryBackend) -> None:
    assert await backend.receive("jobs", max_messages=1, wait_s=20) == []
    assert now() == pytest.approx(20)


class CountingEngine(MemoryEngine):
    receives = 0

    def receive(
        self,
        queue: str,
        max_messages: int = 1,
        *,
        visibility_s: int | None = None,
        long_poll: bool = False,
        attempt_id: str | None = None,
    ) -> list[ReceivedMessage]:
        self.receives += 1
        return super().receive(
            queue,
            max_messages,
            visibility_s=visibility_s,
            long_poll=long_poll,
            attempt_id=attempt_id,
        )


async def test_long_poll_does_not_poll() -> None:
    engine = CountingEngine(LoopClock())
    backend = MemoryBackend(engine)
    await backend.create_queue(QueueSpec("jobs"))
    assert await backend.receive("jobs", max_messages=1, wait_s=20) == []
    assert engine.receives == 2  # one try, one wait to the deadline, one last try
    await send(backend, "jobs", "late", delay_s=7)
    assert len(await backend.receive("jobs", max_messages=1, wait_s=20)) == 1
    assert engine.receives == 4
    assert now() == pytest.approx(27)


async def test_short_poll_does_not_wait(backend: MemoryBackend) -> None:
    await send(backend, "jobs", "late", delay_s=5)
    assert await backend.receive("jobs", max_messages=1, wait_s=0) == []
    assert now() == 0


async def test_long_poll_wakes_on_a_send(backend: MemoryBackend) -> None:
    async def send_later() -> None:
        await anyio.sleep(3)
        await send(backend, "jobs", "a")

    async with anyio.create_task_group() as tg:
        tg.start_soon(send_later)
        got = await backend.receive("jobs", max_messages=10, wait_s=20)
    assert [m.body for m in got] == ["a"]
    assert now() == pytest.approx(3)


async def test_long_poll_wakes_on_a_release(backend: MemoryBackend) -> None:
    await send(backend, "jobs", "a")
    [held] = await backend.receive("jobs", max_messages=1, wait_s=0, visibility_s=600)

    async def release_later() -> None:
        await anyio.sleep(2)
        result = await backend.release("jobs", [VisibilityChange("r", held.receipt_handle, 0)])
        assert result.succeeded == ("r",)

    async with anyio.create_task_group() as tg:
        tg.start_soon(release_later)
        [again] = await backend.receive("jobs", max_messages=1, wait_s=20)
    assert again.message_id == held.message_id
    assert now() == pytest.approx(2)


async def test_long_poll_wakes_on_an_expire_hook(backend: MemoryBackend) -> None:
    message_id = await send(backend, "jobs", "a")
    await backend.receive("jobs", max_messages=1, wait_s=0, visibility_s=600)

    async def expire_later() -> None:
        await anyio.sleep(4)
        backend.engine.expire("jobs", message_id)

    async with anyio.create_task_group() as tg:
        tg.start_soon(expire_later)
        [again] = await backend.receive("jobs", max_messages=1, wait_s=20)
    assert again.message_id == message_id
    assert now() == pytest.approx(4)


async def test_a_later_extension_does_not_wake_a_poll_early(backend: MemoryBackend) -> None:
    await send(backend, "jobs", "a")
    [held] = await backend.receive("jobs", max_messages=1, wait_s=0, visibility_s=5)

    async def extend_soon() -> None:
        await anyio.sleep(1)
        await backend.extend("jobs", [VisibilityChange("e", held.receipt_handle, 9)])

    async with anyio.create_task_group() as tg:
        tg.start_soon(extend_soon)
        [again] = await backend.receive("jobs", max_messages=1, wait_s=20)
    assert again.receive_count == 2
    assert now() == pytest.approx(10)


async def test_cancelling_a_long_poll_loses_nothing(backend: MemoryBackend) -> None:
    got: list[object] = []

    async def poll() -> None:
        got.extend(await backend.receive("jobs", max_messages=10, wait_s=20))

    async with anyio.create_task_group() as tg:
        tg.start_soon(poll)
        await anyio.sleep(1)
        # The send wakes the poll, and the cancel lands before it runs again.
        await backend.send("jobs", [OutgoingMessage(body="a")])
        tg.cancel_scope.cancel()
    assert got == []
    counts = backend.engine.counts("jobs")
    assert (counts.visible, counts.in_flight) == (1, 0)
    assert len(await backend.receive("jobs", max_messages=10, wait_s=0)) == 1


async def test_a_cancelled_poll_leaves_no_waiter_behind(backend: MemoryBackend) -> None:
    with anyio.move_on_after(5):
        await backend.receive("jobs", max_messages=1, wait_s=20)
    assert now() == pytest.approx(5)
    assert backend._waiters == {}


async def test_long_poll_at_the_in_flight_quota() -> None:
    backend = MemoryBackend(MemoryEngine(LoopClock(), max_in_flight=2))
    await backend.create_queue(QueueSpec("jobs"))
    for body in "abc":
        await send(backend, "jobs", body)
    held = await backend.receive("jobs", max_messages=10, wait_s=0, visibility_s=600)
    assert len(held) == 2
    with pytest.raises(OverLimit):
        await backend.receive("jobs", max_messages=10, wait_s=0)

    async def delete_later() -> None:
        await anyio.sleep(6)
        await backend.delete("jobs", [Deletion("d", held[0].receipt_handle)])

    assert await backend.receive("jobs", max_messages=10, wait_s=3) == []
    assert now() == pytest.approx(3)
    async with anyio.create_task_group() as tg:
        tg.start_soon(delete_later)
        got = await backend.receive("jobs", max_messages=10, wait_s=20)
    assert [m.body for m in got] == ["c"]
    assert now() == pytest.approx(9)


async def test_long_poll_wakes_when_a_fifo_group_unblocks(backend: MemoryBackend) -> None:
    await backend.create_queue(QueueSpec("jobs.fifo", content_based_deduplication=True))
    await send(backend, "jobs.fifo", "1", group_id="g")
    await send(backend, "jobs.fifo", "2", group_id="g")
    [first] = await backend.receive("jobs.fifo", max_messages=1, wait_s=0)

    async def finish_first() -> None:
        await anyio.sleep(2)
        await backend.delete("jobs.fifo", [Deletion("d", first.receipt_handle)])

    async with anyio.create_task_group() as tg:
        tg.start_soon(finish_first)
        got = await backend.receive("jobs.fifo", max_messages=10, wait_s=20)
    assert [m.body for m in got] == ["2"]
    assert now() == pytest.approx(2)


async def test_long_poll_by_url_wakes_on_a_send_by_name(backend: MemoryBackend) -> None:
    url = backend.engine.queue_url("jobs")

    async def send_later() -> None:
        await anyio.sleep(1)
        await send(backend, "jobs", "a")

    async with anyio.create_task_group() as tg:
        tg.start_soon(send_later)
        got = await backend.receive(url, max_messages=1, wait_s=20)
    assert len(got) == 1
    assert now() == pytest.approx(1)


async def test_a_second_backend_on_one_engine_wakes_the_first(backend: MemoryBackend) -> None:
    other = MemoryBackend(backend.engine)

    async def send_later() -> None:
        await anyio.sleep(1)
        await send(other, "jobs", "a")

    async with anyio.create_task_group() as tg:
        tg.start_soon(send_later)
        got = await backend.receive("jobs", max_messages=1, wait_s=20)
    assert len(got) == 1
    await other.aclose()


async def test_deleting_the_queue_ends_a_long_poll(backend: MemoryBackend) -> None:
    async def delete_later() -> None:
        await anyio.sleep(1)
        await backend.delete_queue("jobs")

    async with anyio.create_task_group() as tg:
        tg.start_soon(delete_later)
        with pytest.raises(QueueNotFound):
            await backend.receive("jobs", max_messages=1, wait_s=20)
    assert now() == pytest.approx(1)


async def test_wait_beyond_twenty_seconds_is_refused(backend: MemoryBackend) -> None:
    with pytest.raises(FatalBackendError) as caught:
        await backend.receive("jobs", max_messages=1, wait_s=21)
    assert caught.value.code == "InvalidParameterValue"


async def test_extend_release_and_delete_answer_batch_results(backend: MemoryBackend) -> None:
    await send(backend, "jobs", "a")
    [message] = await backend.receive("jobs", max_messages=1, wait_s=0)
    extended = await backend.extend(
        "jobs",
        [VisibilityChange("ok", message.receipt_handle, 60), VisibilityChange("bad", "h", 60)],
    )
    assert extended.succeeded == ("ok",)
    assert [f.code for f in extended.failed] == ["ReceiptHandleIsInvalid"]
    released = await backend.release("jobs", [VisibilityChange("r", message.receipt_handle, 0)])
    assert released.succeeded == ("r",)
    deleted = await backend.delete("jobs", [Deletion("d", message.receipt_handle)])
    assert deleted.succeeded == ("d",)
    info = await backend.queue_info("jobs")
    assert (info.approximate_visible, info.approximate_in_flight) == (0, 0)


async def test_queue_admin(backend: MemoryBackend) -> None:
    dlq = await backend.create_queue(QueueSpec("dlq", retention_s=1_209_600))
    url = await backend.create_queue(
        QueueSpec("work.fifo", visibility_timeout_s=45, delay_s=2, content_based_deduplication=True)
    )
    info = await backend.queue_info(url)
    assert (info.name, info.fifo, info.visibility_timeout_s, info.delay_s) == (
        "work.fifo",
        True,
        45,
        2,
    )
    await backend.create_queue(QueueSpec("redriven", redrive=RedrivePolicy(dlq, 3)))
    assert (await backend.queue_info("redriven")).redrive == RedrivePolicy(dlq, 3)
    await send(backend, "jobs", "a")
    await backend.purge("jobs")
    assert (await backend.queue_info("jobs")).approximate_visible == 0
    await backend.delete_queue("redriven")
    with pytest.raises(QueueNotFound):
        await backend.queue_info("redriven")


async def test_aclose_ends_pending_polls_and_later_calls(backend: MemoryBackend) -> None:
    async def close_later() -> None:
        await anyio.sleep(1)
        await backend.aclose()

    async with anyio.create_task_group() as tg:
        tg.start_soon(close_later)
        with pytest.raises(RuntimeError, match="closed"):
            await backend.receive("jobs", max_messages=1, wait_s=20)
    assert now() == pytest.approx(1)
    with pytest.raises(RuntimeError, match="closed"):
        await backend.send("jobs", [OutgoingMessage(body="a")])
    await backend.aclose()
