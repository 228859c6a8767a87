"""What the commands print, as a user reads it (issue 28, item 9): no botocore INFO lines
at the default log level, the queue's own name in `dlq redrive`'s next step, and the count
of queues `serve-sqs --persist` restored."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cli.test_cli import ROOT, child_env
from tests.cli.test_dlq_cli import dead_lettered, dlq
from tests.cli.test_serve_sqs_cli import WAIT_S, Endpoint, client, free_port
from worker.cli.logging import configure_logging

pytestmark = pytest.mark.process


@pytest.fixture(scope="module")
def endpoint() -> Iterator[tuple[str, Any]]:
    served = Endpoint("--port", str(free_port()), "--queue", "idle")
    try:
        url = served.event("sqs_endpoint.started")["url"]
        yield url, client(url)
    finally:
        served.stop()


# -- botocore's INFO lines -------------------------------------------------------------


def _worker_on_sqs(url: str, *args: str) -> list[dict[str, Any]]:
    """`lease-worker run` on serve-sqs until it has started; its log events."""
    env = child_env(
        AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_REGION="us-east-1"
    )
    command = [sys.executable, "-m", "worker", "run", "tests.cli.quick_app:app"]
    proc = subprocess.Popen(
        [*command, "--backend", "sqs", "--endpoint-url", url, "--log-format", "json", *args],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    events = []
    try:
        for line in proc.stderr:
            events.append(json.loads(line))
            if events[-1]["event"] == "worker.started":
                proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=WAIT_S) == 0, events
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return events


def test_an_sqs_run_opens_without_botocore_info_lines(endpoint: tuple[str, Any]) -> None:
    # Every SQS run opened with "Found credentials in environment variables.".
    events = _worker_on_sqs(endpoint[0])
    libraries = [e for e in events if e.get("logger", "").startswith(("botocore", "aiobotocore"))]
    assert libraries == []
    assert "worker.started" in [e["event"] for e in events]


def test_botocore_info_lines_come_back_at_debug(endpoint: tuple[str, Any]) -> None:
    events = _worker_on_sqs(endpoint[0], "--log-level", "debug")
    credentials = [e for e in events if e.get("logger") == "aiobotocore.credentials"]
    assert [e["level"] for e in credentials] == ["info"]


@pytest.mark.parametrize(
    ("level", "shown"),
    [
        ("info", {"botocore.hooks": [], "aiobotocore.credentials": ["warning"]}),
        ("debug", {"botocore.hooks": ["info"], "aiobotocore.credentials": ["info", "warning"]}),
        ("warning", {"botocore.hooks": [], "aiobotocore.credentials": ["warning"]}),
    ],
)
def test_botocores_loggers_stay_at_warning_unless_debug(
    level: str, shown: dict[str, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    configure_logging(fmt="json", level=level)
    logging.getLogger("botocore.hooks").info("an info line")
    logging.getLogger("botocore.hooks").debug("a debug line: never, it may hold a body")
    logging.getLogger("aiobotocore.credentials").info("Found credentials")
    logging.getLogger("aiobotocore.credentials").warning("a warning")
    events = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    for logger, levels in shown.items():
        assert [e["level"] for e in events if e["logger"] == logger] == levels


# -- dlq redrive -----------------------------------------------------------------------


def test_redrive_names_the_queue_to_follow(endpoint: tuple[str, Any]) -> None:
    url, sqs = endpoint
    dead_lettered(sqs, "invoices")
    moved = dlq(url, "redrive", "invoices-dlq")
    assert moved.returncode == 0, moved.stderr
    assert "QUEUE" not in moved.stdout
    assert "follow it with: lease-worker dlq tasks invoices-dlq" in moved.stdout


# -- serve-sqs --persist ---------------------------------------------------------------


def test_persist_logs_the_queues_it_restored(tmp_path: Path) -> None:
    snapshot = tmp_path / "engine.json"
    first = Endpoint("--port", str(free_port()), "--persist", str(snapshot))
    try:
        sqs = client(first.event("sqs_endpoint.started")["url"])
        for name in ("a", "b", "c"):
            sqs.create_queue(QueueName=name)
    finally:
        first.proc.send_signal(signal.SIGTERM)
        first.proc.wait(timeout=WAIT_S)
    again = Endpoint("--port", str(free_port()), "--persist", str(snapshot), "--queue", "d")
    try:
        assert again.event("sqs_endpoint.restored")["queues"] == 3
        assert again.event("sqs_endpoint.started")["queues"] == 4  # was 1: the --queue ones
    finally:
        again.stop()
