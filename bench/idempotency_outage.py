"""A store outage longer than the heartbeat, with real processes (issue 28, "Must show" 3).

    python -m bench.idempotency_outage [--keys 25 --cycles 5 --outage-s 20 --mode restart ...]

`lease-worker serve-sqs` and a redis-server on 127.0.0.1; `--workers` processes of
`lease-worker run bench.apps.idempotency_app:app` (each its own idempotency owner, on one
`RedisStore`) consume one queue, started `--stagger-s` apart (real processes' heartbeats are
not in step). Every key `0..keys-1` is sent once per cycle, a cycle every `--cycle-s` from
0: the first sends them all at once, the others spread them evenly over `--spread-s` (a
stream of copies, during the outage and as the store comes back). Each run of a key's
handler works `--work-s` seconds. `--outage-at-s` after the first
cycle the redis-server is stopped for `--outage-s`, while the first handlers run, so their
completions wait in their workers; `--mode restart`: SHUTDOWN SAVE, then started again on
the same port and data directory (connections are refused meanwhile); `--mode pause`:
SIGSTOP, then SIGCONT (calls hang). Once every key is completed and the queue is empty (or
`--deadline-s` passed), the workers get SIGTERM.

Counted, from the handlers' lines and the workers' JSON logs (`--out DIR`, default a new
temporary directory, named in the report); goals in brackets:
- keys run twice (0), runs started while the store was down (0), keys lost: never run to
  the end, or not recorded as completed in Redis (0), messages left in the queue (0);
- completions dropped (`idempotency.completion_dropped`: 0), takeovers, takeover graces
  waited, duplicates deleted without running.
Exits 1 when a goal is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from functools import partial
from pathlib import Path
from typing import Any

from bench import _harness

__all__ = ["Outcome", "Settings", "main", "run"]

APP = "bench.apps.idempotency_app:app"
QUEUE = "idempotency-outage"
PREFIX = "idempotency-outage:"
ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True, slots=True)
class Settings:
    keys: int = 25
    cycles: int = 5
    cycle_s: float = 6.0
    spread_s: float = 4.0
    workers: int = 2
    stagger_s: float = 1.5
    work_s: float = 5.0
    outage_at_s: float = 3.5
    outage_s: float = 20.0
    mode: str = "restart"
    visibility_s: int = 10
    max_in_flight: int = 10
    store_timeout_s: float = 5.0
    deadline_s: float = 240.0


# -- the redis-server -------------------------------------------------------------------------


class RedisServer:
    """A redis-server on a free loopback port, its data in `directory` (no snapshots of its
    own: only SHUTDOWN SAVE writes them)."""

    def __init__(self, directory: Path) -> None:
        self.port = _harness.free_port()
        self.directory = directory
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (scripts/_system.sh installs it)")
        command = [binary, "--bind", "127.0.0.1", "--port", str(self.port)]
        command += ["--dir", str(self.directory), "--save", "", "--appendonly", "no"]
        self.process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 10
        while self.command(b"PING") != b"+PONG":
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start on port {self.port}")
            time.sleep(0.02)

    def command(self, line: bytes) -> bytes | None:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=2) as sock:
                sock.sendall(line + b"\r\n")
                return sock.recv(4096).strip() or None
        except OSError:
            return None

    def stop(self, *, save: bool) -> None:
        if self.process is None:
            return
        self.process.send_signal(signal.SIGCONT)  # a paused server hears nothing else
        if save:
            self.command(b"SHUTDOWN SAVE")
        else:
            self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
        self.process = None

    def signal(self, number: int) -> None:
        assert self.process is not None
        self.process.send_signal(number)


# -- the workers ------------------------------------------------------------------------------


@dataclass
class Workers:
    out: Path
    endpoint: str
    redis_url: str
    settings: Settings
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def start(self) -> None:
        command = [sys.executable, "-m", "worker", "run", APP, "--backend", "sqs"]
        command += ["--endpoint-url", self.endpoint, "--region", "us-east-1"]
        command += ["--log-format", "json", "--log-level", "info"]
        log = self.out / f"worker-{len(self.processes)}.log"
        with log.open("wb") as stderr:
            process = subprocess.Popen(
                command,
                cwd=ROOT,
                env=self._env(),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                start_new_session=True,
            )
        self.processes.append(process)
        if not wait_until(lambda: "worker.started" in events(log), 30):
            raise RuntimeError(f"worker {process.pid} did not start: see {log}")

    def _env(self) -> dict[str, str]:
        s = self.settings
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "LEASE_", "IDEM_"))}
        return (
            env
            | _harness.CREDENTIALS
            | {
                "IDEM_QUEUE": QUEUE,
                "IDEM_OUT": str(self.out),
                "IDEM_REDIS_URL": self.redis_url,
                "IDEM_PREFIX": PREFIX,
                "IDEM_WORK_S": str(s.work_s),
                "IDEM_VISIBILITY_S": str(s.visibility_s),
                "IDEM_MAX_IN_FLIGHT": str(s.max_in_flight),
                "IDEM_WAIT_S": "2",
                "IDEM_STORE_TIMEOUT_S": str(s.store_timeout_s),
            }
        )

    def stop(self) -> list[int | None]:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        codes: list[int | None] = []
        for process in self.processes:
            try:
                codes.append(process.wait(timeout=60))
            except subprocess.TimeoutExpired:
                process.kill()
                codes.append(process.wait(timeout=10))
        return codes


def wait_until(condition: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def events(log: Path) -> Counter[str]:
    """The `event` of each JSON line of a worker's log."""
    found: Counter[str] = Counter()
    for line in log.read_text(errors="replace").splitlines() if log.exists() else []:
        if line.startswith("{"):
            found[str(json.loads(line).get("event"))] += 1
    return found


# -- what happened -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Run:
    kind: str  # START or END
    pid: int
    key: int
    cycle: int
    receive_count: int
    at: float  # wall time


def read_runs(out: Path) -> list[Run]:
    runs = []
    for path in sorted(out.glob("runs-*.txt")):
        for line in path.read_text().splitlines():
            kind, pid, key, cycle, count, at = line.split()
            runs.append(Run(kind, int(pid), int(key), int(cycle), int(count), float(at)))
    return runs


@dataclass
class Outcome:
    settings: Settings
    out: Path
    outage: tuple[float, float]  # wall times the store went down and came back
    runs: list[Run]
    completed: list[bool]  # per key: its record in Redis is a completion
    left: tuple[int, int]  # visible, in flight
    logged: Counter[str]
    exit_codes: list[int | None]

    def starts(self) -> list[Run]:
        return [run for run in self.runs if run.kind == "START"]

    def twice(self) -> list[int]:
        counts = Counter(run.key for run in self.starts())
        return sorted(key for key, count in counts.items() if count > 1)

    def while_down(self) -> list[Run]:
        down, up = self.outage
        return [run for run in self.starts() if down <= run.at < up]

    def lost(self) -> list[int]:
        ended = {run.key for run in self.runs if run.kind == "END"}
        keys = range(self.settings.keys)
        return [key for key in keys if key not in ended or not self.completed[key]]

    def goals(self) -> dict[str, bool]:
        return {
            "0 keys run twice": not self.twice(),
            "0 runs started while the store was down": not self.while_down(),
            "0 keys lost": not self.lost(),
            "0 messages left": self.left == (0, 0),
            "0 completions dropped": self.logged["idempotency.completion_dropped"] == 0,
            "workers exited 0": self.exit_codes == [0] * len(self.exit_codes),
        }

    def show(self) -> str:
        s, (down, up) = self.settings, self.outage
        first = min((run.at for run in self.starts()), default=down)
        lines = [
            f"idempotency outage: {s.workers} workers, redis-server {s.mode} "
            f"{up - down:.1f} s (from {down - first:.1f} s after the first run), "
            f"{s.keys} keys x {s.cycles} cycles, serve-sqs; leases {s.visibility_s} s; "
            f"out {self.out}",
            f"runs {len(self.starts())} of {s.keys} keys; keys run twice {len(self.twice())} "
            f"{self.twice()}; started while down {len(self.while_down())}; keys lost "
            f"{len(self.lost())}; messages left {self.left[0]} visible, {self.left[1]} in flight",
            f"completions dropped {self.logged['idempotency.completion_dropped']}; takeovers "
            f"{self.logged['idempotency.took_over']}; takeover graces waited "
            f"{self.logged['idempotency.takeover_waiting']}; duplicates "
            f"{self.logged['handler.duplicate']}; retries {self.logged['handler.retry']}",
        ]
        lines += [f"  [{'ok' if ok else 'MISSED'}] {goal}" for goal, ok in self.goals().items()]
        return "\n".join(lines)


# -- the scenario -----------------------------------------------------------------------------


def run(settings: Settings, out: Path) -> Outcome:
    redis = RedisServer(out / "redis")
    redis.directory.mkdir(parents=True, exist_ok=True)
    redis.start()
    try:
        with _harness.server() as server:
            answer = server.sqs.call(
                "CreateQueue",
                QueueName=QUEUE,
                Attributes={"VisibilityTimeout": str(settings.visibility_s)},
            )
            workers = Workers(out, server.url, redis.url, settings)
            try:
                url = answer["QueueUrl"]
                outage = _drive(settings, server.sqs, url, redis, workers)
                finished = partial(_finished, settings, server.sqs, url, out)
                wait_until(finished, settings.deadline_s)
                left = server.sqs.left(url)
            finally:
                codes = workers.stop()
        completed = [_completed(redis, key) for key in range(settings.keys)]
    finally:
        redis.stop(save=False)
    logged = sum((events(log) for log in sorted(out.glob("worker-*.log"))), Counter[str]())
    return Outcome(settings, out, outage, read_runs(out), completed, left, logged, codes)


def _drive(
    settings: Settings, sqs: _harness.Sqs, url: str, redis: RedisServer, workers: Workers
) -> tuple[float, float]:
    """Starts the workers, sends the cycles and makes the outage; its wall times."""
    for index in range(settings.workers):
        if index:
            time.sleep(settings.stagger_s)
        workers.start()
    spacing = settings.spread_s / settings.keys  # the first cycle at once, the others spread
    steps = [
        (cycle * settings.cycle_s + (key * spacing if cycle else 0.0), "send", cycle, key)
        for cycle in range(settings.cycles)
        for key in range(settings.keys)
    ]
    steps += [
        (settings.outage_at_s, "down", 0, 0),
        (settings.outage_at_s + settings.outage_s, "up", 0, 0),
    ]
    started, outage = time.monotonic(), [0.0, 0.0]
    for at, what, cycle, key in sorted(steps):
        time.sleep(max(0.0, at - (time.monotonic() - started)))
        if what == "send":
            body = json.dumps({"key": key, "cycle": cycle})
            sqs.call("SendMessage", QueueUrl=url, MessageBody=body)
        elif what == "down":
            outage[0] = time.time()
            _store_down(redis, settings.mode)
        else:
            _store_up(redis, settings.mode)
            outage[1] = time.time()
    return outage[0], outage[1]


def _store_down(redis: RedisServer, mode: str) -> None:
    if mode == "pause":
        redis.signal(signal.SIGSTOP)
    else:
        redis.stop(save=True)


def _store_up(redis: RedisServer, mode: str) -> None:
    if mode == "pause":
        redis.signal(signal.SIGCONT)
    else:
        redis.start()


def _finished(settings: Settings, sqs: _harness.Sqs, url: str, out: Path) -> bool:
    ended = {run.key for run in read_runs(out) if run.kind == "END"}
    return len(ended) == settings.keys and sqs.left(url) == (0, 0)


def _completed(redis: RedisServer, key: int) -> bool:
    answer = redis.command(f"GET {PREFIX}key:{QUEUE}:{key}".encode())
    return answer is not None and b'"state":"completed"' in answer


# -- the command ------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.idempotency_outage", description=__doc__)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    defaults = Settings()
    for option in fields(Settings):
        default: Any = getattr(defaults, option.name)
        flag = "--" + option.name.replace("_", "-")
        if option.name == "mode":
            parser.add_argument(flag, choices=("restart", "pause"), default=default)
        else:
            parser.add_argument(flag, type=type(default), default=default)
    parser.add_argument("--out", help="where the runs and logs go (default: a new temp dir)")
    args = parser.parse_args(argv)
    settings = Settings(**{option.name: getattr(args, option.name) for option in fields(Settings)})
    out = Path(args.out or tempfile.mkdtemp(prefix="idempotency-outage-"))
    out.mkdir(parents=True, exist_ok=True)
    outcome = run(settings, out)
    print(outcome.show())
    return 0 if all(outcome.goals().values()) else 1


if __name__ == "__main__":
    sys.exit(main())
