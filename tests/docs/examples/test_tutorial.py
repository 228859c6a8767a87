"""The tutorial's files (examples/tutorial/, shown in docs/tutorial/) do what the pages say,
run as a reader runs them: copied into a directory of their own, in new processes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from backends.serve.sqs import sqs_endpoint_in_thread
from worker.types import QueueSpec

TUTORIAL = Path(__file__).resolve().parents[3] / "examples" / "tutorial"
# docs/tutorial/testing.md's pyproject.toml, as the reader saves it.
PYTEST_CONFIG = '[tool.pytest.ini_options]\nasyncio_default_fixture_loop_scope = "function"\n'


def _sqs_environment(url: str) -> dict[str, str]:
    """docs/tutorial/sqs.md's four export lines, with this server's address."""
    environment = {
        **os.environ,
        "AWS_ENDPOINT_URL": url,
        "AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
    }
    for name in ("AWS_PROFILE", "AWS_DEFAULT_REGION", "AWS_SESSION_TOKEN"):
        environment.pop(name, None)
    return environment


def _reader_directory(tmp_path: Path, *names: str) -> Path:
    for name in names:
        shutil.copy(TUTORIAL / name, tmp_path / name)
    return tmp_path


@pytest.mark.process
@pytest.mark.timeout(60)
def test_the_readers_tests_pass(tmp_path: Path) -> None:
    cwd = _reader_directory(tmp_path, "app.py", "test_app.py")
    (cwd / "pyproject.toml").write_text(PYTEST_CONFIG)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_app.py"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=50,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout
    assert "warning" not in done.stdout.lower()  # the pyproject.toml quiets pytest-asyncio


@pytest.mark.process
@pytest.mark.timeout(60)
def test_send_py_sends_to_the_sqs_compatible_server(tmp_path: Path) -> None:
    cwd = _reader_directory(tmp_path, "send.py")
    with sqs_endpoint_in_thread() as endpoint:
        endpoint.call(endpoint.engine.create_queue, QueueSpec("orders"))
        done = subprocess.run(
            [sys.executable, "send.py", "3"],
            cwd=cwd,
            env=_sqs_environment(endpoint.url),
            capture_output=True,
            text=True,
            timeout=50,
        )
        counts = endpoint.call(endpoint.engine.counts, "orders")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "sent 3 orders\n"
    assert counts.visible == 3


@pytest.mark.process
@pytest.mark.timeout(60)
def test_the_worker_runs_on_the_sqs_compatible_server(tmp_path: Path) -> None:
    """`lease-worker run app:app --backend sqs` with sqs.md's settings: send_orders sends its
    five orders over HTTP, the first (3 s) ships; two Ctrl-Cs release the other four."""
    cwd = _reader_directory(tmp_path, "app.py")
    with sqs_endpoint_in_thread() as endpoint:
        endpoint.call(endpoint.engine.create_queue, QueueSpec("orders"))
        worker = subprocess.Popen(
            ["lease-worker", "run", "app:app", "--backend", "sqs", "--log-format", "json"],
            cwd=cwd,
            env=_sqs_environment(endpoint.url),
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert worker.stderr is not None
            events = (json.loads(line) for line in worker.stderr if line.startswith("{"))
            shipped = next(e for e in events if e["event"] == "order.shipped")
            worker.send_signal(signal.SIGINT)  # drain: orders 2-5 would run on
            next(e for e in events if e["event"] == "shutdown.draining")
            worker.send_signal(signal.SIGINT)  # the second cuts it short: released
            status = worker.wait(timeout=30)
        finally:
            worker.kill()
            worker.wait()
        counts = endpoint.call(endpoint.engine.counts, "orders")
    assert (shipped["order_id"], shipped["renewals"]) == (1, 0)
    assert status == 0
    assert (counts.visible, counts.in_flight) == (4, 0)
