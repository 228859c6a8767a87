"""Issue 29 (1): a flood of the ops port while 100 leases renew, against a real worker.

    python -m bench.ops_flood [--connections 20000] [--half-sent 600] [--flood-s 40]

A fresh `lease-worker serve-sqs` holds one queue of `--leases` messages. One `lease-worker
run bench.ops_flood:app --backend sqs --ops-port P` process, its open-file limit set to
`--nofile` (1024: the 20,000 connections are 20 times what it may open), receives them all
and holds each for the whole run: visibility 6 s, renewed 2 s before the deadline, so every
lease is renewed every 4 s and a loop stalled for 2 s lets one lapse. Once all are held:

- `--processes` load generators (each raising its own RLIMIT_NOFILE) keep `--connections`
  TCP connections to the ops port open or opening for `--flood-s`: each sends nothing, and
  is opened again when the worker closes it (or when a connect times out: past the
  listener's backlog the kernel drops the SYN);
- one more keeps `--half-sent` requests open, each a request line and one header line
  more every second, never the blank line that ends the head;
- this process samples the worker's open files (/proc/PID/fd) every 0.1 s, and which of
  them are ops-port connections (/proc/net/tcp), to time how long the worker held each;
  and asks `/healthz` every 2 s (3 s timeout), for information.

After the flood: `POST /api/dlq/redrive` with a valid token and 20,000 nested arrays (40 kB);
then the handlers return, the worker drains on SIGTERM, and its last `/metrics` scrape gives
the renewals and losses. Reported: lapses (the handlers' own view: a lease whose deadline
passed, a run cancelled, a message received twice; and `lease_worker_leases_lost_total`),
the worker's peak open files against its limit, how long it held an idle connection and a
half-sent request, its log lines during the flood (all, and per second at the worst),
and the nested JSON's status. `--worker-root DIR` runs the worker from another checkout
(with this file copied in), to measure the code before a change.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from worker import LeaseConfig, Message, Worker, WorkerConfig

__all__ = ["app", "main"]

ROOT = Path(__file__).resolve().parents[1]
QUEUE = os.environ.get("OPS_FLOOD_QUEUE", "ops-flood")
TOKEN = "ops-flood-token"
VISIBILITY_S = 6
MARGIN_S = 2.0

# -- the worker under test ------------------------------------------------------------------

app = Worker(
    WorkerConfig(
        max_in_flight=int(os.environ.get("OPS_FLOOD_LEASES", "100")),
        wait_s=1,
        lease=LeaseConfig(visibility_s=VISIBILITY_S, renew_margin_s=MARGIN_S),
    ),
    name="ops-flood",
)


@app.handler(QUEUE, decode="raw")
async def hold(message: Message) -> None:
    """Hold the message until the file `OPS_FLOOD_RELEASE` exists, watching its lease: prints
    `HELD id receive_count` once, then `DONE id receive_count renewals least_left_s`."""
    release = anyio.Path(os.environ["OPS_FLOOD_RELEASE"])
    loop = asyncio.get_running_loop()
    print(f"HELD {message.message_id} {message.receive_count}", flush=True)
    least = float("inf")
    try:
        while not await release.exists():
            least = min(least, message.lease.deadline - loop.time())
            await anyio.sleep(0.2)
    except BaseException:
        print(f"ABORT {message.message_id} {message.receive_count}", flush=True)
        raise
    renewals = message.lease.renewals
    print(f"DONE {message.message_id} {message.receive_count} {renewals} {least:.3f}", flush=True)


# -- load generators (child processes) ------------------------------------------------------


def _raise_nofile() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


async def _idle_flood(port: int, count: int, seconds: float) -> dict[str, Any]:
    """`count` connections kept open or opening for `seconds`, sending nothing."""
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    stats: Counter[str] = Counter()
    open_now = 0
    peak = 0

    async def one() -> None:
        nonlocal open_now, peak
        while (left := end - loop.time()) > 0:
            sock = socket.socket()
            sock.setblocking(False)
            try:
                try:
                    connect = loop.sock_connect(sock, ("127.0.0.1", port))
                    await asyncio.wait_for(connect, min(3, left))
                except TimeoutError:
                    stats["connect timed out"] += 1
                    continue
                except OSError as error:
                    stats[f"connect failed: {os.strerror(error.errno or 0)}"] += 1
                    await asyncio.sleep(min(0.5, max(0.0, end - loop.time())))
                    continue
                stats["connected"] += 1
                open_now += 1
                peak = max(peak, open_now)
                try:
                    data = await asyncio.wait_for(loop.sock_recv(sock, 4096), end - loop.time())
                    stats["closed by the worker" if not data else "answered"] += 1
                except TimeoutError:
                    stats["open at the end"] += 1
                except OSError:
                    stats["reset by the worker"] += 1
                finally:
                    open_now -= 1
            finally:
                sock.close()

    await asyncio.gather(*(one() for _ in range(count)))
    return {"stats": dict(stats), "peak_open": peak}


async def _half_sent(port: int, count: int, seconds: float) -> dict[str, Any]:
    """`count` requests whose head never ends: a request line, then a header line a second.
    Reports each connection's local port, to be matched with the worker's side."""
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    stats: Counter[str] = Counter()
    ports: list[int] = []

    async def one(index: int) -> None:
        while (left := end - loop.time()) > 0:
            sock = socket.socket()
            sock.setblocking(False)
            try:
                try:
                    connect = loop.sock_connect(sock, ("127.0.0.1", port))
                    await asyncio.wait_for(connect, min(3, left))
                except (TimeoutError, OSError):
                    stats["connect failed or timed out"] += 1
                    continue
                ports.append(sock.getsockname()[1])
                stats["connected"] += 1
                head = f"POST /api/dlq/redrive HTTP/1.1\r\nHost: 127.0.0.1\r\nX-N: {index}\r\n"
                try:
                    await loop.sock_sendall(sock, head.encode())
                    while end - loop.time() > 0:
                        try:
                            data = await asyncio.wait_for(loop.sock_recv(sock, 4096), 1.0)
                        except TimeoutError:
                            await loop.sock_sendall(sock, b"X-More: 1\r\n")
                            continue
                        stats["closed by the worker" if not data else "answered"] += 1
                        break
                    else:
                        stats["open at the end"] += 1
                except OSError:
                    stats["reset by the worker"] += 1
            finally:
                sock.close()

    await asyncio.gather(*(one(i) for i in range(count)))
    return {"stats": dict(stats), "ports": ports}


_CHILD = [sys.executable, "-m", "bench.ops_flood", "--child"]


def _child(kind: str, port: int, count: int, seconds: float) -> None:
    _raise_nofile()
    flood = (_idle_flood if kind == "idle" else _half_sent)(port, count, seconds)
    print(json.dumps(asyncio.run(flood)), flush=True)


# -- watching the worker ---------------------------------------------------------------------


@dataclass
class _Held:
    first: float
    last: float
    remote_port: int | None = None


@dataclass
class SocketWatch:
    """The worker's open files every 0.1 s; its ops-port connections by socket inode."""

    pid: int
    port: int
    peak_fds: int = 0
    fds: list[tuple[float, int]] = field(default_factory=list)
    held: dict[int, _Held] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def _run(self) -> None:
        inodes: dict[int, _Held] = {}
        unmapped: set[int] = set()
        last_map = 0.0
        while not self._stop.is_set():
            now = time.monotonic()
            try:
                names = os.listdir(f"/proc/{self.pid}/fd")
            except OSError:
                return
            self.fds.append((now, len(names)))
            self.peak_fds = max(self.peak_fds, len(names))
            for name in names:
                with contextlib.suppress(OSError):
                    target = os.readlink(f"/proc/{self.pid}/fd/{name}")
                    if target.startswith("socket:["):
                        inode = int(target[8:-1])
                        seen = inodes.get(inode)
                        if seen is None:
                            inodes[inode] = _Held(now, now)
                            unmapped.add(inode)
                        else:
                            seen.last = now
            if unmapped and now - last_map > 0.5:
                last_map = now
                for inode, (local, remote) in _tcp_ports(unmapped).items():
                    unmapped.discard(inode)
                    if local == self.port and remote != 0:  # not the listening socket
                        inodes[inode].remote_port = remote
                        self.held[inode] = inodes[inode]
            self._stop.wait(0.1)


def _tcp_ports(inodes: set[int]) -> dict[int, tuple[int, int]]:
    """(local port, remote port) of the TCP sockets among `inodes`."""
    found: dict[int, tuple[int, int]] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as lines:
            next(lines)
            for line in lines:
                fields = line.split()
                inode = int(fields[9])
                if inode in inodes:
                    local = int(fields[1].rsplit(":", 1)[1], 16)
                    remote = int(fields[2].rsplit(":", 1)[1], 16)
                    found[inode] = (local, remote)
    return found


class Lines:
    """A process's standard error, line by line, each with the time it came."""

    def __init__(self, stream: Any) -> None:
        self.lines: list[tuple[float, str]] = []
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: Any) -> None:
        with stream:
            for raw in stream:
                self.lines.append((time.monotonic(), raw.decode(errors="replace").rstrip("\n")))

    def between(self, start: float, end: float) -> list[str]:
        return [line for at, line in list(self.lines) if start <= at < end]

    def join(self) -> None:
        self._thread.join(5)


def _events(lines: list[str]) -> Counter[str]:
    found: Counter[str] = Counter()
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            found["(not JSON)"] += 1
            continue
        level = record.get("level", "?")
        event = str(record.get("event", "?"))[:60]
        kind = record.get("kind")
        found[f"{level} {event}" + (f" kind={kind}" if kind else "")] += 1
    return found


def _per_second_peak(stamps: list[float]) -> int:
    buckets = Counter(int(at) for at in stamps)
    return max(buckets.values(), default=0)


# -- the run ----------------------------------------------------------------------------------


def _http(port: int, path: str, *, body: bytes | None = None, timeout: float = 5) -> int:
    headers = {"Host": f"127.0.0.1:{port}"}
    if body is not None:
        headers |= {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            answer.read()
            return int(answer.status)
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return 0


def _metric(text: str, name: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and (line[len(name)] in " {"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        return str(answer.read().decode())


@dataclass
class Settings:
    leases: int = 100
    connections: int = 20_000
    half_sent: int = 600
    processes: int = 4
    flood_s: float = 40.0
    nofile: int = 1024
    worker_root: Path = ROOT
    extra: list[str] = field(default_factory=list)


def run(settings: Settings) -> dict[str, Any]:
    from bench import _harness

    result: dict[str, Any] = {"settings": settings}
    release = Path(f"/tmp/ops-flood-release-{os.getpid()}")
    release.unlink(missing_ok=True)
    with _harness.server() as sqs:
        url = sqs.sqs.call("CreateQueue", QueueName=QUEUE)["QueueUrl"]
        sqs.sqs.fill(url, settings.leases, lambda i: f"m{i}")
        ops_port = _harness.free_port()
        limit = settings.nofile
        command = [
            sys.executable,
            "-c",
            "import os, resource, sys; "
            f"resource.setrlimit(resource.RLIMIT_NOFILE, ({limit}, {limit})); "
            "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])",
            "-m",
            "worker",
            "run",
            "bench.ops_flood:app",
            "--backend",
            "sqs",
            "--endpoint-url",
            sqs.url,
            "--region",
            "us-east-1",
            "--ops-port",
            str(ops_port),
            "--log-format",
            "json",
            *settings.extra,
        ]
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "LEASE_WORKER_"))},
            **_harness.CREDENTIALS,
            "OPS_FLOOD_RELEASE": str(release),
            "OPS_FLOOD_QUEUE": QUEUE,
            "OPS_FLOOD_LEASES": str(settings.leases),
            "LEASE_WORKER_CONSOLE_TOKEN": TOKEN,
            "PYTHONPATH": str(settings.worker_root),
        }
        worker = subprocess.Popen(
            command,
            cwd=settings.worker_root,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        stdout = Lines(worker.stdout)
        stderr = Lines(worker.stderr)
        try:
            result |= _flood(settings, worker, ops_port, stdout, stderr, release)
        finally:
            release.touch()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(worker.pid, signal.SIGTERM)
            try:
                worker.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(worker.pid, signal.SIGKILL)
                worker.wait()
            stdout.join()
            stderr.join()
            release.unlink(missing_ok=True)
        result["exit_status"] = worker.returncode
        outcome = [line for _, line in stdout.lines]
        result["held"] = sum(line.startswith("HELD ") for line in outcome)
        done = [line.split() for line in outcome if line.startswith("DONE ")]
        result["done"] = len(done)
        result["aborted"] = sum(line.startswith("ABORT ") for line in outcome)
        result["received_twice"] = sum(
            1 for line in outcome if line.startswith("HELD ") and line.split()[2] != "1"
        )
        result["least_left_s"] = min((float(d[4]) for d in done), default=float("nan"))
        result["deadline_passed"] = sum(1 for d in done if float(d[4]) <= 0)
        result["renewals_per_lease"] = min((int(d[3]) for d in done), default=0)
    return result


def _flood(
    settings: Settings,
    worker: subprocess.Popen[bytes],
    port: int,
    stdout: Lines,
    stderr: Lines,
    release: Path,
) -> dict[str, Any]:
    result: dict[str, Any] = {}
    deadline = time.monotonic() + 60
    while sum(line.startswith("HELD ") for _, line in stdout.lines) < settings.leases:
        if worker.poll() is not None or time.monotonic() > deadline:
            tail = " / ".join(line for _, line in stderr.lines[-5:])
            raise RuntimeError(f"the worker did not take every message: {tail[:2000]}")
        time.sleep(0.1)
    # A renewal round or two before the flood, to see the worker at rest.
    time.sleep(VISIBILITY_S)
    before = _scrape(port)
    watch = SocketWatch(worker.pid, port)
    watch.start()
    per_process = settings.connections // settings.processes
    started = time.monotonic()
    children = [
        subprocess.Popen(
            [*_CHILD, kind, str(port), str(count), str(settings.flood_s)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for kind, count in [("idle", per_process)] * settings.processes
        + [("half", settings.half_sent)]
    ]
    probes: Counter[int] = Counter()
    while any(child.poll() is None for child in children):
        if worker.poll() is not None:
            break
        probes[_http(port, "/healthz", timeout=3)] += 1
        time.sleep(2)
    reports = []
    for child in children:
        out, err = child.communicate(timeout=120)
        try:
            reports.append(json.loads(out.decode().strip().splitlines()[-1]))
        except (IndexError, ValueError):
            reports.append({"error": err.decode()[-1000:]})
    ended = time.monotonic()
    time.sleep(1.0)
    watch.stop()
    result["worker_alive_after_flood"] = worker.poll() is None
    result["probes"] = dict(probes)
    idle_stats: Counter[str] = Counter()
    for report in reports[:-1]:
        idle_stats.update(report.get("stats", {}))
    result["idle_clients"] = dict(idle_stats)
    result["idle_peak_open"] = sum(report.get("peak_open", 0) for report in reports[:-1])
    result["half_sent_clients"] = reports[-1].get("stats", reports[-1])
    half_ports = set(reports[-1].get("ports", []))
    held = list(watch.held.values())
    half_held = [h.last - h.first for h in held if h.remote_port in half_ports]
    idle_held = [h.last - h.first for h in held if h.remote_port not in half_ports]
    result["ops_connections_accepted"] = len(held)
    result["longest_half_sent_s"] = max(half_held, default=0.0)
    result["half_sent_accepted"] = len(half_held)
    result["longest_idle_s"] = max(idle_held, default=0.0)
    result["peak_fds"] = watch.peak_fds
    flood_lines = stderr.between(started, ended)
    stamps = [at for at, _ in list(stderr.lines) if started <= at < ended]
    result["log_lines"] = len(flood_lines)
    result["log_bytes"] = sum(len(line) + 1 for line in flood_lines)
    result["log_lines_peak_per_s"] = _per_second_peak(stamps)
    result["log_tracebacks"] = sum("Traceback" in line for line in flood_lines)
    result["log_events"] = dict(_events(flood_lines).most_common(8))
    result["flood_s"] = ended - started
    if worker.poll() is not None:
        return result
    # After the flood: nested JSON, and the renewals counted.
    nested = b"[" * 20_000 + b"]" * 20_000
    result["nested_json_status"] = _http(port, "/api/dlq/redrive", body=nested, timeout=10)
    result["healthz_after"] = _http(port, "/healthz")
    after = _scrape(port)
    renewals = "lease_worker_lease_renewals_total"
    result["renewals_during_flood"] = _metric(after, renewals) - _metric(before, renewals)
    result["leases_lost"] = _metric(after, "lease_worker_leases_lost_total")
    return result


def table(result: dict[str, Any]) -> list[str]:
    settings: Settings = result["settings"]
    rows = [
        ("leases renewing", f"{settings.leases}"),
        ("renewals during the flood", f"{result.get('renewals_during_flood', 0):,.0f}"),
        (
            "lapses (deadline passed / cancelled / received twice / leases_lost_total)",
            f"{result.get('deadline_passed')} / "
            f"{result.get('aborted')} / {result.get('received_twice')} / "
            f"{result.get('leases_lost', 'n/a')}",
        ),
        ("least time left on a lease (s)", f"{result.get('least_left_s', float('nan')):.2f}"),
        ("worker exit status", f"{result.get('exit_status')}"),
        ("worker open files, peak / limit", f"{result.get('peak_fds')} / {settings.nofile}"),
        (
            "connections kept open or opening (idle / half-sent)",
            f"{settings.connections:,} / {settings.half_sent:,} "
            f"for {settings.flood_s:.0f} s ({result.get('flood_s', 0):.0f} s with start and end)",
        ),
        (
            "ops connections the worker accepted (of them half-sent)",
            f"{result.get('ops_connections_accepted', 0):,} "
            f"({result.get('half_sent_accepted', 0):,})",
        ),
        ("longest it held an idle connection (s)", f"{result.get('longest_idle_s', 0):.1f}"),
        ("longest it held a half-sent request (s)", f"{result.get('longest_half_sent_s', 0):.1f}"),
        (
            "worker log lines during the flood (peak per s)",
            f"{result.get('log_lines', 0):,} ({result.get('log_lines_peak_per_s', 0)}/s, "
            f"{result.get('log_bytes', 0):,} B, {result.get('log_tracebacks', 0)} tracebacks)",
        ),
        ("nested JSON to /api/dlq/redrive", f"{result.get('nested_json_status')}"),
        ("/healthz during the flood (status: count)", f"{result.get('probes')}"),
        ("/healthz after", f"{result.get('healthz_after')}"),
    ]
    width = max(len(name) for name, _ in rows)
    lines = [f"{name:<{width}}  {value}" for name, value in rows]
    lines.append(f"idle clients: {result.get('idle_clients')}")
    lines.append(f"half-sent clients: {result.get('half_sent_clients')}")
    lines.append(f"log events: {result.get('log_events')}")
    return lines


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--child"]:
        _child(args[1], int(args[2]), int(args[3]), float(args[4]))
        return 0
    parser = argparse.ArgumentParser(prog="python -m bench.ops_flood", description=__doc__)
    defaults = Settings()
    parser.add_argument("--leases", type=int, default=defaults.leases)
    parser.add_argument("--connections", type=int, default=defaults.connections)
    parser.add_argument("--half-sent", type=int, default=defaults.half_sent)
    parser.add_argument("--processes", type=int, default=defaults.processes)
    parser.add_argument("--flood-s", type=float, default=defaults.flood_s)
    parser.add_argument("--nofile", type=int, default=defaults.nofile)
    parser.add_argument("--worker-root", type=Path, default=ROOT)
    parser.add_argument("--json", action="store_true", help="print the result as JSON too")
    parsed, extra = parser.parse_known_args(args)
    settings = Settings(
        leases=parsed.leases,
        connections=parsed.connections,
        half_sent=parsed.half_sent,
        processes=parsed.processes,
        flood_s=parsed.flood_s,
        nofile=parsed.nofile,
        worker_root=parsed.worker_root.resolve(),
        extra=extra,
    )
    result = run(settings)
    for line in table(result):
        print(line)
    if parsed.json:
        print(json.dumps({k: v for k, v in result.items() if k != "settings"}, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
