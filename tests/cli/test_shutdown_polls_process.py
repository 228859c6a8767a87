"""Issue 27, defect 4, in a real process: SIGTERM while a long poll's answer is on the wire.

`lease-worker run --backend sqs` talks to `serve-sqs` (the engine, in a thread of this test)
through `bench.latency`, a proxy that delays every chunk `DELAY_S` each way. The queue holds
three messages before the worker starts, so its first long poll takes them as soon as it
reaches the engine (the engine's `receive` is wrapped to say so); the answer then spends
`DELAY_S` in the proxy, and the SIGTERM goes out inside that window. The worker used to
cancel the poll and exit, leaving the three invisible for `visibility_s` (30 s); it now
waits for the answer, releases the three at once without running a handler, and exits 0.

This module is also the worker's app (`APP`): the child imports it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import structlog

from backends.serve.sqs import sqs_endpoint_in_thread
from bench import _harness
from tests.json_log import JsonLog
from worker import LeaseConfig, Message, ShutdownConfig, Worker, WorkerConfig
from worker.types import OutgoingMessage, QueueSpec

pytestmark = [pytest.mark.process, pytest.mark.timeout(90)]

ROOT = Path(__file__).resolve().parents[2]
APP = "tests.cli.test_shutdown_polls_process:app"
QUEUE, MESSAGES = "jobs", 3
#: Each way through the proxy: the window in which the answer is on the wire.
DELAY_S = 2.0
#: Bound on any wait for an event or an exit: a hang fails the test instead of blocking.
WAIT_S = 60.0

app = Worker(
    WorkerConfig(
        lease=LeaseConfig(visibility_s=30, extension_s=30, renew_margin_s=10),
        wait_s=20,
        # Calls take 2 x DELAY_S through the proxy: the call timeout covers them.
        call_timeout_s=4 * DELAY_S,
        shutdown=ShutdownConfig(grace_s=15, flush_timeout_s=15),
    ),
    name="shutdown-polls",
)


@app.handler(QUEUE)
async def handle(message: Message) -> None:
    structlog.get_logger("tests.shutdown_polls").info("app.handled", message_id=message.message_id)


class HandOuts:
    """Wraps the engine's `receive`: `wait()` returns once a receive has handed messages out."""

    def __init__(self, engine: Any) -> None:
        self._receive = engine.receive
        self._handed_out = threading.Event()
        self.ids: list[str] = []
        engine.receive = self  # an instance attribute: the backend looks it up on each call

    def __call__(self, *args: Any, **kwargs: Any) -> Sequence[Any]:
        got: Sequence[Any] = self._receive(*args, **kwargs)
        if got:
            self.ids += [message.message_id for message in got]
            self._handed_out.set()
        return got

    def wait(self) -> bool:
        return self._handed_out.wait(WAIT_S)


@pytest.fixture
def proxy_to() -> Iterator[Any]:
    """`proxy_to(port)` starts `bench.latency` in front of `port`; returns its URL."""
    started: list[_harness.Process] = []

    def start(port: int | None) -> str:
        listen = _harness.free_port()
        command = [sys.executable, "-m", "bench.latency", "--listen", str(listen)]
        command += ["--to", f"127.0.0.1:{port}", "--delay-ms", str(int(DELAY_S * 1000))]
        process = _harness.Process(command, env={}, cwd=ROOT)
        started.append(process)
        assert process.ready.wait(WAIT_S), process.stderr_tail()
        return f"http://127.0.0.1:{listen}"

    yield start
    for process in started:
        process.stop()


def _worker(endpoint_url: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "LEASE_WORKER_"))}
    env |= {
        "AWS_ENDPOINT_URL": endpoint_url,
        "AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
    }
    command = [sys.executable, "-m", "worker", "run", APP, "--backend", "sqs"]
    return subprocess.Popen(
        [*command, "--log-format", "json"],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_sigterm_while_a_polls_answer_is_on_the_wire_releases_what_it_took(proxy_to: Any) -> None:
    with sqs_endpoint_in_thread() as endpoint:
        engine = endpoint.engine
        endpoint.call(engine.create_queue, QueueSpec(QUEUE, visibility_timeout_s=30))
        batch = [OutgoingMessage(entry_id=str(n), body=f'{{"n": {n}}}') for n in range(MESSAGES)]
        endpoint.call(engine.send, QUEUE, batch)
        hand_outs = endpoint.call(HandOuts, engine)
        worker = _worker(proxy_to(urlsplit(endpoint.url).port))
        log = JsonLog(worker, WAIT_S)
        try:
            log.next(lambda e: e["event"] == "worker.started", "worker.started")
            assert hand_outs.wait(), "the worker's long poll never reached the engine"
            worker.send_signal(signal.SIGTERM)  # the answer is in the proxy for DELAY_S
            code = worker.wait(timeout=WAIT_S)
            log.drain()
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
        counts = endpoint.call(engine.counts, QUEUE)
        snapshots = [endpoint.call(engine.peek, QUEUE, mid) for mid in hand_outs.ids]
    names = [event["event"] for event in log.events]
    assert code == 0, (log.events, log.other_lines)
    assert len(hand_outs.ids) == MESSAGES
    # Visible again at once, received once, never handled: not stranded for visibility_s.
    assert (counts.visible, counts.in_flight, counts.delayed) == (MESSAGES, 0, 0)
    assert [(s.state.value, s.receive_count) for s in snapshots if s is not None] == [
        ("visible", 1)
    ] * MESSAGES
    assert "app.handled" not in names
    [released] = [e for e in log.events if e["event"] == "shutdown.released_unhandled"]
    assert released["messages"] == MESSAGES
    assert "shutdown.receive_cut_short" not in names
