"""The dead-letter tools with a worker (virtual time): a poisoned message reaches the DLQ,
`inspect` shows it without changing it (the engine peeks), `redrive` moves it back and a
fixed handler processes it."""

from __future__ import annotations

import anyio
import pytest

from backends.memory import MemoryBackend
from worker import ErrorPolicy, Message, OnError, OutgoingMessage, Worker, WorkerConfig
from worker.errors import ConfigError
from worker.ops import dead_letters
from worker.testing import run_worker
from worker.types import QueueSpec, RedrivePolicy

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]


async def test_poisoned_inspected_redriven_then_handled() -> None:
    app = Worker(WorkerConfig(wait_s=1))
    fixed = False
    handled: list[str] = []

    @app.handler("orders", on_error=ErrorPolicy(on_error=OnError.RELEASE))
    async def fulfil(message: Message) -> None:
        if message.body.get("poison") and not fixed:
            raise RuntimeError("cannot fulfil")
        handled.append(message.message_id)

    backend = MemoryBackend()
    await backend.create_queue(QueueSpec("orders-dlq"))
    redrive = RedrivePolicy("orders-dlq", max_receive_count=2)
    await backend.create_queue(QueueSpec("orders", redrive=redrive))
    async with run_worker(app, backend=backend) as harness:
        poisoned = await harness.send("orders", {"poison": True})
        with anyio.fail_after(60):
            while backend.engine.counts("orders-dlq").visible == 0:  # noqa: ASYNC110
                await anyio.sleep(1)  # virtual time: the worker retries until the DLQ
        [dlq] = await dead_letters.dead_letter_queues(backend)
        assert (dlq.name, dlq.sources, dlq.visible) == ("orders-dlq", ("orders",), 1)

        first = await dead_letters.inspect(backend, "orders-dlq")
        again = await dead_letters.inspect(backend, "orders-dlq")
        [seen] = first.messages
        assert (seen.message_id, seen.receive_count, first.changed) == (poisoned, 2, False)
        assert again.messages[0].receive_count == 2  # a peek changes nothing
        assert backend.engine.counts("orders-dlq").visible == 1

        fixed = True
        await dead_letters.redrive(backend, "orders-dlq", max_per_second=1)
        with anyio.fail_after(60):
            while not handled:  # noqa: ASYNC110
                await anyio.sleep(1)
        [task] = await dead_letters.move_tasks(backend, "orders-dlq")
    assert (task.status, task.moved) == ("COMPLETED", 1)
    [redriven] = handled
    assert redriven != poisoned  # a move gives the message a new id
    assert backend.engine.counts("orders-dlq").visible == 0
    assert backend.engine.counts("orders").visible == 0


async def test_purge_needs_the_name_typed_back() -> None:
    backend = MemoryBackend()
    await backend.create_queue(QueueSpec("orders-dlq"))
    await backend.send("orders-dlq", [OutgoingMessage(body="x")])
    with pytest.raises(ConfigError, match="not confirmed"):
        await dead_letters.purge(backend, "orders-dlq", confirm="orders")
    assert backend.engine.counts("orders-dlq").visible == 1
    await dead_letters.purge(backend, "orders-dlq", confirm="orders-dlq")
    assert backend.engine.counts("orders-dlq").visible == 0


async def test_inspect_refuses_more_than_a_batch() -> None:
    backend = MemoryBackend()
    await backend.create_queue(QueueSpec("q"))
    with pytest.raises(ConfigError, match="from 1 to 10"):
        await dead_letters.inspect(backend, "q", 11)
