"""What `--max-bytes-in-flight` bounds: a worker's memory, not only the bodies it counts.

    python -m bench.flow_bytes [--messages 100 --body-kib 1024 --cap-mib 16 --work-s 1]

Each run: a fresh `lease-worker serve-sqs`, one empty queue, one worker process
(`lease-worker run bench.apps.flow_app:app --max-in-flight 100`, each handler holding its
message `--work-s`, the body decoded as JSON as a handler's is by default). Once the worker
is ready its resident memory is read for a second (the idle line), then `--messages` bodies of
`--body-kib` KiB (JSON text, one SendMessage each) are sent while it drains them. Its RSS
(/proc/PID/status: VmRSS every 10 ms, and VmHWM, the kernel's own high-water mark) and the
queue's messages in flight (what the worker holds, read from the server every 50 ms) are
followed until every message is handled. With `--max-bytes-in-flight CAP`, then without.

Goal (the capped run): peak RSS over idle <= 1.5 x CAP + ALLOWANCE, the allowance the docs
state (docs/how-to/flow-control.md, "Bytes in flight"): 4 x the largest body (the one message
the count may go past the cap by, while its receive is read) + 4 MiB (the allocator's and
the runtime's slack): 8 MiB for 1 MiB bodies. Exits 1 when missed.
"""

from __future__ import annotations

import argparse
import base64
import random
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from bench import _flow, _harness

QUEUE = "flow-bytes"
MIB = 1024 * 1024
#: What the docs allow beyond 1.5 x the cap, whatever the cap: the slack, and per MiB of the
#: largest body (see the module's docstring).
SLACK_MIB = 4
PER_BODY_MIB = 4


def allowance_mib(body_kib: float) -> float:
    return PER_BODY_MIB * body_kib / 1024 + SLACK_MIB


@dataclass
class Run:
    cap_mib: float | None
    idle_kib: int = 0
    samples: list[tuple[float, int]] = field(default_factory=list)  # (time, VmRSS KiB)
    held: list[tuple[float, int]] = field(default_factory=list)  # (time, in flight)
    hwm_kib: int = 0  # VmHWM at the end
    hwm_idle_kib: int = 0  # VmHWM once idle
    handled: int = 0
    seconds: float = 0.0
    cpu_s: float = 0.0  # the worker's, from the first send to the last message handled

    @property
    def peak_kib(self) -> int:
        """The highest RSS seen during the run: sampled, or the kernel's high-water mark if
        it rose after the idle line (a peak between two samples)."""
        sampled = max((rss for _, rss in self.samples), default=self.idle_kib)
        return max(sampled, self.hwm_kib) if self.hwm_kib > self.hwm_idle_kib else sampled

    @property
    def over_idle_mib(self) -> float:
        return (self.peak_kib - self.idle_kib) / 1024

    @property
    def held_at_peak(self) -> int:
        """Messages in flight at the sampled peak (the nearest reading of the queue)."""
        if not self.samples or not self.held:
            return 0
        at = max(self.samples, key=lambda sample: sample[1])[0]
        return min(self.held, key=lambda reading: abs(reading[0] - at))[1]

    @property
    def most_held(self) -> int:
        return max((count for _, count in self.held), default=0)


def _status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of `pid`, in KiB."""
    found = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            name, _, value = line.partition(":")
            if name in ("VmRSS", "VmHWM"):
                found[name] = int(value.split()[0])
    return found


def _follow(pid: int, run: Run, stop: threading.Event) -> None:
    while not stop.wait(0.01):
        try:
            run.samples.append((time.monotonic(), _status(pid)["VmRSS"]))
        except OSError:
            return


def _in_flight(port: int, url: str, run: Run, stop: threading.Event) -> None:
    sqs = _harness.Sqs(port)
    try:
        while not stop.wait(0.05):
            try:
                run.held.append((time.monotonic(), sqs.left(url)[1]))
            except (OSError, RuntimeError):
                continue
    finally:
        sqs.close()


def bodies(count: int, size: int, seed: int = 7) -> list[str]:
    """`count` JSON bodies of `size` bytes each: `{"n": i, "pad": "<base64 text>"}`."""
    text = base64.b64encode(random.Random(seed).randbytes(size)).decode()
    made = []
    for index in range(count):
        head = f'{{"n": {index}, "pad": "'
        pad = size - len(head) - 2
        start = index % 64
        made.append(f'{head}{text[start : start + pad]}"}}')
    return made


def one(cap_mib: float | None, args: argparse.Namespace) -> Run:
    run = Run(cap_mib)
    options = ["--max-in-flight", str(args.max_in_flight)]
    if cap_mib is not None:
        options += ["--max-bytes-in-flight", str(int(cap_mib * MIB))]
    sent = bodies(args.messages, args.body_kib * 1024)
    with _harness.server() as server:
        url = _flow.create_queue(server, QUEUE)
        with _worker(server, options, args.work_s) as (pid, out):
            outs = [out]
            idle = []
            end = time.monotonic() + args.idle_s
            while time.monotonic() < end:
                idle.append(_status(pid)["VmRSS"])
                time.sleep(0.05)
            run.idle_kib = int(statistics.median(idle))
            run.hwm_idle_kib = _status(pid)["VmHWM"]
            stop = threading.Event()
            threads = [
                threading.Thread(target=_follow, args=(pid, run, stop), daemon=True),
                threading.Thread(
                    target=_in_flight, args=(server.port, url, run, stop), daemon=True
                ),
            ]
            for thread in threads:
                thread.start()
            began, cpu_began = time.monotonic(), _harness.cpu_s(pid)
            try:
                for body in sent:
                    server.sqs.call("SendMessage", QueueUrl=url, MessageBody=body)
                del sent
                rows = _flow.wait_for(outs, args.messages, args.timeout_s)
            finally:
                stop.set()
                for thread in threads:
                    thread.join(2)
            run.seconds = time.monotonic() - began
            run.cpu_s = _harness.cpu_s(pid) - cpu_began
            run.handled = sum(row.ok for row in rows)
            run.hwm_kib = _status(pid)["VmHWM"]
    return run


@contextmanager
def _worker(
    server: _harness.Server, options: list[str], work_s: float
) -> Iterator[tuple[int, Path]]:
    """One worker process on the queue, ready; yields its pid and its output file."""
    out = Path(tempfile.mkdtemp(prefix="flow-bytes-")) / "worker.log"
    command = [sys.executable, "-m", "worker", "run", _flow.APP, "--backend", "sqs"]
    command += ["--endpoint-url", server.url, "--region", "us-east-1", "--log-level", "warning"]
    env = {"FLOW_QUEUE": QUEUE, "FLOW_OUT": str(out), "FLOW_WORK_S": str(work_s)}
    with _harness.started([*command, *options], env=env) as process:
        deadline = time.monotonic() + 60
        while not process.ready.wait(0.1):
            if process.exited() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the worker did not start: {process.stderr_tail()}")
        yield process.pid, out


def goal_mib(cap_mib: float, allowance: float) -> float:
    return 1.5 * cap_mib + allowance


def table(args: argparse.Namespace, capped: Run, uncapped: Run | None) -> tuple[list[str], bool]:
    """The report's lines, and whether the goal was met."""
    cap = capped.cap_mib
    assert cap is not None
    allowance = allowance_mib(args.body_kib)
    goal = goal_mib(cap, allowance)
    lines = [
        f"{args.messages} bodies of {args.body_kib} KiB (JSON), each held {args.work_s:g} s, "
        f"max_in_flight {args.max_in_flight}; one worker process\n",
        "| run | idle RSS, MiB | peak RSS over idle, MiB | ÷ cap | held at peak | most held | "
        "over idle per body held (most), MiB | handled | s | worker CPU, s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, run in ((f"cap {cap:g} MiB", capped), ("no cap", uncapped)):
        if run is None:
            continue
        per_cap = f"{run.over_idle_mib / cap:.2f}"
        per_body = f"{run.over_idle_mib / run.most_held:.1f}" if run.most_held else "-"
        lines.append(
            f"| {name} | {run.idle_kib / 1024:.1f} | {run.over_idle_mib:.1f} | {per_cap} | "
            f"{run.held_at_peak} | {run.most_held} | {per_body} | {run.handled} | "
            f"{run.seconds:.1f} | {run.cpu_s:.2f} |"
        )
    met = capped.over_idle_mib <= goal and capped.handled >= args.messages
    lines.append(
        f"\ngoal: peak RSS over idle <= 1.5 x {cap:g} + {allowance:g} = {goal:g} MiB "
        f"(capped run: {capped.over_idle_mib:.1f}) {'met' if met else 'MISSED'}"
    )
    return lines, met


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.flow_bytes", description=__doc__)
    parser.add_argument("--messages", type=int, default=100)
    parser.add_argument("--body-kib", type=int, default=1024)
    parser.add_argument("--cap-mib", type=float, default=16)
    parser.add_argument("--work-s", type=float, default=1.0)
    parser.add_argument("--max-in-flight", type=int, default=100)
    parser.add_argument("--idle-s", type=float, default=1.0)
    parser.add_argument("--timeout-s", type=float, default=120)
    parser.add_argument("--no-uncapped", action="store_true", help="skip the run without a cap")
    args = parser.parse_args(argv)
    capped = one(args.cap_mib, args)
    uncapped = None if args.no_uncapped else one(None, args)
    lines, met = table(args, capped, uncapped)
    print("\n".join(lines))
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
