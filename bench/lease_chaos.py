"""Chaos and late answers against real processes (issue 27, "Must show" items 2-4).

    python -m bench.lease_chaos pause        [--messages 800 --pauses 12 --pause-s 9 ...]
    python -m bench.lease_chaos smq-late     [--visibility-s 10 --work-s 25 --hold-s 3]
    python -m bench.lease_chaos sqs-late     [--messages 20 --hold-s 1.5 ...]
    python -m bench.lease_chaos sigterm-poll [--messages 5 --hold-s 2]

Every scenario runs `lease-worker serve-sqs` or `serve-smq` on 127.0.0.1 and `lease-worker
run bench.apps.chaos_app:app` processes (bench/chaos_fleet.py), prints a short report of
counts and its goals, and exits 1 when a goal is missed. Workers log JSON lines to
`<out>/worker-<pid>.log`; handlers write their runs to `<out>/runs-<pid>.txt` (`--out DIR`,
default a new temporary directory, named in the report).

- `pause` (bench/chaos_pause.py): workers SIGSTOPped longer than their leases; goals: no
  concurrent runs, every duplicate explained (lease.lost or a pause), nothing lost, DLQ empty.
- `smq-late`: serve-smq behind bench/http_delay.py, which holds the answer of the first
  ChangeMessageVisibility `--hold-s` (the call lands at once; its answer, with the new
  receipt handle, is late). One message, one worker; goals: one run, deleted, no lease.lost.
- `sqs-late`: serve-sqs behind the proxy holding every ChangeMessageVisibility(Batch) answer
  `--hold-s`; leases of 6 s renewed 2 s before their deadline; handlers of 20-30 s; DLQ after
  2 receives. Goals: nothing dead-lettered, each message run once and committed.
- `sigterm-poll`: serve-sqs behind the proxy holding every ReceiveMessage answer `--hold-s`.
  Once the worker's long poll waits, messages are sent; the poll's answer (carrying them) is
  held, and the worker gets SIGTERM meanwhile. Goal: within 2 s of the worker's exit nothing
  is in flight (every message the answer carried is deleted or visible again).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from bench import _harness
from bench.chaos_fleet import (
    SMQ_KEY,
    Report,
    SqsQueues,
    Workers,
    read_runs,
    smq_counts,
    smq_send,
    wait_until,
)
from bench.chaos_pause import PauseSettings, run_pause
from bench.http_delay import Exchange, Hold, HttpDelayProxy, running
from bench.smq_renewals import serve_smq

__all__ = ["LateSettings", "PollSettings", "main", "run_sigterm_poll", "run_smq_late"]
__all__ += ["run_sqs_late"]

_CHANGE = frozenset({"ChangeMessageVisibility", "ChangeMessageVisibilityBatch"})


@dataclass(frozen=True, slots=True)
class LateSettings:
    """smq-late and sqs-late."""

    messages: int
    visibility_s: int
    renew_margin_s: float | None
    min_work_s: float
    max_work_s: float
    hold_s: float
    #: Hold only the first this many extension answers (None: every one).
    hold_times: int | None
    max_receive_count: int = 2
    #: The worker's long poll (WorkerConfig.wait_s).
    wait_s: int = 20
    timeout_s: float = 300.0


SMQ_LATE = LateSettings(1, 10, None, 25.0, 25.0, 3.0, 1)
SQS_LATE = LateSettings(20, 6, 2.0, 20.0, 30.0, 1.5, None)


@dataclass(frozen=True, slots=True)
class PollSettings:
    """sigterm-poll."""

    messages: int = 5
    hold_s: float = 2.0
    visibility_s: int = 30
    work_s: float = 0.5
    #: After the worker's exit, how long the messages may stay in flight.
    settled_within_s: float = 2.0
    timeout_s: float = 120.0


def _out(out: Path | None, name: str) -> Path:
    return out or Path(tempfile.mkdtemp(prefix=f"lease-chaos-{name}-"))


def _lease_env(s: LateSettings, queue: str) -> dict[str, str]:
    margin = "" if s.renew_margin_s is None else str(s.renew_margin_s)
    return {
        "CHAOS_QUEUE": queue,
        "CHAOS_VISIBILITY_S": str(s.visibility_s),
        "CHAOS_RENEW_MARGIN_S": margin,
        "CHAOS_MIN_WORK_S": str(s.min_work_s),
        "CHAOS_MAX_WORK_S": str(s.max_work_s),
        "CHAOS_MAX_IN_FLIGHT": str(max(10, s.messages)),
        "CHAOS_WAIT_S": str(s.wait_s),
    }


def _extensions(exchanges: list[Exchange]) -> str:
    found = [e for e in exchanges if e.operation in _CHANGE]
    held = [e for e in found if e.held_s > 0]
    statuses = Counter(e.status for e in found)
    return f"extension calls {len(found)} (held {len(held)}, statuses {dict(statuses)})"


def _stop(workers: Workers, timeout_s: float = 60.0) -> dict[int, int | None]:
    workers.signal_all(signal.SIGTERM)
    return workers.wait_all(timeout_s)


def _late_goals(
    report: Report, workers: Workers, ids: list[str], drained: bool, dead: int | None
) -> None:
    runs = [run for run in read_runs(workers.out) if run.message_id in set(ids)]
    starts = Counter(run.message_id for run in runs)
    commits = Counter(run.message_id for run in runs if run.committed)
    lost = workers.events("lease.lost")
    once = [m for m in ids if starts[m] == 1 and commits[m] == 1]
    report.lines.append(
        f"  runs {len(runs)}, committed {len(commits)}/{len(ids)}, run exactly once and "
        f"committed {len(once)}/{len(ids)}, lease.lost {len(lost)}"
        + ("" if dead is None else f", dead-lettered {dead}")
    )
    for _, event in lost[:5]:
        report.lines.append(f"    {json.dumps(event)}")
    report.goals["each message run once and committed"] = len(once) == len(ids)
    report.goals["queue empty at the end (nothing visible or in flight)"] = drained
    report.goals["no lease.lost"] = not lost
    if dead is not None:
        report.goals["nothing dead-lettered"] = dead == 0


def run_smq_late(s: LateSettings = SMQ_LATE, out: Path | None = None) -> Report:
    out, queue = _out(out, "smq-late"), "chaos-smq-late"
    report = Report("smq-late")
    report.lines.append(
        f"  {s.messages} message(s), leases {s.visibility_s} s, work {s.min_work_s}-"
        f"{s.max_work_s} s, the first {s.hold_times} ChangeMessageVisibility answer(s) held "
        f"{s.hold_s} s; files in {out}"
    )
    with serve_smq([queue]) as url:
        host, port = url.removeprefix("http://").split(":")
        proxy = HttpDelayProxy((host, int(port)), [Hold(_CHANGE, s.hold_s, s.hold_times)])
        with running(proxy) as proxy_url:
            ids = smq_send(url, queue, s.messages)
            workers = Workers(out, "smq", proxy_url, {**SMQ_KEY, **_lease_env(s, queue)})
            try:
                workers.start()
                drained = _drain(workers, lambda: smq_counts(url, queue), s.timeout_s)
                codes = _stop(workers)
            finally:
                workers.kill_all()
            report.lines.append(f"  {_extensions(proxy.exchanges)}; worker exit {codes}")
    _late_goals(report, workers, ids, drained, None)
    report.goals["an extension answer was held"] = any(
        e.operation in _CHANGE and e.held_s > 0 for e in proxy.exchanges
    )
    return report


def _drain(workers: Workers, left: Callable[[], tuple[int, int]], timeout_s: float) -> bool:
    """Wait until the queue is empty, nothing visible or in flight (every message deleted or
    dead-lettered: a handler writes its COMMIT before its message is deleted); False if it
    is not within `timeout_s`, or a worker exits."""

    def drained() -> bool:
        return bool(workers.exited()) or left() == (0, 0)

    return wait_until(drained, timeout_s, poll_s=0.2) and not workers.exited()


def run_sqs_late(s: LateSettings = SQS_LATE, out: Path | None = None) -> Report:
    out, queue = _out(out, "sqs-late"), "chaos-sqs-late"
    report = Report("sqs-late")
    every = "every" if s.hold_times is None else f"the first {s.hold_times}"
    report.lines.append(
        f"  {s.messages} messages, leases {s.visibility_s} s, margin {s.renew_margin_s} s, "
        f"work {s.min_work_s}-{s.max_work_s} s, {every} ChangeMessageVisibility(Batch) "
        f"answer held {s.hold_s} s, maxReceiveCount {s.max_receive_count}; files in {out}"
    )
    with _harness.server() as server:
        queues = SqsQueues(server.sqs, queue, s.max_receive_count)
        proxy = HttpDelayProxy(("127.0.0.1", server.port), [Hold(_CHANGE, s.hold_s, s.hold_times)])
        with running(proxy) as proxy_url:
            ids = queues.send(s.messages)
            env = {**_harness.CREDENTIALS, **_lease_env(s, queue)}
            workers = Workers(out, "sqs", proxy_url, env)
            try:
                workers.start()
                drained = _drain(workers, queues.left, s.timeout_s)
                codes = _stop(workers)
            finally:
                workers.kill_all()
            dead = queues.dead()
            report.lines.append(f"  {_extensions(proxy.exchanges)}; worker exit {codes}")
    _late_goals(report, workers, ids, drained, dead)
    return report


def run_sigterm_poll(s: PollSettings = PollSettings(), out: Path | None = None) -> Report:
    out, queue = _out(out, "sigterm-poll"), "chaos-sigterm-poll"
    report = Report("sigterm-poll")
    report.lines.append(
        f"  {s.messages} messages sent while the worker's long poll waits; every "
        f"ReceiveMessage answer held {s.hold_s} s; SIGTERM while the answer carrying them is "
        f"held; leases {s.visibility_s} s; files in {out}"
    )
    with _harness.server() as server:
        queues = SqsQueues(server.sqs, queue, 10)
        proxy = HttpDelayProxy(
            ("127.0.0.1", server.port), [Hold(frozenset({"ReceiveMessage"}), s.hold_s)]
        )
        with running(proxy) as proxy_url:
            lease = LateSettings(s.messages, s.visibility_s, None, s.work_s, s.work_s, 0, None)
            env = {**_harness.CREDENTIALS, **_lease_env(lease, queue)}
            workers = Workers(out, "sqs", proxy_url, env)
            try:
                workers.start()
                found = _poll_then_term(workers, queues, proxy, s)
            finally:
                workers.kill_all()
    ids, held, exit_code, exited_s, counts = found
    committed = {run.message_id for run in read_runs(out) if run.committed} & set(ids)
    settled_at = next((t for t, (_, in_flight) in counts if in_flight == 0), None)
    first, last = (counts[0][1], counts[-1][1]) if counts else (None, None)
    report.lines += [
        f"  the held answer carried {len(ids)} message(s); held answer delivered to the worker: "
        f"{held.delivered_at is not None if held else None} (client gone: "
        f"{held.client_gone if held else None})",
        f"  worker exit {exit_code} {exited_s:.2f} s after SIGTERM; committed of those carried "
        f"{len(committed)}; queue (visible, in flight) at exit {first}, {s.settled_within_s} s "
        f"later {last}; in flight 0 at "
        + ("never" if settled_at is None else f"+{settled_at:.2f} s after exit"),
        f"  shutdown lines: {_shutdown_events(workers)}",
    ]
    report.counts = {
        "carried": len(ids),
        "held answer delivered": int(held is not None and held.delivered_at is not None),
        "in flight at the end": -1 if last is None else last[1],
    }
    report.goals["the poll's answer carried messages and was held at SIGTERM"] = bool(ids)
    report.goals["worker exited 0"] = exit_code == 0
    report.goals[f"nothing in flight within {s.settled_within_s} s of the exit"] = (
        settled_at is not None
    )
    return report


def _shutdown_events(workers: Workers) -> str:
    shown = []
    for pid in workers.pids:
        for event in workers.logged(pid):
            name = str(event.get("event", ""))
            if name.startswith(("shutdown", "signal", "receive", "lease.", "release")):
                extra = {k: v for k, v in event.items() if k not in ("event", "level", "timestamp")}
                shown.append(f"{name} {extra}" if extra else name)
    return "; ".join(shown) or "none"


_PollResult = tuple[list[str], Exchange | None, int | None, float, list[tuple[float, Any]]]


def _poll_then_term(
    workers: Workers, queues: SqsQueues, proxy: HttpDelayProxy, s: PollSettings
) -> _PollResult:
    """Wait for a long poll in the proxy, send, wait for its answer to be held, SIGTERM;
    then read the queue until `settled_within_s` after the exit."""

    def waiting_poll() -> bool:
        now = time.monotonic()
        return any(
            e.operation == "ReceiveMessage" and e.answered_at is None and now - e.forwarded_at > 1
            for e in proxy.exchanges
        )

    def held() -> Exchange | None:
        return next(
            (
                e
                for e in proxy.exchanges
                if e.operation == "ReceiveMessage" and e.answered_at and e.carried()
            ),
            None,
        )

    if not wait_until(waiting_poll, 30):
        return [], None, None, 0.0, []
    queues.send(s.messages)
    if not wait_until(lambda: held() is not None, 10, poll_s=0.01):
        return [], None, None, 0.0, []
    time.sleep(min(0.3, s.hold_s / 4))  # well inside the hold
    sent = time.monotonic()
    workers.signal_all(signal.SIGTERM)
    process = workers.processes[0]
    wait_until(lambda: process.poll() is not None, s.timeout_s, poll_s=0.01)
    exited = time.monotonic()
    counts: list[tuple[float, Any]] = []
    while True:
        now = time.monotonic() - exited
        counts.append((now, queues.left()))
        if counts[-1][1][1] == 0 or now > s.settled_within_s:
            break
        time.sleep(0.05)
    exchange = held()
    return exchange.carried() if exchange else [], exchange, process.poll(), exited - sent, counts


# -- the command line -------------------------------------------------------------------------


def _options(parser: argparse.ArgumentParser, defaults: Any) -> None:
    for f in fields(defaults):
        # The annotations are strings here (`from __future__ import annotations`).
        kind = int if str(f.type).startswith("int") else float
        help = "(default: none)" if f.default is None else "(default: %(default)s)"
        option = f"--{f.name.replace('_', '-')}"
        parser.add_argument(option, type=kind, default=getattr(defaults, f.name), help=help)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.lease_chaos", description=__doc__)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    scenarios = parser.add_subparsers(dest="scenario", required=True)
    runners: dict[str, tuple[Any, Callable[..., Report]]] = {
        "pause": (PauseSettings(), run_pause),
        "smq-late": (SMQ_LATE, run_smq_late),
        "sqs-late": (SQS_LATE, run_sqs_late),
        "sigterm-poll": (PollSettings(), run_sigterm_poll),
    }
    for name, (defaults, _) in runners.items():
        sub = scenarios.add_parser(name)
        _options(sub, defaults)
        sub.add_argument("--out", type=Path, default=None, help="files go here (default: tmp)")
    args = vars(parser.parse_args(argv))
    defaults, run = runners[args.pop("scenario")]
    out = args.pop("out")
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    report = run(type(defaults)(**args), out)
    print(report.show(), flush=True)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
