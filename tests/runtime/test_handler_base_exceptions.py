"""Issue 27, defect 6: a handler raising GeneratorExit fails its message, not the worker.

The runtime re-raised GeneratorExit as if its own coroutine were being closed: the handler
task ended with it, the supervisor took that for a crash of the runtime (exit 1), and the
same message, delivered again after the restart, killed the next worker too. Handler code
that raises it (or a subclass of it, or any BaseException of its own) now fails only its
message: the error policy applies and the worker goes on. KeyboardInterrupt and SystemExit
raised by handler code keep their documented behaviour (a failure of the message), tested
in test_crash_handlers.py.
"""

from __future__ import annotations

import asyncio

import anyio
import pytest
from structlog.testing import capture_logs

from backends.memory import MemoryBackend
from worker import (
    Backoff,
    ErrorPolicy,
    LeaseConfig,
    Message,
    OnError,
    Outcome,
    Worker,
    WorkerConfig,
)
from worker.core.settlement import Action, Settlement
from worker.runtime.handlers import raised_by_handler
from worker.testing import run_worker
from worker.types import OutgoingMessage, QueueSpec

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]

LEASE = LeaseConfig(visibility_s=30, extension_s=30, renew_margin_s=10)
#: The failed message comes back after 60 s: long enough to see the others handled first.
POLICY = ErrorPolicy(on_error=OnError.BACKOFF, backoff=Backoff(base_s=60))


class Closing(GeneratorExit):
    """An application's own subclass of GeneratorExit."""


class Poison(BaseException):
    """An application's own BaseException subclass."""


RAISED: dict[str, type[BaseException]] = {
    "GeneratorExit": GeneratorExit,
    "a subclass of GeneratorExit": Closing,
    "a BaseException of its own": Poison,
}


def _app(max_in_flight: int = 3) -> Worker:
    return Worker(WorkerConfig(lease=LEASE, max_in_flight=max_in_flight, wait_s=20))


async def _backend(queue: str, count: int, *, groups: str = "") -> MemoryBackend:
    backend = MemoryBackend()
    await backend.create_queue(QueueSpec(queue, visibility_timeout_s=30))
    for n in range(count):
        body = f'{{"n": {n}}}'
        message = OutgoingMessage(body=body)
        if groups:
            message = OutgoingMessage(body=body, group_id=groups[n], deduplication_id=str(n))
        await backend.send(queue, [message])
    return backend


def _visible_and_in_flight(backend: MemoryBackend, queue: str) -> tuple[int, int]:
    counts = backend.engine.counts(queue)
    return counts.visible, counts.in_flight


@pytest.mark.parametrize("raised", list(RAISED))
@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_generator_exit_from_a_handler_fails_only_its_message(raised: str, kind: str) -> None:
    app = _app()
    finished: list[int] = []

    async def handle_async(message: Message) -> None:
        if message.body["n"] == 0:
            raise RAISED[raised]
        await anyio.sleep(1)  # the innocent ones are still running when the other fails
        finished.append(message.body["n"])

    def handle_sync(message: Message) -> None:
        if message.body["n"] == 0:
            raise RAISED[raised]
        finished.append(message.body["n"])

    app.handler("jobs", on_error=POLICY)(handle_async if kind == "async" else handle_sync)
    backend = await _backend("jobs", 3)
    with capture_logs() as logs:
        async with run_worker(app, backend=backend) as harness:
            with anyio.fail_after(30):
                records = await harness.wait_for_handled(3)
                await harness.wait_until_idle()
    # run_worker raised nothing: the worker did not crash.
    assert [e for e in logs if e["event"] == "worker.crashed"] == []
    by_n = {record.message.raw_body: record for record in records}
    poisoned = by_n['{"n": 0}']
    assert (poisoned.outcome, poisoned.settlement) == (
        Outcome.FAILED,
        Settlement(Action.RELEASE, 60),
    )
    assert sorted(finished) == [1, 2]
    assert [by_n[f'{{"n": {n}}}'].outcome for n in (1, 2)] == [Outcome.SUCCEEDED] * 2
    assert _visible_and_in_flight(backend, "jobs") == (0, 1)  # the poisoned one, for 60 s
    failures = [e for e in logs if e["event"] == "handler.failed"]
    assert len(failures) == 1
    assert failures[0]["log_level"] == "error"


async def test_the_same_poison_delivered_again_fails_again_and_the_worker_goes_on() -> None:
    app = _app(max_in_flight=1)
    runs: list[int] = []

    @app.handler("jobs")  # OnError.RELEASE: back at once, received again at once
    async def poisoned(message: Message) -> None:
        runs.append(message.receive_count)
        if message.receive_count < 4:
            raise GeneratorExit

    backend = await _backend("jobs", 1)
    async with run_worker(app, backend=backend) as harness:
        with anyio.fail_after(30):
            records = await harness.wait_for_handled(4)
            await harness.wait_until_idle()
    assert runs == [1, 2, 3, 4]
    assert [r.outcome for r in records] == [Outcome.FAILED] * 3 + [Outcome.SUCCEEDED]
    assert _visible_and_in_flight(backend, "jobs") == (0, 0)


async def test_generator_exit_in_a_fifo_group_fails_its_message_and_releases_the_rest() -> None:
    app = _app(max_in_flight=4)

    @app.handler("jobs.fifo", on_error=POLICY)
    async def handle(message: Message) -> None:
        if message.body["n"] == 0:
            raise GeneratorExit

    backend = await _backend("jobs.fifo", 4, groups="aabb")
    async with run_worker(app, backend=backend) as harness:
        with anyio.fail_after(30):
            records = await harness.wait_for_handled(4)
            await harness.wait_until_idle()
    outcomes = {r.message.raw_body: r.outcome for r in records}
    assert [outcomes[f'{{"n": {n}}}'] for n in range(4)] == [
        Outcome.FAILED,
        Outcome.SKIPPED,
        Outcome.SUCCEEDED,
        Outcome.SUCCEEDED,
    ]
    assert _visible_and_in_flight(backend, "jobs.fifo") == (1, 1)  # n=1 visible, n=0 for 60 s


@pytest.mark.parametrize("raised", list(RAISED))
async def test_generator_exit_from_a_batch_handler_fails_its_batch_and_the_worker_goes_on(
    raised: str,
) -> None:
    app = _app(max_in_flight=10)
    batches: list[list[int]] = []

    @app.batch_handler("jobs", max_size=3, max_wait_s=1, on_error=POLICY)
    async def handle(messages: list[Message]) -> None:
        batches.append(sorted(m.body["n"] for m in messages))
        if any(m.body["n"] == 0 for m in messages):
            raise RAISED[raised]

    backend = await _backend("jobs", 3)
    with capture_logs() as logs:
        async with run_worker(app, backend=backend) as harness:
            with anyio.fail_after(30):
                first = await harness.wait_for_handled(3)
                await harness.send("jobs", {"n": 3})  # a later batch still runs
                records = await harness.wait_for_handled(4)
                await harness.wait_until_idle()
    assert [e for e in logs if e["event"] == "worker.crashed"] == []
    assert batches == [[0, 1, 2], [3]]
    assert {(r.outcome, r.settlement) for r in first} == {
        (Outcome.FAILED, Settlement(Action.RELEASE, 60))
    }
    assert records[3].outcome is Outcome.SUCCEEDED
    assert _visible_and_in_flight(backend, "jobs") == (0, 3)  # the failed batch, for 60 s


async def test_a_coroutine_closed_from_outside_is_told_apart_from_a_raised_generator_exit() -> None:
    seen: list[bool] = []
    suspended = anyio.Event()

    async def body(raise_it: bool) -> None:
        task = asyncio.current_task()
        try:
            if raise_it:
                raise GeneratorExit
            suspended.set()
            await asyncio.get_running_loop().create_future()  # never done
        except GeneratorExit:
            seen.append(raised_by_handler(task))
            if not raise_it:
                raise  # what a coroutine being closed must do

    await asyncio.get_running_loop().create_task(body(raise_it=True))
    closed = asyncio.get_running_loop().create_task(body(raise_it=False))
    await suspended.wait()
    closed.get_coro().close()  # as the garbage collector does to a task's lost coroutine
    assert seen == [True, False]
    assert raised_by_handler(None) is False
    closed.cancel()  # its task, woken, finds its coroutine gone
    with pytest.raises(RuntimeError, match="cannot reuse already awaited coroutine"):
        await closed
