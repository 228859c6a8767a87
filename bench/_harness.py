"""The side-by-side benchmark's harness: processes, their CPU time from /proc, a minimal
SQS JSON client for the harness's own polls, and a fresh `lease-worker serve-sqs` per run."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol

from bench.peers.contenders import ROOT

QUEUE = "side-by-side"
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
}
_TICK_S = 1 / os.sysconf("SC_CLK_TCK")


# -- processes ------------------------------------------------------------------------------


def _stat(pid: int) -> list[str]:
    """The fields of /proc/PID/stat after the command name (so fields[0] is field 3)."""
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rpartition(")")[2].split()


def cpu_s(pid: int) -> float:
    """CPU seconds of `pid` with all its threads, its live descendants and reaped children."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        with suppress(OSError, IndexError, ValueError):
            parents[int(entry)] = int(_stat(int(entry))[1])
    total, pending = 0.0, [pid]
    while pending:
        current = pending.pop()
        with suppress(OSError):
            # utime, stime, cutime, cstime: fields 14 to 17.
            total += sum(int(value) for value in _stat(current)[11:15]) * _TICK_S
        pending.extend(child for child, parent in parents.items() if parent == current)
    return total


def _inherited() -> dict[str, str]:
    """This environment without AWS or lease-worker settings, which would skew a contender."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "LEASE_WORKER_"))}


class Process:
    """A child in its own process group; its stdout watched for "done", its stderr's tail kept."""

    def __init__(self, command: list[str], *, env: Mapping[str, str], cwd: Path) -> None:
        self.popen = subprocess.Popen(
            command,
            cwd=cwd,
            env={**_inherited(), **CREDENTIALS, **env},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        self.done = threading.Event()
        #: Set when the child prints "ready" (lease-worker's no-op app, the floor).
        self.ready = threading.Event()
        self._stderr: deque[str] = deque(maxlen=20)
        #: Every line written to standard error, for benches that count log lines.
        self.stderr_lines: list[str] = []
        self._readers = [
            threading.Thread(target=self._read, args=(stream, take), daemon=True)
            for stream, take in (
                (self.popen.stdout, self._stdout),
                (self.popen.stderr, self._stderr_line),
            )
        ]
        for reader in self._readers:
            reader.start()

    def _stdout(self, line: str) -> None:
        if line == "done":
            self.done.set()
        elif line == "ready":
            self.ready.set()

    def _stderr_line(self, line: str) -> None:
        self._stderr.append(line)
        self.stderr_lines.append(line)

    @staticmethod
    def _read(stream: IO[bytes] | None, take: Callable[[str], None]) -> None:
        assert stream is not None
        with stream:
            for line in stream:
                take(line.decode(errors="replace").strip())

    @property
    def pid(self) -> int:
        return self.popen.pid

    def exited(self) -> int | None:
        return self.popen.poll()

    def stderr_tail(self, lines: int = 3) -> str:
        """The last lines of standard error. Once the process has exited, what it wrote is
        read to the end first: its reader thread may not have caught up yet (a contender
        that died at once was reported with 'no output')."""
        if self.popen.poll() is not None:
            self._readers[1].join(1.0)
        return " / ".join(line[:200] for line in list(self._stderr)[-lines:] if line)

    def stop(self, grace_s: float = 3.0) -> None:
        """SIGTERM to the whole group, then SIGKILL if it is still there after `grace_s`."""
        for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
            with suppress(ProcessLookupError):
                os.killpg(self.popen.pid, sig)
            try:
                self.popen.wait(wait_s)
                break
            except subprocess.TimeoutExpired:
                continue
        for reader in self._readers:
            reader.join(1.0)


@contextmanager
def started(command: list[str], *, env: Mapping[str, str], cwd: Path = ROOT) -> Iterator[Process]:
    process = Process(command, env=env, cwd=cwd)
    try:
        yield process
    finally:
        process.stop()


# -- the endpoint ---------------------------------------------------------------------------


class Sqs:
    """Just enough of SQS's JSON protocol over one keep-alive connection; counts its calls."""

    def __init__(self, port: int) -> None:
        self._connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        self.calls: Counter[str] = Counter()

    def get(self, path: str) -> tuple[int, bytes]:
        self._connection.request("GET", path)
        response = self._connection.getresponse()
        return response.status, response.read()

    def call(self, operation: str, **params: Any) -> dict[str, Any]:
        self.calls[operation] += 1
        headers = {
            "X-Amz-Target": f"AmazonSQS.{operation}",
            "Content-Type": "application/x-amz-json-1.0",
        }
        self._connection.request("POST", "/", json.dumps(params), headers)
        response = self._connection.getresponse()
        raw = response.read()
        answer: dict[str, Any] = json.loads(raw) if raw else {}
        if response.status != 200:
            raise RuntimeError(f"{operation}: HTTP {response.status} {answer}")
        return answer

    def left(self, url: str) -> tuple[int, int]:
        """(visible, in flight) messages of the queue at `url`."""
        names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
        got = self.call("GetQueueAttributes", QueueUrl=url, AttributeNames=names)["Attributes"]
        return int(got[names[0]]), int(got[names[1]])

    def fill(self, url: str, count: int, body: Callable[[int], str]) -> None:
        for start in range(0, count, 10):
            entries = [
                {"Id": str(i), "MessageBody": body(i)} for i in range(start, min(start + 10, count))
            ]
            answer = self.call("SendMessageBatch", QueueUrl=url, Entries=entries)
            if answer.get("Failed"):
                raise RuntimeError(f"SendMessageBatch: {answer['Failed'][0]}")

    def close(self) -> None:
        self._connection.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Server:
    process: Process
    port: int
    sqs: Sqs

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def requests(self) -> Counter[str]:
        status, raw = self.sqs.get("/_stats")
        if status != 200:
            raise RuntimeError(f"GET /_stats: HTTP {status}")
        return Counter({str(k): int(v) for k, v in json.loads(raw)["requests"].items()})


@contextmanager
def server() -> Iterator[Server]:
    """A fresh `lease-worker serve-sqs` process on a free loopback port."""
    port = free_port()
    command = [sys.executable, "-m", "worker", "serve-sqs", "--host", "127.0.0.1"]
    with started([*command, "--port", str(port), "--log-level", "warning"], env={}) as process:
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if process.exited() is not None or time.monotonic() > deadline:
                    tail = process.stderr_tail()
                    raise RuntimeError(f"serve-sqs did not start: {tail}") from None
                time.sleep(0.02)
        sqs = Sqs(port)
        try:
            yield Server(process, port, sqs)
        finally:
            sqs.close()


class Hop(Protocol):
    """A process between a contender and the endpoint (bench/latency.py's proxy): the
    contender is given its URL instead of the endpoint's, and its CPU is read apart."""

    @property
    def url(self) -> str: ...

    @property
    def pid(self) -> int: ...


#: Starts a hop in front of the endpoint at the URL it is given; stops it on leaving.
Via = Callable[[str], AbstractContextManager[Hop]]
