"""`lease-worker serve-smq` and `lease-worker peek` as real processes: `--backend smq` peeks
without receiving, SQS fails in one line, the dead-letter tools' inspect peeks on SMQ, and a
signal ends the server with 0."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from backends.smq import SmqBackend, SmqSettings
from worker.types import OutgoingMessage

pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parents[4]
WAIT_S = 30.0
KEYS = {"ALIBABA_CLOUD_ACCESS_KEY_ID": "cli-key", "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "cli-secret"}


def _env() -> dict[str, str]:
    kept = {k: v for k, v in os.environ.items() if not k.startswith(("LEASE_WORKER_", "ALIBABA"))}
    return {**kept, **KEYS}


def _start() -> tuple[subprocess.Popen[str], str]:
    command = ["serve-smq", "--log-format", "json", "--port", "0", "--queue", "jobs"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "worker", *command],
        cwd=ROOT,
        env=_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    for line in proc.stderr:  # bounded by pytest-timeout; ends with the process
        if '"smq_endpoint.started"' in line:
            return proc, json.loads(line)["url"]
    proc.wait(timeout=WAIT_S)
    pytest.fail("serve-smq ended before it started")


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=WAIT_S)


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    proc, url = _start()
    try:
        yield url
    finally:
        _stop(proc)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "worker", *args],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        check=False,
    )


async def _send_then_receive(url: str, bodies: list[str]) -> list[int] | None:
    settings = SmqSettings(endpoint=url, access_key_id="cli-key", access_key_secret="cli-secret")
    backend = SmqBackend(settings)
    try:
        if bodies:
            messages = [OutgoingMessage(body=b, entry_id=str(i)) for i, b in enumerate(bodies)]
            assert not (await backend.send("jobs", messages)).failed
            return None
        got = await backend.receive("jobs", max_messages=16, wait_s=0)
        return sorted(m.receive_count for m in got)
    finally:
        await backend.aclose()


def test_peek_reads_without_receiving_and_dlq_inspect_peeks_too(server: str) -> None:
    url = server
    anyio.run(_send_then_receive, url, ["one", "two"])
    peeked = _cli("peek", "jobs", "-n", "5", "--json", "--backend", "smq", "--endpoint-url", url)
    assert peeked.returncode == 0, peeked.stderr
    rows = json.loads(peeked.stdout)
    assert [row["receive_count"] for row in rows] == [0, 0]
    assert all("body" not in row for row in rows)  # bodies only with --bodies
    inspected = _cli("dlq", "inspect", "jobs", "--backend", "smq", "--endpoint-url", url)
    assert inspected.returncode == 0, inspected.stderr
    assert "received and released" not in inspected.stdout  # a peek, not SQS's workaround
    assert anyio.run(_send_then_receive, url, []) == [1, 1]  # neither counted a receive


def test_peek_on_sqs_is_one_clear_line() -> None:
    done = _cli("peek", "jobs", "--backend", "sqs", "--region", "us-east-1")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        "lease-worker: error: peek: --backend sqs cannot peek (SQS has no peek); "
        "`lease-worker dlq inspect` receives and releases instead"
    ]


def test_smq_without_keys_is_one_clear_line() -> None:
    env = {k: v for k, v in _env().items() if k not in KEYS}
    command = ["peek", "jobs", "--backend", "smq", "--endpoint-url", "http://127.0.0.1:9"]
    done = subprocess.run(
        [sys.executable, "-m", "worker", *command],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=WAIT_S, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "lease-worker: error: --backend smq: set ALIBABA_CLOUD_ACCESS_KEY_ID and "
        "ALIBABA_CLOUD_ACCESS_KEY_SECRET"
    ]


def test_serve_smq_ends_with_0_on_sigterm() -> None:
    proc, _ = _start()
    try:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=WAIT_S) == 0
    finally:
        _stop(proc)
