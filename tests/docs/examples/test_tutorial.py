"""The tutorial's files (examples/tutorial/, shown in docs/tutorial/) do what the pages say,
run as a reader runs them: copied into a directory of their own, in new processes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from backends.serve.sqs import sqs_endpoint_in_thread
from worker.types import QueueSpec

TUTORIAL = Path(__file__).resolve().parents[3] / "examples" / "tutorial"
# docs/tutorial/testing.md's pyproject.toml, as the reader saves it.
PYTEST_CONFIG = '[tool.pytest.ini_options]\nasyncio_default_fixture_loop_scope = "function"\n'


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
        environment = {
            **os.environ,
            # docs/tutorial/sqs.md's four export lines, with this server's address.
            "AWS_ENDPOINT_URL": endpoint.url,
            "AWS_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": "test",
            "AWS_SECRET_ACCESS_KEY": "test",
        }
        for name in ("AWS_PROFILE", "AWS_DEFAULT_REGION", "AWS_SESSION_TOKEN"):
            environment.pop(name, None)
        done = subprocess.run(
            [sys.executable, "send.py", "3"],
            cwd=cwd,
            env=environment,
            capture_output=True,
            text=True,
            timeout=50,
        )
        counts = endpoint.call(endpoint.engine.counts, "orders")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "sent 3 orders\n"
    assert counts.visible == 3
