"""Issue 27, defect 7 (part): a FIFO group or an open batch whose handler task is refused.

The handler task group refuses new tasks once it is stopping (cancelled, or a handler task
crashed). The dispatcher registered a FIFO group (and `Batches` an open batch) before it
asked for the group's task: refused, the entry stayed registered with no task, and every
later message of that group (or of that queue's batch) was appended to it, silently, held
and renewed with nothing to run it. Now the entry is registered only with its task, so
each refused message is a failed dispatch: logged (`dispatch.failed`) and released at once.

The supervisor here is prepared, not run: one receive of its receiver leases and dispatches
the messages as a running worker does, with the handler task group swapped for one that is
stopping.
"""

from __future__ import annotations

import pytest
from structlog.testing import capture_logs

from backends.memory import MemoryBackend
from worker import LeaseConfig, Message, Worker, WorkerConfig
from worker.runtime.handler_tasks import HandlerTasks
from worker.runtime.supervisor import Supervisor
from worker.types import OutgoingMessage, QueueSpec

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]

LEASE = LeaseConfig(visibility_s=30, extension_s=30, renew_margin_s=10)


def _app() -> Worker:
    return Worker(WorkerConfig(lease=LEASE, max_in_flight=10, wait_s=20))


async def _queue(backend: MemoryBackend, queue: str, count: int) -> list[str]:
    await backend.create_queue(QueueSpec(queue, visibility_timeout_s=30))
    ids = []
    fifo = queue.endswith(".fifo")
    for n in range(count):
        body = f'{{"n": {n}}}'
        message = OutgoingMessage(body=body)
        if fifo:  # one group: its messages come in one receive, in order
            message = OutgoingMessage(body=body, group_id="a", deduplication_id=str(n))
        ids.append((await backend.send(queue, [message])).message_ids["0"])
    return ids


async def _stopping_supervisor(app: Worker, backend: MemoryBackend) -> Supervisor:
    supervisor = Supervisor(app, backend)
    await supervisor.prepare()
    tasks = await HandlerTasks(on_crash=lambda error: None).open()
    tasks.cancel()  # stopping: every new task is refused from now on
    supervisor.dispatcher.tasks = tasks
    return supervisor


async def _receive_once(supervisor: Supervisor, queue: str) -> int:
    """One receive of the supervisor's receiver of `queue`: leases and dispatches each
    message as a running worker does; returns how many are held."""
    return await supervisor._receiver(queue, None)._receive_once(10)


async def _assert_released(supervisor: Supervisor, backend: MemoryBackend, queue: str) -> None:
    assert supervisor.settler.pending == 3  # one release each, none held back
    await supervisor.settler.send_now()
    counts = backend.engine.counts(queue)
    assert (counts.visible, counts.in_flight) == (3, 0)
    assert supervisor.in_flight == 0


async def test_a_fifo_group_whose_task_is_refused_is_not_kept_and_its_messages_are_released() -> (
    None
):
    app = _app()
    ran: list[str] = []

    @app.handler("jobs.fifo")
    async def handle(message: Message) -> None:
        ran.append(message.message_id)

    backend = MemoryBackend()
    ids = await _queue(backend, "jobs.fifo", 3)
    supervisor = await _stopping_supervisor(app, backend)
    with capture_logs() as logs:
        assert await _receive_once(supervisor, "jobs.fifo") == 3  # one receive: all three
    failed = [e["message_id"] for e in logs if e["event"] == "dispatch.failed"]
    assert failed == ids  # each one, not the first alone
    await _assert_released(supervisor, backend, "jobs.fifo")
    assert ran == []


async def test_a_batch_whose_task_is_refused_is_not_kept_open_and_its_messages_are_released() -> (
    None
):
    app = _app()
    ran: list[int] = []

    @app.batch_handler("jobs", max_size=10, max_wait_s=1)
    async def handle(messages: list[Message]) -> None:
        ran.append(len(messages))

    backend = MemoryBackend()
    ids = await _queue(backend, "jobs", 3)
    supervisor = await _stopping_supervisor(app, backend)
    with capture_logs() as logs:
        assert await _receive_once(supervisor, "jobs") == 3  # one receive: all three
    failed = [e["message_id"] for e in logs if e["event"] == "dispatch.failed"]
    assert failed == ids
    await _assert_released(supervisor, backend, "jobs")
    assert ran == []
