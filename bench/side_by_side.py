"""Side by side over the SQS protocol: lease-worker and its peers against the embedded endpoint.

Every contender drains the same queue of N small messages with a no-op handler, in turn, each
against a fresh `lease-worker serve-sqs` process (loopback, dummy credentials). The queue is
filled before the contender starts (not measured). The clock runs from the first receive to
the moment the queue is empty (visible + in flight = 0), both seen by polling
GetQueueAttributes (every 5 ms before the start, every 50 ms during the run, every 5 ms once
the contender says "done"); CPU is read from /proc (utime + stime of the contender's whole
process tree, and of the server) at those same two moments, so start-up is not counted.
Requests per operation come from the endpoint's `GET /_stats`, less the harness's own polls.
At full size the contenders take turns three times; each row shows its fastest round (the
least disturbed by anything else on the machine), every round's msgs/s in brackets.

Every contender may hold the same number of messages at once (10, one SQS batch; dramatiq's
defaults hold up to 10 per process), with leases or heartbeats on where the library has
them and its documented throughput settings; the list under the table gives them all.
bench/peers/setup.sh installs the peers (run from here when they are missing).
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any

from bench.peers import contenders as peers
from bench.peers.contenders import ROOT, Contender

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
        self._stderr: deque[str] = deque(maxlen=20)
        self._readers = [
            threading.Thread(target=self._read, args=(stream, take), daemon=True)
            for stream, take in (
                (self.popen.stdout, self._stdout),
                (self.popen.stderr, self._stderr.append),
            )
        ]
        for reader in self._readers:
            reader.start()

    def _stdout(self, line: str) -> None:
        if line == "done":
            self.done.set()

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


def _free_port() -> int:
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
    port = _free_port()
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


# -- one contender --------------------------------------------------------------------------


class Failed(Exception):
    """A contender that could not be measured; the message says why."""


@dataclass(frozen=True, slots=True)
class Sample:
    at: float
    worker_cpu_s: float
    server_cpu_s: float


@dataclass(frozen=True, slots=True)
class Row:
    contender: Contender
    version: str
    messages: int
    wall_s: float = 0.0
    worker_cpu_s: float = 0.0
    server_cpu_s: float = 0.0
    requests: Counter[str] = field(default_factory=Counter)
    failure: str | None = None
    #: msgs/s of every round, in order (the row's own figures are its fastest round's).
    rates: tuple[float, ...] = ()

    @property
    def rate(self) -> float:
        return self.messages / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def requests_per_message(self) -> float:
        return sum(self.requests.values()) / self.messages


def _plain_body(index: int) -> str:
    return json.dumps({"n": index})


def _dramatiq_body(index: int) -> str:
    """What dramatiq-sqs's `enqueue` sends for `noop.send()`: base64 of dramatiq's JSON."""
    message = {
        "queue_name": QUEUE,
        "actor_name": "noop",
        "args": [],
        "kwargs": {},
        "options": {},
        "message_id": str(uuid.UUID(int=index)),
        "message_timestamp": int(time.time() * 1000),
    }
    return base64.b64encode(json.dumps(message, separators=(",", ":")).encode()).decode()


def _watch(sqs: Sqs, url: str, messages: int, process: Process, server_pid: int) -> list[Sample]:
    """The first and last samples: when the first receive shows, when the queue is empty."""
    limit_s = 30 + messages / 200
    deadline = time.monotonic() + limit_s
    samples: list[Sample] = []
    while True:
        code = process.exited()
        visible, in_flight = sqs.left(url)
        now = time.perf_counter()
        if not samples and (visible < messages or in_flight):
            samples.append(Sample(now, cpu_s(process.pid), cpu_s(server_pid)))
        if samples and visible + in_flight == 0:
            samples.append(Sample(now, cpu_s(process.pid), cpu_s(server_pid)))
            return samples
        if code is not None:
            raise Failed(f"exited with status {code}: {process.stderr_tail() or 'no output'}")
        if time.monotonic() > deadline:
            left = visible + in_flight
            raise Failed(f"did not drain in {limit_s:.0f} s ({left:,} of {messages:,} left)")
        if not samples or process.done.is_set():
            time.sleep(0.005)
        else:
            process.done.wait(0.05)


def measure(contender: Contender, messages: int, *, version: str = "") -> Row:
    with server() as endpoint:
        sqs = endpoint.sqs
        attributes = {"VisibilityTimeout": "30"}
        url = str(sqs.call("CreateQueue", QueueName=QUEUE, Attributes=attributes)["QueueUrl"])
        sqs.fill(url, messages, _dramatiq_body if contender.dramatiq else _plain_body)
        before = endpoint.requests()
        sqs.calls.clear()
        env = {
            "BENCH_ENDPOINT": endpoint.url,
            "BENCH_QUEUE": QUEUE,
            "BENCH_QUEUE_URL": url,
            "BENCH_MESSAGES": str(messages),
            **contender.env,
        }
        command = [arg.replace("{endpoint}", endpoint.url) for arg in contender.command]
        with started(command, env=env, cwd=contender.cwd) as process:
            first, last = _watch(sqs, url, messages, process, endpoint.process.pid)
            requests = endpoint.requests() - before - sqs.calls
    return Row(
        contender,
        version,
        messages,
        wall_s=last.at - first.at,
        worker_cpu_s=last.worker_cpu_s - first.worker_cpu_s,
        server_cpu_s=last.server_cpu_s - first.server_cpu_s,
        requests=requests,
    )


def attempt(contender: Contender, messages: int) -> Row | str:
    """`measure`, or why the contender could not be measured."""
    reason = peers.missing(contender)
    if reason is not None:
        return reason
    try:
        return measure(contender, messages)
    except (Failed, RuntimeError, OSError, ValueError, KeyError) as error:
        return str(error) or type(error).__name__


def run(messages: int, rounds: int = 1) -> list[Row]:
    """Install the peers if need be, then measure every contender, `rounds` times in turn.

    Each row is the contender's fastest round (the one least disturbed by whatever else the
    machine was doing), with every round's rate in `rates`. A contender that fails once is
    reported as failed and not run again.
    """
    trouble = peers.install()
    if trouble:
        print(f"side_by_side: PEERS NOT (ALL) INSTALLED: {trouble}", file=sys.stderr)
    versions = peers.versions()
    everyone = peers.contenders()
    measured: dict[str, list[Row]] = {c.name: [] for c in everyone}
    failures: dict[str, str] = {}
    for round_ in range(1, rounds + 1):
        for contender in everyone:
            if contender.name in failures:
                continue
            got = attempt(contender, messages)
            if isinstance(got, str):
                failures[contender.name] = got
                print(f"side_by_side: {contender.name} NOT MEASURED: {got}", file=sys.stderr)
                continue
            measured[contender.name].append(got)
            print(
                f"side_by_side: round {round_}/{rounds}: {contender.name}: {got.rate:,.0f} msgs/s",
                file=sys.stderr,
            )
    rows: list[Row] = []
    for contender in everyone:
        version = versions.get(contender.name, "?")
        if contender.name in failures:
            rows.append(Row(contender, version, messages, failure=failures[contender.name]))
            continue
        tries = measured[contender.name]
        best = max(tries, key=lambda row: row.rate)
        rows.append(replace(best, version=version, rates=tuple(r.rate for r in tries)))
    return rows


# -- the report -----------------------------------------------------------------------------


def _operations(requests: Counter[str]) -> str:
    return ", ".join(f"{op} {count:,}" for op, count in requests.most_common())


def table(rows: list[Row]) -> list[str]:
    lines = [
        "| contender | version | msgs/s (each round) | worker CPU ms/msg | server CPU ms/msg | "
        "requests/msg | requests by operation |",
        "| --- | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for row in rows:
        name = row.contender.name
        if row.failure is not None:
            reason = row.failure.replace("|", "/")
            lines.append(f"| {name} | {row.version} | | | | | **not measured**: {reason} |")
            continue
        each = " / ".join(f"{rate:,.0f}" for rate in row.rates)
        lines.append(
            f"| {name} | {row.version} | **{row.rate:,.0f}** ({each}) | "
            f"{1000 * row.worker_cpu_s / row.messages:.3f} | "
            f"{1000 * row.server_cpu_s / row.messages:.3f} | "
            f"{row.requests_per_message:.3f} | {_operations(row.requests)} |"
        )
    return lines


def summary(rows: list[Row]) -> str:
    ours = [r for r in rows if r.contender.name.startswith("lease-worker")]
    if not ours or all(row.failure is not None for row in ours):
        return "lease-worker itself was not measured, so there are no ratios."
    peers = [r for r in rows if r not in ours and r.failure is None and r.rate > 0]
    missing = [row.contender.name for row in rows if row.failure is not None]
    sentences = []
    for row in ours:
        if row.failure is not None:
            continue
        ratios = ", ".join(f"{row.rate / peer.rate:.2f} ({peer.contender.name})" for peer in peers)
        sentences.append(
            f"{row.contender.name}, leases on, drained {row.messages:,} messages at "
            f"{row.rate:,.0f} msgs/s with {row.requests_per_message:.3f} SQS requests per "
            f"message; its msgs/s ÷ each other contender's: {ratios or 'no peer ran'}."
        )
    if missing:
        sentences.append(f"**Not measured: {', '.join(missing)}.**")
    return " ".join(sentences)


def plot(rows: list[Row], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    shown = list(reversed(rows))
    figure, axes = pyplot.subplots(figsize=(7.2, 3.6), dpi=100)
    names = [row.contender.name for row in shown]
    colors = ["tab:orange" if name.startswith("lease-worker") else "tab:blue" for name in names]
    bars = axes.barh(names, [row.rate for row in shown], color=colors)
    labels = ["not measured" if r.failure else f"{r.rate:,.0f}" for r in shown]
    axes.bar_label(bars, labels, padding=3, fontsize=8)
    axes.margins(x=0.15)
    axes.set_xlabel("messages per second (no-op handler)")
    axes.set_title(f"Draining {rows[0].messages:,} messages over SQS's protocol", fontsize=10)
    figure.tight_layout()
    figure.savefig(path)
    pyplot.close(figure)


def report(messages: int, images: Path, rounds: int | None = None) -> list[str]:
    """The section's markdown; the chart goes to `images`/side_by_side.png.

    `rounds` defaults to 3 at full size and 1 at smoke size (under 5,000 messages).
    """
    rows = run(messages, rounds or (3 if messages >= 5_000 else 1))
    plot(rows, images / "side_by_side.png")
    settings = [f"- {row.contender.name}: {row.contender.settings}" for row in rows]
    return [
        _body(__doc__),
        "",
        *table(rows),
        "",
        summary(rows),
        "",
        f"![side by side]({images.name}/side_by_side.png)",
        "",
        "Settings (the handler is a no-op everywhere; a budget of "
        f"{peers.CONCURRENCY} messages held at once):",
        "",
        *settings,
    ]


def _body(docstring: str | None) -> str:
    return (docstring or "").strip().partition("\n")[2].strip()


def main() -> None:
    """`python -m bench.side_by_side [--messages N] [--rounds R] [--images DIR]`: this section
    alone, printed as markdown (`python -m bench.report` runs it with the rest)."""
    import argparse

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--images", type=Path, default=Path(tempfile.gettempdir()) / "bench")
    args = parser.parse_args()
    args.images.mkdir(parents=True, exist_ok=True)
    print("\n".join(report(args.messages, args.images, args.rounds)))


if __name__ == "__main__":
    main()
