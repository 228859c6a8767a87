"""Who runs in bench/side_by_side.py, how each is started, and with which settings.

Every contender gets the endpoint, queue URL and message count in `BENCH_*` variables, dummy
AWS credentials, and a no-op handler. The budget is the same for all: at most
`CONCURRENCY` messages held at once (one SQS batch, which is what one sqs-consumer or
aws-sqs-consumer holds), long polls of 20 s, visibility 30 s. Leases or heartbeats are on
wherever the library has them.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

PEERS = Path(__file__).resolve().parent
ROOT = PEERS.parents[1]
PEER_PYTHON = PEERS / ".venv" / "bin" / "python"
CONCURRENCY = 10
#: dramatiq's default: one worker process per core.
DRAMATIQ_PROCESSES = os.cpu_count() or 1


@dataclass(frozen=True, slots=True)
class Contender:
    name: str
    #: What it ran with, for the list under the table.
    settings: str
    #: "{endpoint}" in an argument is replaced by the endpoint's URL.
    command: tuple[str, ...]
    cwd: Path = ROOT
    env: dict[str, str] = field(default_factory=dict)
    #: "node", "python-peers" or "" (the project's own venv).
    needs: str = ""
    #: Bodies must be dramatiq messages.
    dramatiq: bool = False


#: lease-worker as the CLI runs it, with the peers' budget of messages held at once.
_LEASE_WORKER = (
    *(sys.executable, "-m", "worker", "run", "bench.apps.noop:app", "--backend", "sqs"),
    *("--endpoint-url", "{endpoint}", "--region", "us-east-1"),
    *("--max-in-flight", str(CONCURRENCY), "--log-level", "warning"),
)


def contenders() -> list[Contender]:
    node = shutil.which("node") or "node"
    peer = str(PEER_PYTHON)
    sqs_consumer = (
        f"batchSize 10, one Consumer (up to {CONCURRENCY} messages at once), waitTimeSeconds 20, "
        "visibilityTimeout 30, heartbeatInterval 10 (heartbeat on)"
    )
    return [
        Contender(
            "lease-worker",
            "`lease-worker run bench.apps.noop:app --backend sqs --endpoint-url URL --region "
            f"us-east-1 --max-in-flight {CONCURRENCY}`; "
            "leases on with the defaults (visibility 30 s, renewed 10 s before the deadline, "
            "extensions batched 10 per call), receives of min(10, free slots), long poll "
            "20 s, deletes batched (10 per call, linger 50 ms), one process",
            _LEASE_WORKER,
        ),
        Contender(
            "lease-worker, 2 processes",
            "the same with `--processes 2`: two worker processes under one parent (as "
            f"dramatiq's defaults run two), {CONCURRENCY} messages held by each, so up to "
            f"{2 * CONCURRENCY} in all, like dramatiq-sqs",
            (*_LEASE_WORKER, "--processes", "2"),
        ),
        Contender(
            "sqs-consumer, batch handler",
            f"`handleMessageBatch`, {sqs_consumer}; one DeleteMessageBatch per batch",
            (node, "consumer.mjs"),
            PEERS,
            {"BENCH_MODE": "batch"},
            needs="node",
        ),
        Contender(
            "sqs-consumer, per-message handler",
            f"`handleMessage`, {sqs_consumer}; the batch's handlers run together, one "
            "DeleteMessage per message",
            (node, "consumer.mjs"),
            PEERS,
            {"BENCH_MODE": "message"},
            needs="node",
        ),
        Contender(
            "aws-sqs-consumer",
            "`handle_message_batch`, batch_size 10, wait_time_seconds 20, "
            "visibility_timeout_seconds 30; one thread, one batch at a time, one "
            "DeleteMessageBatch per batch; no heartbeat in the library",
            (peer, "aws_sqs_consumer_driver.py"),
            PEERS,
            needs="python-peers",
        ),
        Contender(
            "dramatiq-sqs",
            f"`dramatiq dramatiq_driver --processes {DRAMATIQ_PROCESSES} --threads 8` (dramatiq's "
            "defaults: a process per core, 8 threads each; each process prefetches min(10, 2 x "
            f"threads) = 10, so up to {DRAMATIQ_PROCESSES * 10} messages held, more than the "
            "others' budget), default middleware, long poll 20 s; one DeleteMessage per "
            "message; no visibility extension in the library (visibility 12 h, its default)",
            (
                peer,
                "-m",
                "dramatiq",
                "dramatiq_driver",
                "--processes",
                str(DRAMATIQ_PROCESSES),
                "--threads",
                "8",
            ),
            PEERS,
            needs="python-peers",
            dramatiq=True,
        ),
        Contender(
            "floor: raw aiobotocore loop",
            "`python -m bench.apps.floor`: ReceiveMessage (10, long poll 20 s), "
            "DeleteMessageBatch, repeat; no handler, no leases, one task",
            (sys.executable, "-m", "bench.apps.floor"),
        ),
    ]


def _run(command: list[str], timeout_s: float = 30) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def _package_version(directory: Path) -> str:
    try:
        return str(json.loads((directory / "package.json").read_text())["version"])
    except (OSError, ValueError, KeyError):
        return "?"


def _local(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def versions() -> dict[str, str]:
    """Each contender's name and the versions it ran, as a short text."""
    commit = _run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"])
    modules = PEERS / "node_modules"
    node = (
        f"sqs-consumer {_package_version(modules / 'sqs-consumer')}, @aws-sdk/client-sqs "
        f"{_package_version(modules / '@aws-sdk' / 'client-sqs')}, node "
        f"{_run(['node', '--version']).lstrip('v') or '?'}"
    )
    script = (
        "import importlib.metadata as m, json; print(json.dumps({p: m.version(p) for p in "
        "('aws-sqs-consumer', 'dramatiq', 'dramatiq-sqs', 'boto3')}))"
    )
    try:
        peer = json.loads(_run([str(PEER_PYTHON), "-c", script]) or "{}")
    except ValueError:
        peer = {}
    boto3 = f"boto3 {peer.get('boto3', '?')}"
    ours = f"{_local('lease-worker')}" + (f" ({commit})" if commit else "")
    return {
        "lease-worker, 2 processes": ours + f", aiobotocore {_local('aiobotocore')}",
        "lease-worker": ours + f", aiobotocore {_local('aiobotocore')}",
        "sqs-consumer, batch handler": node,
        "sqs-consumer, per-message handler": node,
        "aws-sqs-consumer": f"{peer.get('aws-sqs-consumer', '?')}, {boto3}",
        "dramatiq-sqs": f"{peer.get('dramatiq-sqs', '?')}, dramatiq {peer.get('dramatiq', '?')}, "
        + boto3,
        "floor: raw aiobotocore loop": f"aiobotocore {_local('aiobotocore')}",
    }


def missing(contender: Contender) -> str | None:
    """Why `contender` cannot run here, or None."""
    if contender.needs == "node":
        if shutil.which("node") is None:
            return "node is not installed"
        if not (PEERS / "node_modules" / "sqs-consumer" / "package.json").exists():
            return "bench/peers/node_modules is missing (npm ci failed)"
    if contender.needs == "python-peers" and not (PEERS / ".venv" / ".installed").exists():
        return "bench/peers/.venv is missing (pip install failed)"
    return None


def install() -> str | None:
    """Run setup.sh (a no-op when all is there); the reason it failed, or None."""
    try:
        done = subprocess.run(
            ["bash", str(PEERS / "setup.sh")],
            env={**os.environ, "PYTHON": sys.executable},
            capture_output=True,
            text=True,
            timeout=600,
        )
    except subprocess.TimeoutExpired:
        return "bench/peers/setup.sh took more than 600 s"
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.startswith("setup.sh:")]
        return "; ".join(lines) or done.stderr.strip()[-300:]
    return None
