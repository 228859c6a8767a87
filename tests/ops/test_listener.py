"""The ops listener on a running worker: /metrics, /healthz, /readyz over real sockets.

Real time, not looptime: the listener is a real server on 127.0.0.1, and a blocked loop is
exactly what virtual time cannot show. Each test is kept under about 2 s.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import anyio
import pytest
from prometheus_client import REGISTRY, Counter

from backends.memory import MemoryBackend
from tests.recording import RecordingBackend
from worker import Message, ShutdownConfig, Worker, WorkerConfig
from worker.errors import ConfigError
from worker.ops import HealthPolicy, OpsListener
from worker.runtime.supervisor import Supervisor
from worker.testing import run_worker
from worker.types import OutgoingMessage, QueueSpec

pytestmark = pytest.mark.asyncio


async def get(port: int, path: str, method: str = "GET") -> tuple[int, str]:
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, f"http://127.0.0.1:{port}{path}") as response,
    ):
        return response.status, await response.text()


@asynccontextmanager
async def listening(supervisor: Supervisor, **options: Any) -> AsyncIterator[int]:
    async with OpsListener(supervisor, port=0, **options) as ops:
        assert ops.port is not None
        yield ops.port


def quick_app() -> Worker:
    app = Worker(WorkerConfig(wait_s=1, shutdown=ShutdownConfig(grace_s=5, flush_timeout_s=2)))

    @app.handler("jobs")
    async def handle(message: Message) -> None:
        pass

    return app


async def test_metrics_holds_the_runtime_the_process_and_the_users_own_metrics() -> None:
    user = Counter("ops_test_user_jobs", "A metric of the application's own.")
    try:
        user.inc(7)
        async with run_worker(quick_app()) as harness, listening(harness.supervisor) as port:
            ids = [await harness.send("jobs", {"n": n}) for n in range(3)]
            await harness.wait_for_handled(3)
            status, text = await get(port, "/metrics")
    finally:
        REGISTRY.unregister(user)
    assert status == 200
    lines = set(text.splitlines())
    assert 'lease_worker_messages_handled_total{outcome="succeeded",queue="jobs"} 3.0' in lines
    # Every outcome's series exists from the start, so rate() answers 0, not no data.
    assert 'lease_worker_messages_handled_total{outcome="duplicate",queue="jobs"} 0.0' in lines
    assert (
        'lease_worker_handler_info{handler="quick_app.<locals>.handle",queue="jobs"} 1.0' in lines
    )
    assert "lease_worker_ready 1.0" in lines and "lease_worker_healthy 1.0" in lines
    assert "ops_test_user_jobs_total 7.0" in lines
    assert any(line.startswith("process_cpu_seconds_total ") for line in lines)
    assert any(line.startswith("python_gc_collections_total") for line in lines)
    assert (
        'lease_worker_api_call_duration_seconds_count{operation="receive",queue="jobs",'
        'wait="long_poll"}' in text
    )
    assert not any(message_id in text for message_id in ids)  # never a message id as label


async def test_unknown_paths_are_404_and_other_methods_405() -> None:
    async with run_worker(quick_app()) as harness, listening(harness.supervisor) as port:
        assert (await get(port, "/nothing"))[0] == 404
        assert (await get(port, "/console/other.js"))[0] == 404
        assert (await get(port, "/metrics/x"))[0] == 404
        assert (await get(port, "/metrics", "POST"))[0] == 405
        assert (await get(port, "/healthz", "DELETE"))[0] == 405


async def test_a_port_already_taken_is_one_config_error() -> None:
    async with run_worker(quick_app()) as harness, listening(harness.supervisor) as port:
        with pytest.raises(ConfigError, match=f"cannot listen on 127.0.0.1:{port}"):
            async with OpsListener(harness.supervisor, port=port):
                pass


async def test_readyz_starting_ready_then_unready_at_the_drain_before_any_release() -> None:
    app = Worker(WorkerConfig(wait_s=1, shutdown=ShutdownConfig(grace_s=0.5, flush_timeout_s=2)))
    started = anyio.Event()

    @app.handler("jobs")
    async def long(message: Message) -> None:
        started.set()
        await anyio.sleep_forever()

    backend = RecordingBackend()
    await backend.create_queue(QueueSpec("jobs"))
    supervisor = Supervisor(app, backend)
    async with listening(supervisor) as port, anyio.create_task_group() as tasks:
        status, body = await get(port, "/readyz")
        assert (status, json.loads(body)["checks"]) == (503, {"worker": "starting"})
        assert (await get(port, "/healthz"))[0] == 200  # start-up is alive
        await tasks.start(supervisor.run)
        assert (await get(port, "/readyz"))[0] == 200
        await backend.send("jobs", [OutgoingMessage(body="{}")])
        await started.wait()
        supervisor.request_shutdown()
        status, body = await get(port, "/readyz")
        assert (status, json.loads(body)["checks"]) == (503, {"worker": "shutting down"})
        assert backend.of("release") == []  # unready first, released later
        status, text = await get(port, "/metrics")  # a scrape during the drain works
        assert status == 200 and "lease_worker_ready 0.0" in text
    assert len(backend.of("release")) == 1


async def test_readyz_names_a_queue_whose_receives_fail() -> None:
    async with run_worker(quick_app()) as harness, listening(harness.supervisor) as port:
        harness.supervisor.receivers["jobs"].reachable = False
        status, body = await get(port, "/readyz")
    assert status == 503
    assert json.loads(body)["checks"] == {"worker": "ok", "queue jobs": "receive failing"}


async def test_healthz_fails_while_the_loop_is_blocked_and_recovers_after() -> None:
    blocking = threading.Event()
    app = Worker(WorkerConfig(wait_s=1))

    @app.handler("jobs")
    async def blocks_the_loop(message: Message) -> None:
        blocking.set()
        time.sleep(1.0)  # noqa: ASYNC251 - the fault under test

    def probe_during_the_block(port: int) -> tuple[int, dict[str, Any]]:
        assert blocking.wait(5)
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as answer:
                return answer.status, json.loads(answer.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())

    policy = HealthPolicy(max_loop_lag_s=0.3)
    async with (
        run_worker(app, backend=MemoryBackend(), loop_lag_interval_s=0.1) as harness,
        listening(harness.supervisor, policy=policy) as port,
    ):
        assert (await get(port, "/healthz"))[0] == 200
        async with anyio.create_task_group() as tasks:
            answers: list[tuple[int, dict[str, Any]]] = []

            async def probe() -> None:
                answers.append(await anyio.to_thread.run_sync(probe_during_the_block, port))

            tasks.start_soon(probe)
            await harness.send("jobs", {})
        [(status, body)] = answers
        assert status == 503
        assert body["checks"]["event_loop"].startswith("lag ")
        assert body["checks"]["lease_keeper"] == "ok"
        lag = harness.supervisor.loop_lag
        with anyio.fail_after(5):  # the watcher's next wake-up on time clears it
            while lag.seconds(anyio.current_time()) > policy.max_loop_lag_s:
                await lag.next_sample()
        assert (await get(port, "/healthz"))[0] == 200
