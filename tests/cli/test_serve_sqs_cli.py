"""`lease-worker serve-sqs` as a real process: boto3 talks to it, a signal ends it with 0."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from queue import Empty, Queue
from typing import Any

import boto3
import pytest
from botocore.config import Config

pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parents[2]
#: Bound on every wait for the child: a hang fails the test instead of blocking.
WAIT_S = 30.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Endpoint:
    """A `serve-sqs` child whose JSON log lines on standard error are read on a thread."""

    def __init__(self, *args: str) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("LEASE_WORKER_")}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "worker", "serve-sqs", "--log-format", "json", *args],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: Queue[str | None] = Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.put(line)
        self.lines.put(None)

    def event(self, name: str) -> dict[str, Any]:
        while True:
            try:
                line = self.lines.get(timeout=WAIT_S)
            except Empty:
                pytest.fail(f"no {name} within {WAIT_S} s")
            if line is None:
                pytest.fail(f"the process ended before {name}")
            try:
                event: dict[str, Any] = json.loads(line)
            except json.JSONDecodeError:
                continue
            if event.get("event") == name:
                return event

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=WAIT_S)


@pytest.fixture
def port() -> int:
    return free_port()


@pytest.fixture
def start() -> Iterator[Any]:
    started: list[Endpoint] = []

    def run(*args: str) -> Endpoint:
        started.append(Endpoint(*args))
        return started[-1]

    yield run
    for endpoint in started:
        endpoint.stop()


def client(url: str) -> Any:
    return boto3.client(
        "sqs",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(retries={"total_max_attempts": 1}, read_timeout=10),
    )


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_serves_until_a_signal_then_exits_0(start: Any, port: int, signum: int) -> None:
    endpoint = start("--port", str(port), "--queue", "jobs", "--queue", "jobs.fifo")
    started = endpoint.event("sqs_endpoint.started")
    assert started["url"] == f"http://127.0.0.1:{port}"

    sqs = client(started["url"])
    url = sqs.get_queue_url(QueueName="jobs")["QueueUrl"]
    assert url == f"http://127.0.0.1:{port}/000000000000/jobs"
    sqs.send_message(QueueUrl=url, MessageBody="hello")
    [message] = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1)["Messages"]
    assert message["Body"] == "hello"
    sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    fifo = sqs.get_queue_attributes(
        QueueUrl=sqs.get_queue_url(QueueName="jobs.fifo")["QueueUrl"], AttributeNames=["All"]
    )
    assert fifo["Attributes"]["FifoQueue"] == "true"

    endpoint.proc.send_signal(signum)
    endpoint.event("sqs_endpoint.stopped")
    assert endpoint.proc.wait(timeout=WAIT_S) == 0


def test_max_in_flight_is_the_engines(start: Any, port: int) -> None:
    endpoint = start("--port", str(port), "--queue", "q", "--max-in-flight", "1")
    sqs = client(endpoint.event("sqs_endpoint.started")["url"])
    url = sqs.get_queue_url(QueueName="q")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="a")
    sqs.send_message(QueueUrl=url, MessageBody="b")
    assert len(sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]) == 1
    with pytest.raises(sqs.exceptions.OverLimit):
        sqs.receive_message(QueueUrl=url)
    endpoint.proc.send_signal(signal.SIGTERM)
    assert endpoint.proc.wait(timeout=WAIT_S) == 0


@pytest.mark.parametrize(
    ("args", "status", "says"),
    [
        (["--queue", "bad name"], 2, "--queue 'bad name'"),
        (["--max-in-flight", "0"], 2, "--max-in-flight=0"),
        (["--port", "70000"], 2, "--port=70000"),
    ],
)
def test_invalid_settings_exit_2_with_one_line(
    start: Any, args: list[str], status: int, says: str
) -> None:
    endpoint = start(*args)
    assert endpoint.proc.wait(timeout=WAIT_S) == status
    assert endpoint.proc.stderr is not None
    lines: list[str] = []
    while (line := endpoint.lines.get(timeout=WAIT_S)) is not None:
        lines.append(line)
    assert len(lines) == 1 and says in lines[0], lines


def test_a_port_in_use_exits_1(start: Any) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        endpoint = start("--port", str(taken.getsockname()[1]))
        assert endpoint.proc.wait(timeout=WAIT_S) == 1
