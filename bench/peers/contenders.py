"""Who runs in bench/side_by_side.py, how each is started, and with which settings.

Every contender gets the endpoint, queue URL and message count in `BENCH_*` variables, dummy
AWS credentials, and a no-op handler. The budget is the same for all: at most
`CONCURRENCY` messages held at once (one SQS batch, which is what one sqs-consumer or
aws-sqs-consumer holds), long polls of 20 s, visibility 30 s. Leases or heartbeats are on
wherever the library has them.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
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
    #: `lease-worker run` options it uses that older versions lack (skipped without them).
    options: tuple[str, ...] = ()
    #: Worker processes (the scale-out section reads lease-worker's rows by this).
    processes: int = 1
    #: Run at smoke size too; False for lease-worker's in-between configurations (one
    #: option of two, several processes without the options), whose code the others run.
    smoke: bool = True


#: lease-worker as the CLI runs it, with the peers' budget of messages held at once.
_LEASE_WORKER = (
    *(sys.executable, "-m", "worker", "run", "bench.apps.noop:app", "--backend", "sqs"),
    *("--endpoint-url", "{endpoint}", "--region", "us-east-1"),
    *("--max-in-flight", str(CONCURRENCY), "--log-level", "warning"),
)
#: Issue 20's performance options: (name suffix, arguments, what the settings list says).
_LEAN = ("lean path", ("--sqs-client", "lean"), "`--sqs-client lean`")
_UVLOOP = ("uvloop", ("--loop", "uvloop"), "`--loop uvloop`")
_CORES = os.cpu_count() or 1


def _lease_worker(
    *extras: tuple[str, tuple[str, ...], str], processes: int = 1, smoke: bool = True
) -> Contender:
    name = ", ".join(["lease-worker", *(extra[0] for extra in extras)])
    arguments = [arg for extra in extras for arg in extra[1]]
    said = " and ".join(extra[2] for extra in extras)
    if processes > 1:
        name += f", {processes} processes"
        arguments += ["--processes", str(processes)]
        said += (" and " if said else "") + (
            f"`--processes {processes}`: {processes} worker processes under one parent, "
            f"{CONCURRENCY} messages held by each"
        )
    settings = (
        f"the same with {said}"
        if said
        else (
            "`lease-worker run bench.apps.noop:app --backend sqs --endpoint-url URL --region "
            f"us-east-1 --max-in-flight {CONCURRENCY}`; "
            "leases on with the defaults (visibility 30 s, renewed 10 s before the deadline, "
            "extensions batched 10 per call), receives of min(10, free slots), long poll "
            "20 s, deletes batched (10 per call, linger 50 ms), one process"
        )
    )
    options = tuple(arg for arg in arguments if arg.startswith("--") and arg != "--processes")
    return Contender(
        name,
        settings,
        (*_LEASE_WORKER, *arguments),
        options=options,
        processes=processes,
        smoke=smoke,
    )


def lease_workers() -> list[Contender]:
    """lease-worker plain, with each performance option and both, then the scale-out rows:
    plain and with both options at 2 .. cpu_count processes."""
    single = [
        _lease_worker(),
        _lease_worker(_LEAN, smoke=False),
        _lease_worker(_UVLOOP, smoke=False),
        _lease_worker(_LEAN, _UVLOOP),
    ]
    more = [
        _lease_worker(*extras, processes=n, smoke=bool(extras))
        for n in range(2, _CORES + 1)
        for extras in ((), (_LEAN, _UVLOOP))
    ]
    return single + more


def contenders() -> list[Contender]:
    node = shutil.which("node") or "node"
    peer = str(PEER_PYTHON)
    sqs_consumer = (
        f"batchSize 10, one Consumer (up to {CONCURRENCY} messages at once), waitTimeSeconds 20, "
        "visibilityTimeout 30, heartbeatInterval 10 (heartbeat on)"
    )
    return [
        *lease_workers(),
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
    ours += f", aiobotocore {_local('aiobotocore')}"
    return {
        **{c.name: ours for c in lease_workers()},
        "sqs-consumer, batch handler": node,
        "sqs-consumer, per-message handler": node,
        "aws-sqs-consumer": f"{peer.get('aws-sqs-consumer', '?')}, {boto3}",
        "dramatiq-sqs": f"{peer.get('dramatiq-sqs', '?')}, dramatiq {peer.get('dramatiq', '?')}, "
        + boto3,
        "floor: raw aiobotocore loop": f"aiobotocore {_local('aiobotocore')}",
    }


@functools.cache
def _run_help() -> str:
    return _run([sys.executable, "-m", "worker", "run", "--help"])


def missing(contender: Contender, run_help: str | None = None) -> str | None:
    """Why `contender` cannot run here, or None. `run_help`: `lease-worker run --help`'s
    text, read here when not given."""
    if contender.options:
        text = _run_help() if run_help is None else run_help
        absent = [option for option in contender.options if option not in text]
        if absent:
            return f"this lease-worker has no {', '.join(absent)} option yet"
        if "uvloop" in contender.command and importlib.util.find_spec("uvloop") is None:
            return "uvloop is not installed (pip install 'lease-worker[fast]')"
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
