"""Regressions found by review: each test failed on the code before its fix."""

from __future__ import annotations

import math
from collections.abc import Sequence

import anyio
import pytest

from tests.recording import RecordingBackend
from worker import LeaseConfig, Message, Outcome, OutgoingMessage, Retry, Worker, WorkerConfig
from worker.testing import run_worker
from worker.types import BatchResult, Deletion, QueueSpec

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]


def _app(lease: LeaseConfig | None = None, **kw: object) -> Worker:
    return Worker(WorkerConfig(lease=lease or LeaseConfig(), wait_s=20, **kw))  # type: ignore[arg-type]


async def _prepare(backend: RecordingBackend, queue: str, count: int) -> list[str]:
    await backend.create_queue(QueueSpec(queue, visibility_timeout_s=30))
    ids = []
    for i in range(count):
        result = await backend.inner.send(queue, [OutgoingMessage(body=f'{{"n": {i}}}')])
        ids.append(result.message_ids["0"])
    return ids


# 1. Renewal storm at the hard cap when max_until is not a whole number of seconds away.
async def test_cap_with_fractional_max_lease_does_not_spin() -> None:
    lease = LeaseConfig(visibility_s=30, extension_s=30, renew_margin_s=10, max_lease_s=100.5)
    app = _app(lease, max_in_flight=1)

    @app.handler("jobs")
    async def slow(message: Message) -> None:
        await anyio.sleep(1_000)

    storm = anyio.Event()

    class Counting(RecordingBackend):
        async def extend(self, queue, entries):  # type: ignore[no-untyped-def]
            if len(self.of("extend")) >= 200:
                storm.set()
            return await super().extend(queue, entries)

    backend = Counting()
    await _prepare(backend, "jobs", 1)
    async with run_worker(app, backend=backend) as harness:
        async with anyio.create_task_group() as tg:

            async def handled() -> None:
                await harness.wait_for_handled(1)
                tg.cancel_scope.cancel()

            async def stormed() -> None:
                await storm.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(handled)
            tg.start_soon(stormed)
        harness.shutdown()
    at = [round(c.at, 3) for c in backend.of("extend")]
    assert not storm.is_set(), f"{len(at)} extend calls, at {at[:8]} ... {at[-3:]}"


# 2. One handler raising Retry(after_s=inf) (or nan) takes the whole worker down.
async def test_retry_with_infinite_delay_does_not_stop_the_worker() -> None:
    app = _app(max_in_flight=2)
    ran: list[int] = []

    @app.handler("jobs")
    async def job(message: Message) -> None:
        ran.append(message.body["n"])
        if message.body["n"] == 0:
            raise Retry(after_s=math.inf)

    backend = RecordingBackend()
    await _prepare(backend, "jobs", 1)
    async with run_worker(app, backend=backend) as harness:
        await anyio.sleep(1)
        await backend.inner.send("jobs", [OutgoingMessage(body='{"n": 1}')])
        with anyio.fail_after(60):
            await harness.wait_for_handled(2)


# 3. A synchronous handler raising StopIteration never finishes.
async def test_sync_handler_raising_stop_iteration_fails_normally() -> None:
    app = _app(max_in_flight=1)

    @app.handler("jobs")
    def job(message: Message) -> None:
        next(iter([]))

    backend = RecordingBackend()
    await _prepare(backend, "jobs", 1)
    async with run_worker(app, backend=backend) as harness:
        with anyio.fail_after(600):
            [record] = await harness.wait_for_handled(1)
    assert record.outcome is Outcome.FAILED


# 4. lease.extend() during a keeper renewal in flight: returns before its own extension
#    lands, and a release right after can be overtaken by it.
async def test_extend_while_a_renewal_is_in_flight() -> None:
    app = _app(LeaseConfig(visibility_s=30, extension_s=30, renew_margin_s=10), max_in_flight=1)
    seen: dict[str, float] = {}
    deliveries: list[float] = []

    class Slow(RecordingBackend):
        async def extend(self, queue, entries):  # type: ignore[no-untyped-def]
            delay = 2.0 if entries[0].visibility_s == 30 else 3.0
            await anyio.sleep(delay)
            return await super().extend(queue, entries)

    @app.handler("jobs")
    async def job(message: Message) -> None:
        deliveries.append(anyio.current_time())
        if message.receive_count > 1:
            return
        await anyio.sleep(21)  # the keeper's renewal went out at 20 and answers at 22
        await message.lease.extend(3600)
        seen["left_after_extend"] = message.lease.time_left_s()
        raise Retry(after_s=5)  # come back in 5 s

    backend = Slow()
    await _prepare(backend, "jobs", 1)
    async with run_worker(app, backend=backend) as harness:
        with anyio.move_on_after(300):
            await harness.wait_for_handled(2)
        harness.shutdown()
    calls = [(c.operation, c.at, c.visibility) for c in backend.calls if c.operation != "receive"]
    print(seen, deliveries, calls)
    assert seen["left_after_extend"] > 3000, seen
    assert len(deliveries) == 2 and deliveries[1] < 60, deliveries


# 5. Slots: with receive_concurrency > 1, receivers that waited for a free slot together
#    are never all woken: all but one stay blocked for good.
async def test_every_receiver_resumes_after_the_queue_was_full() -> None:
    app = Worker(WorkerConfig(max_in_flight=40, receive_concurrency=4, wait_s=20))
    polling = [0]
    most = [0]

    class Counting(RecordingBackend):
        async def receive(self, queue, **kw):  # type: ignore[no-untyped-def]
            polling[0] += 1
            most[0] = max(most[0], polling[0])
            try:
                return await super().receive(queue, **kw)
            finally:
                polling[0] -= 1

    @app.handler("jobs")
    async def job(message: Message) -> None:
        await anyio.sleep(5)

    backend = Counting()
    await _prepare(backend, "jobs", 40)  # fills all slots: every receiver waits for a slot
    async with run_worker(app, backend=backend) as harness:
        await harness.wait_for_handled(40)
        await anyio.sleep(1)  # slots free, queue empty: every receiver should be long-polling
        now_polling = polling[0]
        harness.shutdown()
    assert now_polling == 4, (now_polling, most[0])


# 6. A copy received while held: the lease keeps its old (later) deadline although the
#    service now counts the visibility of the new handle from this receive.
async def test_adopted_copy_is_renewed_before_its_own_visibility_ends() -> None:
    lease = LeaseConfig(visibility_s=30, extension_s=300, renew_margin_s=10)
    app = _app(lease, max_in_flight=2)
    started = anyio.Event()

    @app.handler("jobs")
    async def job(message: Message) -> None:
        started.set()
        await anyio.sleep(600)

    backend = RecordingBackend()
    [message_id] = await _prepare(backend, "jobs", 1)
    async with run_worker(app, backend=backend) as harness:
        await started.wait()
        await anyio.sleep(50)  # renewed at 20, to 320
        backend.inner.engine.expire("jobs", message_id)  # visible: our receiver takes it again
        await anyio.sleep(35)  # t = 85: the copy's 30 s visibility has ended
        snapshot = backend.inner.engine.peek("jobs", message_id)
        harness.shutdown()
    # 1: first receive, 2: the copy at 50; a 3rd means it went visible at 80 mid-handler
    assert snapshot is not None and snapshot.receive_count == 2, snapshot


async def test_no_renewal_goes_out_beside_a_delete_on_the_wire() -> None:
    app = _app(max_in_flight=1)

    @app.handler("jobs")
    async def job(message: Message) -> None:
        await anyio.sleep(18)  # done at 18; the renewal falls due at 20

    backend = RecordingBackend()
    original_delete = backend.delete

    async def slow_delete(queue: str, entries: Sequence[Deletion]) -> BatchResult:
        await anyio.sleep(4)  # on the wire from 18.05 to 22.05
        return await original_delete(queue, entries)

    backend.delete = slow_delete  # type: ignore[method-assign]
    [message_id] = await _prepare(backend, "jobs", 1)
    async with run_worker(app, backend=backend) as harness:
        [record] = await harness.wait_for_handled(1)
        await harness.wait_until_idle()
    assert record.outcome is Outcome.SUCCEEDED
    assert backend.of("extend") == []
    assert backend.inner.engine.peek("jobs", message_id) is None
