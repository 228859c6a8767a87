"""Deletes go out ten to a call as soon as ten are waiting, and what is left waits out the
linger (`settle_linger_s`) for company, never longer. Virtual time (looptime).

Every settlement decided is sent, even when the supervisor is cancelled from outside (an
embedding application going down): a release waiting out a retry pause, a delete waiting
for a renewal, a delete cut off on the wire.
"""

from __future__ import annotations

from collections.abc import Sequence

import anyio
import pytest

from tests.recording import RecordingBackend
from tests.runtime.wire import WireBackend
from worker import Message, TransientBackendError, Worker, WorkerConfig
from worker.runtime.supervisor import Supervisor
from worker.testing import run_worker
from worker.types import BatchResult, OutgoingMessage, QueueSpec, VisibilityChange

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]


async def _send(backend: RecordingBackend, queue: str, count: int) -> list[str]:
    ids = []
    for i in range(count):
        result = await backend.inner.send(queue, [OutgoingMessage(body=f'{{"n": {i}}}')])
        ids.append(result.message_ids["0"])
    return ids


async def test_a_full_batch_goes_at_once_and_the_rest_after_the_linger() -> None:
    app = Worker(WorkerConfig(max_in_flight=10, wait_s=20, settle_linger_s=1.0))

    @app.handler("jobs")
    async def job(message: Message) -> None:
        await anyio.sleep(0.01 * int(message.body["n"]))  # they end one after another

    backend = RecordingBackend()
    await backend.create_queue(QueueSpec("jobs"))
    for first, count in ((1, 10), (1, 3)):
        entries = [
            OutgoingMessage(entry_id=str(i), body=f'{{"n": {first + i}}}') for i in range(count)
        ]
        await backend.inner.send("jobs", entries)
    start = anyio.current_time()
    async with run_worker(app, backend=backend) as harness:
        await harness.wait_for_handled(13)
        await harness.wait_until_idle()
    deletes = [
        (call.entries, call.at - start) for call in backend.calls if call.operation == "delete"
    ]
    # The first receive's ten handlers end 10 ms apart: the tenth delete fills the batch,
    # which leaves at once (0.1 s), not at the first one's linger (1 s). The next receive
    # (at 0.1 s) brings three, done by 0.13 s; they wait the linger out from the first of
    # them (0.11 s + 1 s), then go.
    assert [(entries, round(at, 3)) for entries, at in deletes] == [(10, 0.1), (3, 1.11)]


# -- Cancelled from outside ----------------------------------------------------------------


async def test_a_release_waiting_out_a_retry_pause_is_sent_at_outside_cancellation() -> None:
    """Defect 11: when the supervisor was cancelled from outside, a release that was waiting
    out its retry pause was skipped: the message stayed invisible."""
    app = Worker(WorkerConfig(max_in_flight=1, wait_s=20))
    failed_once = anyio.Event()

    @app.handler("jobs", on_error="release")
    async def job(message: Message) -> None:
        raise RuntimeError("fails")

    backend = RecordingBackend()
    original = backend.release

    async def release(queue: str, entries: Sequence[VisibilityChange]) -> BatchResult:
        try:
            return await original(queue, entries)
        finally:
            failed_once.set()

    backend.release = release  # type: ignore[method-assign]
    backend.failures["release"] = [TransientBackendError("throttled", code="Throttling")]
    await backend.create_queue(QueueSpec("jobs"))
    [message_id] = await _send(backend, "jobs", 1)
    supervisor = Supervisor(app, backend)
    await supervisor.prepare()
    async with anyio.create_task_group() as tasks:
        await tasks.start(supervisor.run)
        await failed_once.wait()  # the release failed; its retry waits a second
        tasks.cancel_scope.cancel()
    assert len(backend.of("release")) == 2
    assert backend.inner.engine.counts("jobs").visible == 1
    snapshot = backend.inner.engine.peek("jobs", message_id)
    assert snapshot is not None and snapshot.receive_count == 1


async def test_outside_cancellation_sends_a_delete_that_would_have_waited_for_a_renewal() -> None:
    """A delete near its lease's deadline waits for a renewal first; when the supervisor is
    cancelled from outside, the keeper is gone, so the delete must go out at once."""
    app = Worker(WorkerConfig(max_in_flight=1, wait_s=20))
    submitted = anyio.Event()

    @app.handler("jobs")
    async def job(message: Message) -> None:
        await anyio.sleep(25)  # 5 s left: too little for a delete call and a renewal after

    backend = RecordingBackend()
    await backend.create_queue(QueueSpec("jobs"))
    [message_id] = await _send(backend, "jobs", 1)
    supervisor = Supervisor(app, backend, observers=[lambda *_: submitted.set()])
    await supervisor.prepare()
    async with anyio.create_task_group() as tasks:
        await tasks.start(supervisor.run)
        await submitted.wait()  # the delete is pending in the settler
        cancelled_at = anyio.current_time()
        tasks.cancel_scope.cancel()
    assert anyio.current_time() - cancelled_at < 1
    assert len(backend.of("delete")) == 1
    assert backend.inner.engine.peek("jobs", message_id) is None


async def test_a_delete_on_the_wire_at_outside_cancellation_is_sent_again() -> None:
    """A delete cancelled on the wire with the settler (the supervisor cancelled from
    outside) was lost: its handled message lapsed and ran again elsewhere."""
    app = Worker(WorkerConfig(max_in_flight=1, wait_s=20))
    submitted = anyio.Event()

    @app.handler("jobs")
    async def job(message: Message) -> None:
        return None

    backend = WireBackend(latency={"delete": 3.0})
    await backend.create_queue(QueueSpec("jobs"))
    [message_id] = await _send(backend, "jobs", 1)
    supervisor = Supervisor(app, backend, observers=[lambda *_: submitted.set()])
    await supervisor.prepare()
    async with anyio.create_task_group() as tasks:
        await tasks.start(supervisor.run)
        await submitted.wait()
        await anyio.sleep(1)  # the delete is on the wire (3 s)
        tasks.cancel_scope.cancel()
    assert backend.inner.engine.peek("jobs", message_id) is None
