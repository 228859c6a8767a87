"""The console's page, assets and `/api/status` on a running worker (real sockets)."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import anyio
import pytest
from structlog.testing import capture_logs

from tests.ops.test_listener import listening
from worker import LeaseConfig, Message, Worker, WorkerConfig
from worker.ops.history import History
from worker.runtime.metrics import OUTCOMES
from worker.testing import run_worker

pytestmark = pytest.mark.asyncio


def holding_app(started: anyio.Event, release: anyio.Event) -> Worker:
    lease = LeaseConfig(visibility_s=2, extension_s=2, renew_margin_s=1, coalesce_window_s=0.2)
    app = Worker(WorkerConfig(wait_s=1, lease=lease))

    @app.handler("jobs")
    async def hold(message: Message) -> None:
        started.set()
        await release.wait()

    return app


async def fetch(port: int, path: str) -> tuple[int, dict[str, str], bytes]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}{path}") as response,
    ):
        return response.status, dict(response.headers), await response.read()


async def test_status_lists_held_messages_with_their_lease_and_never_a_body() -> None:
    started, release = anyio.Event(), anyio.Event()
    async with (
        run_worker(holding_app(started, release)) as harness,
        listening(harness.supervisor, history=History(interval_s=0.2, span_s=10)) as port,
    ):
        message_id = await harness.send("jobs", {"card": "4111-1111-1111-1111"})
        await started.wait()
        status, headers, body = await fetch(port, "/api/status")
        release.set()
    assert status == 200 and headers["Content-Type"].startswith("application/json")
    answer = json.loads(body)
    assert answer["version"] == 1
    assert answer["worker"]["state"] == "running"
    [queue] = answer["queues"]
    assert queue["queue"] == "jobs" and queue["in_flight"] == 1 and queue["max_in_flight"] == 10
    assert queue["in_flight_limit"] == 120_000
    assert queue["received"] == 1 and queue["outcomes"]["succeeded"] == 0
    assert sorted(queue["outcomes"]) == sorted(OUTCOMES)
    points = answer["history"]["points"]
    assert points[-1]["queues"]["jobs"]["received"] in (0, 1)
    assert answer["messages_total"] == 1
    [row] = answer["messages"]
    assert row["message_id"] == message_id and row["queue"] == "jobs"
    assert row["handler"].endswith("hold") and row["receive_count"] == 1
    assert row["state"] == "running" and 0 < row["deadline_in_s"] <= 2
    assert "body" not in row and b"4111" not in body
    assert answer["history"]["points"] and answer["history"]["interval_s"] == 0.2


async def test_bodies_only_when_asked_and_cut() -> None:
    started, release = anyio.Event(), anyio.Event()
    async with (
        run_worker(holding_app(started, release)) as harness,
        listening(harness.supervisor, console_bodies=True) as port,
    ):
        await harness.send("jobs", {"big": "x" * 5000})
        await started.wait()
        _, _, body = await fetch(port, "/api/status")
        release.set()
    [row] = json.loads(body)["messages"]
    assert len(row["body"]) == 2000 and row["body"].startswith('{"big": "xxx')


async def test_the_page_and_its_assets_are_served_with_a_strict_policy() -> None:
    started, release = anyio.Event(), anyio.Event()
    release.set()
    async with (
        run_worker(holding_app(started, release)) as harness,
        listening(harness.supervisor) as port,
    ):
        page = await fetch(port, "/")
        script = await fetch(port, "/console/console.js")
        style = await fetch(port, "/console/console.css")
    assert page[0] == 200 and b'<table id="messages">' in page[2]
    assert script[0] == 200 and script[1]["Content-Type"].startswith("text/javascript")
    assert style[0] == 200 and style[1]["Content-Type"].startswith("text/css")
    policy = page[1]["Content-Security-Policy"]
    assert "default-src 'none'" in policy and "script-src 'self'" in policy
    for asset in (page[2], script[2], style[2]):  # offline: nothing from another host
        assert b"http://" not in asset.replace(b"http://127.0.0.1", b"")
        assert b"https://" not in asset


async def test_a_page_served_under_another_host_name_gets_nothing() -> None:
    # DNS rebinding: a page of evil.example whose name now resolves to 127.0.0.1 would read
    # the console with the operator's browser. Loopback-bound, only loopback names answer.
    started, release = anyio.Event(), anyio.Event()
    release.set()
    async with (
        run_worker(holding_app(started, release)) as harness,
        listening(harness.supervisor) as port,
        aiohttp.ClientSession() as session,
    ):
        answers = {}
        for path in ("/", "/api/status", "/api/dlq", "/metrics", "/healthz"):
            headers = {"Host": f"evil.example:{port}"}
            async with session.get(f"http://127.0.0.1:{port}{path}", headers=headers) as got:
                answers[path] = got.status
        async with session.get(
            f"http://127.0.0.1:{port}/api/status", headers={"Host": f"localhost:{port}"}
        ) as local:
            assert local.status == 200
    assert answers == {
        "/": 421,
        "/api/status": 421,
        "/api/dlq": 421,
        "/metrics": 200,
        "/healthz": 200,
    }


async def statuses(port: int, host: str) -> dict[str, int]:
    """Each path's status for a request to 127.0.0.1:port naming `host` in its Host."""
    answers = {}
    async with aiohttp.ClientSession() as session:
        for path in ("/", "/api/status", "/api/dlq", "/metrics", "/healthz"):
            async with session.get(f"http://127.0.0.1:{port}{path}", headers={"Host": host}) as got:
                answers[path] = got.status
    return answers


CONSOLE_ONLY_FOR_ITS_NAMES = {"/": 421, "/api/status": 421, "/api/dlq": 421}
EVERY_PATH = {"/": 200, "/api/status": 200, "/api/dlq": 200, "/metrics": 200, "/healthz": 200}


async def test_bound_to_every_address_the_console_answers_only_to_its_names() -> None:
    """Issue 42, 5: in a pod the listener binds 0.0.0.0, and through a port-forward a
    rebinding page reaches it as 127.0.0.1 with its own name. The loopback names still
    answer (the port-forward); the pod's address and any other name do not, but for
    Prometheus and the probes."""
    started, release = anyio.Event(), anyio.Event()
    release.set()
    async with (
        run_worker(holding_app(started, release)) as harness,
        listening(harness.supervisor, host="0.0.0.0") as port,
    ):
        evil = await statuses(port, f"evil.example:{port}")
        pod = await statuses(port, f"10.0.1.7:{port}")
        forwarded = await statuses(port, "localhost:8080")  # port-forward 8080:9100
    assert evil == pod == {**CONSOLE_ONLY_FOR_ITS_NAMES, "/metrics": 200, "/healthz": 200}
    assert forwarded == EVERY_PATH


async def test_configured_names_replace_the_loopback_ones() -> None:
    started, release = anyio.Event(), anyio.Event()
    release.set()
    hosts = ["worker.orders.internal", "10.0.1.7"]
    async with (
        run_worker(holding_app(started, release)) as harness,
        listening(harness.supervisor, host="0.0.0.0", console_hosts=hosts) as port,
    ):
        named = await statuses(port, f"worker.orders.internal:{port}")
        address = await statuses(port, "10.0.1.7")
        loopback = await statuses(port, f"localhost:{port}")
    assert named == address == EVERY_PATH
    assert loopback == {**CONSOLE_ONLY_FOR_ITS_NAMES, "/metrics": 200, "/healthz": 200}


async def test_without_the_console_only_metrics_and_probes_answer() -> None:
    started, release = anyio.Event(), anyio.Event()
    release.set()
    async with (
        run_worker(holding_app(started, release)) as harness,
        listening(harness.supervisor, console=False) as port,
    ):
        statuses = [(await fetch(port, path))[0] for path in ("/", "/api/status", "/api/dlq")]
        assert (await fetch(port, "/metrics"))[0] == 200
    assert statuses == [404, 404, 404]


async def test_a_failing_history_sample_is_logged_and_the_worker_runs_on() -> None:
    three_failures = anyio.Event()

    class Broken(History):
        calls = 0

        def add(self, at: float, counts: Any) -> None:
            self.calls += 1
            if self.calls == 3:
                three_failures.set()
            raise RuntimeError("broken")

    started, release = anyio.Event(), anyio.Event()
    with capture_logs() as logs:
        async with (
            run_worker(holding_app(started, release)) as harness,
            listening(harness.supervisor, history=Broken(interval_s=0.05, span_s=1)) as port,
        ):
            await harness.send("jobs", {})
            await started.wait()
            with anyio.fail_after(5):
                await three_failures.wait()
            assert (await fetch(port, "/healthz"))[0] == 200
            release.set()
            await harness.wait_for_handled(1)
    failed = [e for e in logs if e["event"] == "console.history_failed"]
    assert len(failed) == 1 and failed[0]["error"] == "RuntimeError"
