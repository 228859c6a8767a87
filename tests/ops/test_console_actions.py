"""The console's one mutating action, redrive: refused (and nothing moves) without the
token, with a wrong one, from another origin, without JSON or without the name typed back;
done with all of them."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest

from backends.memory import MemoryBackend
from tests.ops.test_listener import listening
from worker import Message, OutgoingMessage, Worker, WorkerConfig
from worker.testing import WorkerHarness, run_worker
from worker.types import QueueSpec, RedrivePolicy

pytestmark = pytest.mark.asyncio

TOKEN = "s3cret-console-token"


@asynccontextmanager
async def dead_lettered(
    token: str | None, **options: Any
) -> AsyncIterator[tuple[WorkerHarness, int]]:
    app = Worker(WorkerConfig(wait_s=1))

    @app.handler("orders")
    async def fulfil(message: Message) -> None:
        pass

    backend = MemoryBackend()
    await backend.create_queue(QueueSpec("orders-dlq"))
    await backend.create_queue(QueueSpec("orders", redrive=RedrivePolicy("orders-dlq", 1)))
    await backend.send("orders", [OutgoingMessage(body='{"poison": 1}')])
    await backend.receive("orders", max_messages=1, wait_s=0, visibility_s=0)
    assert await backend.receive("orders", max_messages=1, wait_s=0) == []  # dead-lettered
    async with (
        run_worker(app, backend=backend) as harness,
        listening(harness.supervisor, console_token=token, **options) as port,
    ):
        yield harness, port


async def post(port: int, body: Any, **headers: str) -> tuple[int, dict[str, Any]]:
    data = body if isinstance(body, str) else json.dumps(body)
    headers.setdefault("Content-Type", "application/json")
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"http://127.0.0.1:{port}/api/dlq/redrive", data=data, headers=headers
        ) as response,
    ):
        if response.content_type != "application/json":
            return response.status, {"text": await response.text()}
        return response.status, await response.json()


def nothing_moved(harness: WorkerHarness) -> None:
    assert harness.engine.counts("orders-dlq").visible == 1
    assert harness.engine.list_message_move_tasks("orders-dlq", 10) == []


ASK = {"queue": "orders-dlq", "confirm": "orders-dlq"}
BEARER = f"Bearer {TOKEN}"


@pytest.mark.parametrize("token", [None, TOKEN])
async def test_without_the_token_401_and_nothing_moves(token: str | None) -> None:
    async with dead_lettered(token) as (harness, port):
        assert (await post(port, ASK))[0] == 401
        assert (await post(port, ASK, Authorization="Bearer wrong"))[0] == 401
        assert (await post(port, ASK, Authorization=TOKEN))[0] == 401  # not a bearer
        nothing_moved(harness)


async def test_cross_origin_form_or_unconfirmed_requests_change_nothing() -> None:
    async with dead_lettered(TOKEN) as (harness, port):
        evil = await post(port, ASK, Authorization=BEARER, Origin="http://evil.example")
        form = await post(
            port,
            "queue=orders-dlq&confirm=orders-dlq",
            Authorization=BEARER,
            **{"Content-Type": "application/x-www-form-urlencoded"},
        )
        unconfirmed = await post(port, {"queue": "orders-dlq"}, Authorization=BEARER)
        other = await post(port, {"queue": "orders", "confirm": "orders"}, Authorization=BEARER)
        nothing_moved(harness)
    assert [evil[0], form[0], unconfirmed[0], other[0]] == [403, 415, 400, 404]


async def test_with_the_token_the_same_origin_and_the_name_it_redrives() -> None:
    async with dead_lettered(TOKEN) as (harness, port):
        origin = f"http://127.0.0.1:{port}"
        status, answer = await post(port, ASK, Authorization=BEARER, Origin=origin)
        assert status == 202 and answer["queue"] == "orders-dlq"
        [handled] = await harness.wait_for_handled(1)
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{port}/api/dlq") as response,
        ):
            listing = await response.json()
    assert handled.message.body == {"poison": 1}
    [row] = listing["dead_letter_queues"]
    assert (row["queue"], row["sources"], row["visible"]) == ("orders-dlq", ["orders"], 0)
    assert row["tasks"] == [{"status": "COMPLETED", "moved": 1, "to_move": 1}]
    assert listing["actions"] is True


async def test_a_rebound_page_whose_origin_matches_its_host_changes_nothing() -> None:
    """Issue 42, 5: bound to every address (a pod, reached through a port-forward), a
    page of evil.example rebound to the listener names itself in Host and Origin alike,
    and has the token (say, pasted): the listener answers only to its own names."""
    async with dead_lettered(TOKEN, host="0.0.0.0") as (harness, port):
        rebound = await post(
            port,
            ASK,
            Authorization=BEARER,
            Host=f"evil.example:{port}",
            Origin=f"http://evil.example:{port}",
        )
        nothing_moved(harness)
    assert rebound == (421, {"text": "this listener answers only to its own names"})


async def test_an_origin_is_one_of_the_listeners_names_on_the_port_asked() -> None:
    async with dead_lettered(TOKEN, host="0.0.0.0") as (harness, port):
        local = {"Authorization": BEARER, "Host": f"localhost:{port}"}
        refused = [
            await post(port, ASK, **local, Origin="http://localhost:3000"),  # another server
            await post(port, ASK, **local, Origin="null"),  # a sandboxed frame, a file
            await post(port, ASK, **local, Origin=f"https://localhost:{port}"),
            await post(port, ASK, **local, Origin=f"http://127.0.0.1:{port}"),
        ]
        nothing_moved(harness)
        done = await post(port, ASK, **local, Origin=f"http://localhost:{port}")
    assert [status for status, _ in refused] == [403, 403, 403, 403]
    assert done[0] == 202


async def test_a_configured_name_is_the_one_the_redrive_accepts() -> None:
    hosts = ["worker.orders.internal"]
    async with dead_lettered(TOKEN, host="0.0.0.0", console_hosts=hosts) as (harness, port):
        loopback = await post(
            port,
            ASK,
            Authorization=BEARER,
            Host=f"localhost:{port}",
            Origin=f"http://localhost:{port}",
        )
        nothing_moved(harness)
        named = await post(
            port,
            ASK,
            Authorization=BEARER,
            Host=f"worker.orders.internal:{port}",
            Origin=f"http://worker.orders.internal:{port}",
        )
    assert (loopback[0], named[0]) == (421, 202)


async def test_malformed_requests_are_400_not_500() -> None:
    async with dead_lettered(TOKEN) as (harness, port):
        listed = await post(port, {"queue": [], "confirm": []}, Authorization=BEARER)
        boolean = await post(port, {**ASK, "max_per_second": True}, Authorization=BEARER)
        nothing_moved(harness)
    assert (listed[0], boolean[0]) == (404, 400)


async def test_the_listing_is_served_again_for_five_seconds() -> None:
    async with dead_lettered(TOKEN) as (harness, port), aiohttp.ClientSession() as session:
        engine_calls: list[str] = []
        original = harness.backend.queue_info

        async def counted(queue: str) -> Any:
            engine_calls.append(queue)
            return await original(queue)

        harness.backend.queue_info = counted  # type: ignore[method-assign]
        for _ in range(3):
            async with session.get(f"http://127.0.0.1:{port}/api/dlq") as response:
                assert response.status == 200
    assert engine_calls == ["orders-dlq"]
