"""Contract: the dead-letter tools' operations (`DeadLetterAdmin`) on every backend.

moto has ListDeadLetterSourceQueues but no message move tasks: those tests are strict xfails
on moto. Peeking is the engine's alone (SQS has no peek).
"""

from __future__ import annotations

import anyio
import pytest

from tests.contract import ContractBackend, MakeQueue, receive_one, send_bodies
from worker.backend import DeadLetterAdmin
from worker.errors import FatalBackendError, UnsupportedOperation
from worker.ops import dead_letters
from worker.types import RedrivePolicy

pytestmark = pytest.mark.asyncio


async def _dead_lettered(backend: ContractBackend, make_queue: MakeQueue) -> tuple[str, str, str]:
    """A source queue whose one message reached its dead-letter queue."""
    dlq = await make_queue()
    queue = await make_queue(redrive=RedrivePolicy(dead_letter_queue=dlq, max_receive_count=1))
    [message_id] = await send_bodies(backend, queue, "poison")
    await receive_one(backend, queue, wait_s=2, visibility_s=0)
    assert list(await backend.receive(queue, max_messages=10, wait_s=0)) == []
    return queue, dlq, message_id


async def test_a_dead_letter_queue_names_its_sources(
    backend: ContractBackend, make_queue: MakeQueue
) -> None:
    assert isinstance(backend, DeadLetterAdmin)
    queue, dlq, _ = await _dead_lettered(backend, make_queue)
    assert await backend.dead_letter_source_queues(dlq) == [queue]
    assert await backend.dead_letter_source_queues(queue) == []
    assert {queue, dlq} <= set(await backend.list_queues("contract-"))
    [found] = [q for q in await dead_letters.dead_letter_queues(backend, dlq) if q.name == dlq]
    assert found.sources == (queue,)
    assert found.visible + found.in_flight == 1


@pytest.mark.moto_gap("no StartMessageMoveTask, ListMessageMoveTasks or CancelMessageMoveTask")
async def test_redrive_moves_the_message_back_with_a_new_id(
    backend: ContractBackend, make_queue: MakeQueue
) -> None:
    queue, dlq, message_id = await _dead_lettered(backend, make_queue)
    handle = await dead_letters.redrive(backend, dlq, max_per_second=10)
    assert handle
    with anyio.fail_after(10):  # the service's task: polled, as SQS's has to be
        while (  # noqa: ASYNC110
            tasks := await dead_letters.move_tasks(backend, dlq)
        )[0].status == "RUNNING":
            await anyio.sleep(0.2)
    [task] = tasks
    assert (task.status, task.moved, task.to_move, task.source) == ("COMPLETED", 1, 1, dlq)
    assert task.max_per_second == 10 and task.destination is None
    back = await receive_one(backend, queue, wait_s=2)
    assert back.body == "poison" and back.message_id != message_id
    assert (await backend.queue_info(dlq)).approximate_visible == 0


@pytest.mark.moto_gap("no CancelMessageMoveTask")
async def test_cancelling_an_unknown_task_is_a_clear_error(
    backend: ContractBackend, make_queue: MakeQueue
) -> None:
    with pytest.raises(FatalBackendError) as raised:
        await dead_letters.cancel_move(backend, "no-such-task")
    assert raised.value.code == "ResourceNotFoundException"


async def test_inspect_peeks_where_it_can_and_says_when_it_received(
    backend: ContractBackend, make_queue: MakeQueue
) -> None:
    _, dlq, message_id = await _dead_lettered(backend, make_queue)
    before = (await backend.queue_info(dlq)).approximate_visible
    first = await dead_letters.inspect(backend, dlq, 10)
    second = await dead_letters.inspect(backend, dlq, 10)
    [one], [two] = first.messages, second.messages
    assert one.message_id == two.message_id == message_id
    if backend.limits.supports_peek:
        assert not first.changed and two.receive_count == one.receive_count
    else:
        assert first.changed and two.receive_count == one.receive_count + 1
        with pytest.raises(UnsupportedOperation, match="cannot peek"):
            await dead_letters.admin(backend).peek(dlq, 1)
    assert (await backend.queue_info(dlq)).approximate_visible == before == 1
