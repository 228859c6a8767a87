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
#: What Celery drains each round (about 150 msgs/s: the full size would take minutes).
CELERY_MESSAGES = 2_000
#: The floor's row: a serial drain with raw HTTP/1.1 and botocore's signer.
FLOOR = "floor: raw HTTP/1.1 and botocore's signer"
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
    #: What the queue's bodies must be: "plain" JSON, "dramatiq" or "celery" task messages.
    body: str = "plain"
    #: Drain at most this many messages (a contender too slow for the full size).
    max_messages: int | None = None
    #: `lease-worker run` options it uses that older versions lack (skipped without them).
    options: tuple[str, ...] = ()
    #: Worker processes (the scale-out section reads lease-worker's rows by this).
    processes: int = 1
    #: Run at smoke size too; False for lease-worker's in-between configurations (one
    #: option of two, several processes without the options), whose code the others run.
    smoke: bool = True
    #: A named lease-worker configuration that is what no flags mean at this commit.
    same_as_default: bool = False

    @property
    def is_floor(self) -> bool:
        return self.name.startswith("floor")


#: lease-worker as the CLI runs it, with the peers' budget of messages held at once.
_LEASE_WORKER = (
    *(sys.executable, "-m", "worker", "run", "bench.apps.noop:app", "--backend", "sqs"),
    *("--endpoint-url", "{endpoint}", "--region", "us-east-1"),
    *("--max-in-flight", str(CONCURRENCY), "--log-level", "warning"),
)
_CORES = os.cpu_count() or 1
#: How each SQS client and loop shows in a row's name.
_CLIENT_NAMES = {"lean": "lean path", "botocore": "botocore client"}


@dataclass(frozen=True, slots=True)
class Defaults:
    """What `lease-worker run` does with no flags, read from the code at measurement time."""

    client: str
    loop: str

    def says(self) -> str:
        return f"the {_CLIENT_NAMES.get(self.client, self.client)} and the {self.loop} loop"


def defaults() -> Defaults:
    """`backends.factory.DEFAULT_SQS_CLIENT` and `lease-worker run --loop`'s default, so that
    the "default" row follows the code when either changes."""
    from backends.factory import DEFAULT_SQS_CLIENT
    from worker.cli.run import OPTIONS

    loop = next(
        option.default for group in OPTIONS.values() for option in group if option.flag == "--loop"
    )
    return Defaults(str(DEFAULT_SQS_CLIENT), str(loop or "asyncio"))


#: (client, loop) of each named configuration: None leaves that flag out (the default).
_CONFIGS: tuple[tuple[str | None, str | None], ...] = (
    (None, None),
    ("lean", None),
    ("botocore", None),
    ("lean", "uvloop"),
    ("botocore", "uvloop"),
)


def _name(client: str | None, loop: str | None) -> str:
    parts = ["lease-worker"]
    if client is not None:
        parts.append(_CLIENT_NAMES[client])
    if loop is not None:
        parts.append(loop)
    return ", ".join(parts)


def _lease_worker(
    client: str | None, loop: str | None, *, processes: int = 1, smoke: bool = True
) -> Contender:
    given = defaults()
    name = _name(client, loop)
    arguments = [*(("--sqs-client", client) if client else ()), *(("--loop", loop) if loop else ())]
    said = " and ".join(
        f"`{flag} {value}`" for flag, value in (("--sqs-client", client), ("--loop", loop)) if value
    )
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
            "the default configuration, no flags: `lease-worker run bench.apps.noop:app "
            "--backend sqs --endpoint-url URL --region us-east-1 --max-in-flight "
            f"{CONCURRENCY}` ({given.says()} at this commit); "
            "leases on with the defaults (visibility 30 s, renewed 10 s before the deadline, "
            "extensions batched 10 per call), receives of min(10, free slots), long poll "
            "20 s, deletes batched (10 per call, linger 50 ms), one process"
        )
    )
    options = tuple(arg for arg in arguments if arg.startswith("--") and arg != "--processes")
    same = (client or given.client, loop or given.loop) == (given.client, given.loop)
    return Contender(
        name,
        settings,
        (*_LEASE_WORKER, *arguments),
        options=options,
        processes=processes,
        smoke=smoke,
        same_as_default=same and (client, loop) != (None, None),
    )


def lease_workers() -> list[Contender]:
    """lease-worker with no flags (the default), then with each client and loop named, then
    the scale-out rows: the default and the lean path on uvloop at 2 .. cpu_count processes.
    A named configuration that is what no flags mean is marked `same_as_default` (the
    side-by-side run skips it; the others look it up by name)."""
    single = [
        _lease_worker(client, loop, smoke=(client, loop) in ((None, None), ("lean", "uvloop")))
        for client, loop in _CONFIGS
    ]
    more = [
        _lease_worker(client, loop, processes=n, smoke=client is not None)
        for n in range(2, _CORES + 1)
        for client, loop in ((None, None), ("lean", "uvloop"))
    ]
    return single + more


def is_default(contender: Contender) -> bool:
    """The row of `lease-worker run` with no flags, one process."""
    return contender.name == "lease-worker"


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
            body="dramatiq",
        ),
        Contender(
            "aiosqs",
            "aiosqs's `receive_message` (10, long poll 20 s, visibility 30), a no-op per "
            "message, then each message's `delete_message` sent together (aiosqs has no "
            "batch delete), repeat: one task, up to 10 held; no visibility extension in the "
            "library. aiosqs 1.0.6 reads no message from an answer in SQS's XML namespace, "
            "so the driver drops the namespace declaration before aiosqs parses "
            "(bench/peers/aiosqs_driver.py)",
            (peer, "aiosqs_driver.py"),
            PEERS,
            needs="python-peers",
        ),
        Contender(
            "Celery on SQS",
            f"`celery worker` (prefork pool, {_CORES} children: its default of one per core; "
            f"prefetch multiplier {max(1, CONCURRENCY // _CORES)}, so up to "
            f"{max(1, CONCURRENCY // _CORES) * _CORES} messages held), kombu's SQS transport "
            "with the queue predefined, long poll 20 s, polling_interval 0 (kombu's default of "
            "1 s waits between polls), visibility 30 s, results ignored; kombu acknowledges "
            "with one DeleteMessage per message before the task runs; no visibility "
            f"extension. It drains {CELERY_MESSAGES:,} messages, not the full size: at "
            "~150 msgs/s the full size would take minutes a round",
            (peer, "celery_driver.py"),
            PEERS,
            {"BENCH_CONCURRENCY": str(CONCURRENCY)},
            needs="python-peers",
            body="celery",
            max_messages=CELERY_MESSAGES,
        ),
        Contender(
            "bare aiobotocore loop",
            "`python -m bench.apps.floor`: ReceiveMessage (10, long poll 20 s), "
            "DeleteMessageBatch, repeat; no handler, no leases, one task",
            (sys.executable, "-m", "bench.apps.floor"),
        ),
        Contender(
            FLOOR,
            "`python -m bench.apps.raw_floor`: ReceiveMessage (10, long poll 20 s), "
            "DeleteMessageBatch, repeat, one after the other over one keep-alive "
            "http.client connection, SQS's JSON protocol written and read with the json "
            "module, each request signed by botocore's SigV4Auth; no handler, no leases, no "
            "event loop: the least CPU a Python client can spend on a message",
            (sys.executable, "-m", "bench.apps.raw_floor"),
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
        "('aws-sqs-consumer', 'dramatiq', 'dramatiq-sqs', 'boto3', 'aiosqs', 'aiohttp', "
        "'celery', 'kombu', 'pycurl')}))"
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
        "aiosqs": f"{peer.get('aiosqs', '?')}, aiohttp {peer.get('aiohttp', '?')}",
        "Celery on SQS": f"celery {peer.get('celery', '?')}, kombu {peer.get('kombu', '?')}, "
        f"pycurl {peer.get('pycurl', '?')}, {boto3}",
        "bare aiobotocore loop": f"aiobotocore {_local('aiobotocore')}",
        FLOOR: f"botocore {_local('botocore')} (its signer), http.client",
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
