"""bench/lease_chaos.py's world: the services (a `serve-sqs` or `serve-smq` process and the
harness's own calls to it, never through a proxy), the `lease-worker run` processes of
bench/apps/chaos_app.py (started, paused, signalled, their JSON logs read back), the runs
their handlers wrote (`Run`, read from the per-process files), and a scenario's `Report`.

Rules:
- A worker is its own process (`--processes 1`, the default): the pid signalled is the pid
  that holds the leases, and the pid in its handlers' lines.
- A worker's stderr (JSON log lines, `--log-format json`) goes to `<out>/worker-<pid>.log`,
  its stdout nowhere; every wait on a process is bounded.
- A pause is SIGSTOP, a sleep, SIGCONT; its wall times (`time.time()`, just before each
  signal) are kept, as the handlers' lines keep theirs.
"""

from __future__ import annotations

import datetime
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from backends.smq import SmqBackend, SmqSettings
from bench._harness import Sqs
from bench.smq_renewals import KEY as SMQ_KEY
from worker.types import OutgoingMessage

__all__ = [
    "SMQ_KEY",
    "Lost",
    "Pause",
    "Report",
    "Run",
    "SqsQueues",
    "Workers",
    "clean_env",
    "read_runs",
    "smq_counts",
    "smq_send",
    "wait_until",
]

APP = "bench.apps.chaos_app:app"
ROOT = Path(__file__).resolve().parents[1]


def clean_env() -> dict[str, str]:
    """This environment without AWS, Alibaba Cloud, lease-worker or chaos settings: a
    scenario gives its workers exactly the ones it means."""
    prefixes = ("AWS_", "ALIBABA_CLOUD_", "LEASE_WORKER_", "CHAOS_")
    return {key: value for key, value in os.environ.items() if not key.startswith(prefixes)}


# -- reports and waits ----------------------------------------------------------------------


@dataclass
class Report:
    """What a scenario prints: its lines of counts, then each goal, met or missed."""

    name: str
    lines: list[str] = field(default_factory=list)
    goals: dict[str, bool] = field(default_factory=dict)
    #: Counts a caller may check (tests/bench/test_lease_chaos_smoke.py), by name.
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return bool(self.goals) and all(self.goals.values())

    def show(self) -> str:
        goals = [f"  goal {'met' if met else 'MISSED'}: {goal}" for goal, met in self.goals.items()]
        verdict = "all goals met" if self.ok else "GOAL MISSED"
        return "\n".join([f"lease_chaos {self.name}:", *self.lines, *goals, f"  {verdict}"])


def wait_until(condition: Callable[[], bool], timeout_s: float, poll_s: float = 0.1) -> bool:
    """Poll `condition` until it holds (True) or `timeout_s` has passed (False)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(poll_s)
    return True


# -- the services -----------------------------------------------------------------------------


class SqsQueues:
    """A queue and its DLQ on a serve-sqs process, through the harness's own client."""

    def __init__(
        self, sqs: Sqs, name: str, max_receive_count: int, visibility_s: int | None = None
    ) -> None:
        self.sqs = sqs
        self.name = name
        self.dlq_url = sqs.call("CreateQueue", QueueName=f"{name}-dlq")["QueueUrl"]
        arn = sqs.call("GetQueueAttributes", QueueUrl=self.dlq_url, AttributeNames=["QueueArn"])
        policy = {"deadLetterTargetArn": arn["Attributes"]["QueueArn"]}
        policy["maxReceiveCount"] = str(max_receive_count)
        attributes = {"RedrivePolicy": json.dumps(policy)}
        if visibility_s is not None:  # else the service's default (SQS: 30 s)
            attributes["VisibilityTimeout"] = str(visibility_s)
        self.url = sqs.call("CreateQueue", QueueName=name, Attributes=attributes)["QueueUrl"]

    def send(self, count: int) -> list[str]:
        """Send `count` messages (bodies "0".."count-1"); their message ids."""
        ids: list[str] = []
        for start in range(0, count, 10):
            entries = [
                {"Id": str(i), "MessageBody": str(i)} for i in range(start, min(start + 10, count))
            ]
            answer = self.sqs.call("SendMessageBatch", QueueUrl=self.url, Entries=entries)
            if answer.get("Failed"):
                raise RuntimeError(f"SendMessageBatch: {answer['Failed'][0]}")
            ids += [entry["MessageId"] for entry in answer["Successful"]]
        return ids

    def left(self) -> tuple[int, int]:
        """(visible, in flight) in the queue."""
        return self.sqs.left(self.url)

    def dead(self) -> int:
        """Messages in the DLQ, visible or not."""
        return sum(self.sqs.left(self.dlq_url))


def _smq(url: str) -> SmqBackend:
    key_id, secret = (
        SMQ_KEY["ALIBABA_CLOUD_ACCESS_KEY_ID"],
        SMQ_KEY["ALIBABA_CLOUD_ACCESS_KEY_SECRET"],
    )
    return SmqBackend(SmqSettings(endpoint=url, access_key_id=key_id, access_key_secret=secret))


def smq_send(url: str, queue: str, count: int) -> list[str]:
    """Send `count` messages to `queue` on serve-smq at `url`; their message ids."""

    async def send() -> list[str]:
        backend = _smq(url)
        try:
            ids: list[str] = []
            for start in range(0, count, 16):
                size = min(16, count - start)
                batch = [OutgoingMessage(body=str(start + i), entry_id=str(i)) for i in range(size)]
                result = await backend.send(queue, batch)
                if result.failed:
                    raise RuntimeError(f"BatchSendMessage: {result.failed[0]}")
                ids += [result.message_ids[str(i)] for i in range(size)]
            return ids
        finally:
            await backend.aclose()

    return anyio.run(send)


def smq_counts(url: str, queue: str) -> tuple[int, int]:
    """(visible, in flight) in `queue` on serve-smq at `url`."""

    async def counts() -> tuple[int, int]:
        backend = _smq(url)
        try:
            info = await backend.queue_info(queue)
            return info.approximate_visible, info.approximate_in_flight
        finally:
            await backend.aclose()

    return anyio.run(counts)


# -- the workers ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Pause:
    """A worker stopped at `stopped` and continued at `continued` (wall times)."""

    pid: int
    stopped: float
    continued: float


@dataclass(frozen=True, slots=True)
class Lost:
    """A `lease.lost` line: worker `pid` lost its lease of `message_id` at `at` (wall)."""

    pid: int
    message_id: str
    at: float
    reason: str


@dataclass(slots=True)
class Run:
    """One run of a handler, as chaos_app wrote it (wall times)."""

    pid: int
    message_id: str
    receive_count: int
    started: float
    ended: float | None = None
    committed: bool = False
    aborted: str | None = None

    def show(self) -> str:
        if self.ended is None:
            how = "unfinished"
        elif self.committed:
            how = f"committed {self.ended:.3f}"
        else:
            how = f"aborted ({self.aborted}) {self.ended:.3f}"
        return f"pid {self.pid} receive {self.receive_count}: started {self.started:.3f}, {how}"


def read_runs(out: Path) -> list[Run]:
    """Every run written to `out/runs-*.txt`, a START matched with its COMMIT or ABORT."""
    runs: dict[tuple[int, str, int], Run] = {}
    for path in sorted(out.glob("runs-*.txt")):
        for line in path.read_text().splitlines():
            kind, pid, message_id, count, _loop, wall, *extra = line.split()
            key = (int(pid), message_id, int(count))
            if kind == "START":
                runs[key] = Run(int(pid), message_id, int(count), float(wall))
            elif key in runs:
                run = runs[key]
                run.ended = float(wall)
                run.committed = kind == "COMMIT"
                run.aborted = extra[0] if kind == "ABORT" and extra else None
    return list(runs.values())


@dataclass
class Workers:
    """The worker processes of one scenario, all with the same command and environment."""

    out: Path
    backend: str
    endpoint: str
    env: Mapping[str, str]
    extra_args: tuple[str, ...] = ()
    #: The app (`module:attribute`) and the folder the workers start in; another checkout of
    #: the runtime (bench/late_receives.py) comes with its folder on `PYTHONPATH` in `env`.
    app: str = APP
    cwd: Path = ROOT
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    pauses: list[Pause] = field(default_factory=list)

    def command(self) -> list[str]:
        args = [sys.executable, "-m", "worker", "run", self.app, "--backend", self.backend]
        args += ["--endpoint-url", self.endpoint, "--log-format", "json", "--log-level", "info"]
        if self.backend == "sqs":
            args += ["--region", "us-east-1"]
        return [*args, *self.extra_args]

    def start(self) -> int:
        """Start one more worker; its pid."""
        env = {**clean_env(), **self.env, "CHAOS_OUT": str(self.out)}
        log = self.out / f"worker-{len(self.processes)}.log"
        with log.open("wb") as stderr:
            process = subprocess.Popen(
                self.command(),
                cwd=self.cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )
        log.rename(self.out / f"worker-{process.pid}.log")  # the open file follows
        self.processes.append(process)
        return process.pid

    @property
    def pids(self) -> list[int]:
        return [process.pid for process in self.processes]

    def exited(self) -> dict[int, int]:
        """The workers that have exited, and their status."""
        codes = {process.pid: process.poll() for process in self.processes}
        return {pid: code for pid, code in codes.items() if code is not None}

    def stop(self, pid: int) -> float:
        """SIGSTOP `pid`; the wall time just before."""
        stopped = time.time()
        os.kill(pid, signal.SIGSTOP)
        return stopped

    def resume(self, pid: int, stopped: float) -> None:
        continued = time.time()
        os.kill(pid, signal.SIGCONT)
        self.pauses.append(Pause(pid, stopped, continued))

    def signal_all(self, sig: signal.Signals) -> None:
        for process in self.processes:
            if process.poll() is None:
                with suppress(ProcessLookupError):
                    process.send_signal(sig)

    def wait_all(self, timeout_s: float) -> dict[int, int | None]:
        """Wait (at most `timeout_s` in all) for every worker to exit; their status, None
        for one still running."""
        deadline = time.monotonic() + timeout_s
        for process in self.processes:
            with suppress(subprocess.TimeoutExpired):
                process.wait(max(0.0, deadline - time.monotonic()))
        return {process.pid: process.poll() for process in self.processes}

    def kill_all(self) -> None:
        """SIGKILL whatever still runs (after a failed wait); SIGCONT first, in case."""
        for process in self.processes:
            if process.poll() is None:
                with suppress(ProcessLookupError):
                    process.send_signal(signal.SIGCONT)
                    process.kill()
                process.wait(10)

    def logged(self, pid: int) -> list[dict[str, Any]]:
        """The JSON lines worker `pid` logged (a line that is not JSON as {"event": line})."""
        path = self.out / f"worker-{pid}.log"
        found = []
        for line in path.read_text(errors="replace").splitlines():
            try:
                found.append(json.loads(line))
            except ValueError:
                found.append({"event": line})
        return found

    def events(self, name: str) -> list[tuple[int, dict[str, Any]]]:
        """Every `name` event, with the pid of the worker that logged it."""
        return [
            (pid, event)
            for pid in self.pids
            for event in self.logged(pid)
            if event.get("event") == name
        ]

    def lost(self) -> list[Lost]:
        """Every `lease.lost` line of every worker."""
        return [
            Lost(pid, str(event.get("message_id")), _wall(event), str(event.get("reason")))
            for pid, event in self.events("lease.lost")
        ]

    def tail(self, pid: int, lines: int = 15) -> str:
        path = self.out / f"worker-{pid}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def _wall(event: dict[str, Any]) -> float:
    """A log line's timestamp (ISO 8601, UTC) as Unix seconds."""
    stamp = str(event.get("timestamp", "")).replace("Z", "+00:00")
    try:
        return datetime.datetime.fromisoformat(stamp).timestamp()
    except ValueError:
        return float("nan")
