"""bench/lease_chaos.py `pause`: worker processes SIGSTOPped longer than their leases.

serve-sqs on 127.0.0.1; `workers` processes of bench/apps/chaos_app.py with
`LeaseConfig(visibility_s=visibility_s)` (margin and extension by the config's rules, or
the margin given) consume one queue whose DLQ policy allows `max_receive_count` receives.
`messages` messages go in (all at once, or evenly over `send_over_s`); each handler works
`min_work_s`..`max_work_s` (fixed per message id), then commits (a COMMIT line). `pauses`
times, spread over the run by progress (pause k once k/(pauses+1) of the messages are
committed), a random worker not already stopped is SIGSTOPped for `pause_s`, then
SIGCONTed. Once no pause is under way and the queue is empty (nothing visible or in flight:
every message deleted or dead-lettered), or after `timeout_s`, the workers get SIGTERM.

What is counted, and the goals:
- committed (at least once; goal: all of them), dead-lettered (goal: none);
- duplicates (messages committed more than once), each extra commit explained by a
  `lease.lost` line for the message from the worker whose commit came before it (logged
  after that run started, before that worker's next run of the message), or by a pause of
  that worker that began after that run started and before the next committed run began
  (goal: every duplicate explained);
- concurrent runs: two runs of one message in two processes whose executing intervals
  overlap in wall time (goal: none). A run executes from its START to its COMMIT or ABORT;
  a run frozen by a pause and aborted within `FENCE_S` of the SIGCONT (the stall fence
  cancelled it before it did anything more) executed only until the SIGSTOP. A run never
  finished counts until the end of the scenario.

Shown too: stale runs, started after a later delivery of the same message had started in
another run (the service had already handed the message out again: the run's lease had
lapsed before it began). The pauses are written to `<out>/pauses.txt` (pid, SIGSTOP and
SIGCONT wall times).
"""

from __future__ import annotations

import itertools
import math
import random
import signal
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from bench import _harness
from bench.chaos_fleet import Lost, Pause, Report, Run, SqsQueues, Workers, read_runs

__all__ = ["PauseSettings", "analyse", "run_pause"]

#: A run aborted this soon after its process was continued did nothing after the SIGSTOP.
FENCE_S = 1.0
QUEUE = "chaos-pause"


@dataclass(frozen=True, slots=True)
class PauseSettings:
    messages: int = 800
    workers: int = 3
    pauses: int = 12
    pause_s: float = 9.0
    visibility_s: int = 6
    renew_margin_s: float | None = None
    min_work_s: float = 1.0
    max_work_s: float = 4.0
    max_in_flight: int = 10
    max_receive_count: int = 10
    #: Send the messages evenly over this many seconds once the workers are started (0: all
    #: at once).
    send_over_s: float = 0.0
    seed: int = 27
    #: The workers' long poll (WorkerConfig.wait_s).
    wait_s: int = 20
    timeout_s: float = 600.0


@dataclass
class Analysis:
    runs: list[Run]
    committed: set[str]
    duplicates: dict[str, list[str]]  # message id -> the causes of its extra commits
    concurrent: list[tuple[Run, Run]]
    fenced: int  # runs frozen by a pause and aborted as their process woke
    stale: list[Run]  # runs started after a later delivery of their message had started

    @property
    def unexplained(self) -> dict[str, list[str]]:
        return {m: c for m, c in self.duplicates.items() if "unexplained" in c}


def executing(run: Run, pauses: list[Pause], until: float) -> tuple[float, float, bool]:
    """When `run` executed (wall times), and whether a pause froze it and the fence ended it."""
    end = run.ended if run.ended is not None else until
    if not run.committed:
        for pause in pauses:
            frozen = pause.pid == run.pid and run.started <= pause.stopped < end
            if frozen and pause.continued <= end <= pause.continued + FENCE_S:
                return run.started, pause.stopped, True
    return run.started, end, False


def _explain(
    first: Run, after: Run, found: list[Run], pauses: list[Pause], lost: list[Lost]
) -> str:
    """Why `after` ran (and committed) again after `first` committed: `first`'s lease was
    lost (a `lease.lost` line of its worker for this message, logged after `first` started
    and before that worker's next run of it), or `first`'s worker was paused after `first`
    started and before `after` started."""
    later = (r.started for r in found if r.pid == first.pid and r.started > first.started)
    until = min(later, default=math.inf)
    causes = []
    if any(
        lease.pid == first.pid
        and lease.message_id == first.message_id
        and first.started <= lease.at < until
        for lease in lost
    ):
        causes.append("lease.lost")
    if any(p.pid == first.pid and first.started <= p.stopped < after.started for p in pauses):
        causes.append("pause")
    return "+".join(causes) or "unexplained"


def stale(found: list[Run]) -> list[Run]:
    """Runs that started after a later delivery of their message had started elsewhere: run
    on a receive the service had already superseded (its lease lapsed before it began)."""
    return [
        run
        for run in found
        if any(o.receive_count > run.receive_count and o.started < run.started for o in found)
    ]


def analyse(runs: list[Run], pauses: list[Pause], lost: list[Lost], until: float) -> Analysis:
    by_message: dict[str, list[Run]] = {}
    for run in runs:
        by_message.setdefault(run.message_id, []).append(run)
    duplicates: dict[str, list[str]] = {}
    concurrent: list[tuple[Run, Run]] = []
    superseded: list[Run] = []
    fenced = 0
    for message_id, found in by_message.items():
        found.sort(key=lambda run: run.started)
        spans = [executing(run, pauses, until) for run in found]
        fenced += sum(span[2] for span in spans)
        superseded += stale(found)
        for i, (a, (a0, a1, _)) in enumerate(zip(found, spans, strict=True)):
            for b, (b0, b1, _) in zip(found[i + 1 :], spans[i + 1 :], strict=True):
                if a.pid != b.pid and a0 < b1 and b0 < a1:
                    concurrent.append((a, b))
        commits = [run for run in found if run.committed]
        if len(commits) > 1:
            duplicates[message_id] = [
                _explain(first, after, found, pauses, lost)
                for first, after in itertools.pairwise(commits)
            ]
    committed = {run.message_id for run in runs if run.committed}
    return Analysis(runs, committed, duplicates, concurrent, fenced, superseded)


class _Pauser:
    """The pauses, each due once enough messages are committed."""

    def __init__(self, workers: Workers, settings: PauseSettings) -> None:
        self.workers = workers
        self.settings = settings
        self.rng = random.Random(settings.seed)
        self.made = 0
        self.active: dict[int, tuple[float, float]] = {}  # pid -> (stopped wall, resume at)
        self.caught: list[int] = []  # runs in flight in the worker at each SIGSTOP

    def tick(self, committed: int, runs: list[Run]) -> None:
        now = time.monotonic()
        for pid, (stopped, resume_at) in list(self.active.items()):
            if now >= resume_at:
                self.workers.resume(pid, stopped)
                del self.active[pid]
        s = self.settings
        due = committed >= (self.made + 1) * s.messages / (s.pauses + 1)
        idle = [pid for pid in self.workers.pids if pid not in self.active]
        if self.made < s.pauses and due and idle:
            pid = self.rng.choice(idle)
            self.caught.append(sum(r.pid == pid and r.ended is None for r in runs))
            self.active[pid] = (self.workers.stop(pid), now + s.pause_s)
            self.made += 1

    def finish(self) -> None:
        for pid, (stopped, _) in list(self.active.items()):
            self.workers.resume(pid, stopped)
        self.active.clear()

    def caught_runs(self) -> str:
        caught = self.caught
        busy = sum(c > 0 for c in caught)
        return f"{busy} of {len(caught)} caught runs in flight, {sum(caught)} runs in all"


class _Producer:
    """Sends the messages: all at once, or evenly over `send_over_s` (then the workers' long
    polls wait at the service, and take each message as it comes: a stopped worker's too)."""

    def __init__(self, queues: SqsQueues, settings: PauseSettings) -> None:
        self.queues = queues
        self.settings = settings
        self.ids: list[str] = []
        self.began: float | None = None

    @property
    def done(self) -> bool:
        return len(self.ids) == self.settings.messages

    def tick(self) -> None:
        now = time.monotonic()
        self.began = now if self.began is None else self.began
        count, over_s = self.settings.messages, self.settings.send_over_s
        due = count if over_s <= 0 else min(count, 1 + int(count * (now - self.began) / over_s))
        while len(self.ids) < due:
            self.ids += self.queues.send(min(10, due - len(self.ids)))


def _drive(pauser: _Pauser, producer: _Producer) -> str | None:
    """Send, and pause workers, until everything is sent and the queue is empty; None, or
    why it stopped early."""
    workers, s = pauser.workers, pauser.settings
    deadline = time.monotonic() + s.timeout_s
    try:
        while time.monotonic() < deadline:
            producer.tick()
            runs = read_runs(workers.out)
            committed = {run.message_id for run in runs if run.committed} & set(producer.ids)
            pauser.tick(len(committed), runs)
            if workers.exited():
                return f"a worker exited: {workers.exited()}"
            # Every message committed or dead-lettered (a COMMIT comes before the delete).
            if producer.done and not pauser.active and producer.queues.left() == (0, 0):
                return None
            time.sleep(0.1)
        return f"not drained within {s.timeout_s:.0f} s (queue {producer.queues.left()})"
    finally:
        pauser.finish()


def run_pause(s: PauseSettings, out: Path | None = None) -> Report:
    out = out or Path(tempfile.mkdtemp(prefix="lease-chaos-pause-"))
    margin = "" if s.renew_margin_s is None else f", margin {s.renew_margin_s} s"
    report = Report("pause")
    report.lines.append(
        f"  {s.messages} messages, {s.workers} workers, {s.pauses} pauses of {s.pause_s} s, "
        f"leases {s.visibility_s} s{margin}, work {s.min_work_s}-{s.max_work_s} s, "
        f"max_in_flight {s.max_in_flight}, sent over {s.send_over_s} s, seed {s.seed}; "
        f"files in {out}"
    )
    began = time.monotonic()
    with _harness.server() as server:
        queues = SqsQueues(server.sqs, QUEUE, s.max_receive_count)
        producer = _Producer(queues, s)
        env = {
            **_harness.CREDENTIALS,
            "CHAOS_QUEUE": QUEUE,
            "CHAOS_VISIBILITY_S": str(s.visibility_s),
            "CHAOS_RENEW_MARGIN_S": "" if s.renew_margin_s is None else str(s.renew_margin_s),
            "CHAOS_MIN_WORK_S": str(s.min_work_s),
            "CHAOS_MAX_WORK_S": str(s.max_work_s),
            "CHAOS_MAX_IN_FLIGHT": str(s.max_in_flight),
            "CHAOS_WAIT_S": str(s.wait_s),
        }
        workers = Workers(out, "sqs", server.url, env)
        try:
            for _ in range(s.workers):
                workers.start()
            pauser = _Pauser(workers, s)
            stopped_early = _drive(pauser, producer)
            ids = producer.ids
            took = time.monotonic() - began
            workers.signal_all(signal.SIGTERM)
            codes = workers.wait_all(60)
            left, dead = queues.left(), queues.dead()
        finally:
            workers.kill_all()
    lost = workers.lost()
    analysis = analyse(read_runs(out), workers.pauses, lost, time.time())
    (out / "pauses.txt").write_text(
        "".join(f"{p.pid} {p.stopped:.3f} {p.continued:.3f}\n" for p in workers.pauses)
    )
    _report(report, analysis, lost, (ids, left, dead, codes, took))
    report.lines.append(f"  pauses: {len(workers.pauses)} made, {pauser.caught_runs()}")
    if stopped_early:
        report.lines.append(f"  stopped early: {stopped_early}")
    stale = {id(run) for run in analysis.stale}
    report.counts = {
        "stale runs": len(analysis.stale),
        "concurrent runs": len(analysis.concurrent),
        "concurrent runs with a stale run": sum(
            id(a) in stale or id(b) in stale for a, b in analysis.concurrent
        ),
        "unexplained duplicates": len(analysis.unexplained),
        "unexplained duplicates with a stale run": sum(
            any(id(r) in stale for r in analysis.runs if r.message_id == message_id)
            for message_id in analysis.unexplained
        ),
    }
    report.goals["no concurrent runs"] = not analysis.concurrent
    report.goals["every duplicate explained"] = not analysis.unexplained
    report.goals["nothing lost (every message committed)"] = analysis.committed >= set(ids)
    report.goals["DLQ empty"] = dead == 0
    report.goals["every pause made"] = len(workers.pauses) == s.pauses
    return report


def _report(
    report: Report,
    analysis: Analysis,
    lost: list[Lost],
    end: tuple[list[str], tuple[int, int], int, dict[int, int | None], float],
) -> None:
    ids, left, dead, codes, took = end
    runs = analysis.runs
    causes = Counter(cause for found in analysis.duplicates.values() for cause in found)
    reasons = Counter(lease.reason for lease in lost)
    aborted = Counter(run.aborted for run in runs if run.ended is not None and not run.committed)
    unfinished = sum(run.ended is None for run in runs)
    redelivered = sum(1 for c in Counter(r.message_id for r in runs).values() if c > 1)
    stale_commits = sum(run.committed for run in analysis.stale)
    report.lines += [
        f"  committed {len(analysis.committed & set(ids))}/{len(ids)}; duplicates "
        f"{len(analysis.duplicates)} (extra commits by cause: {dict(causes)}); "
        f"concurrent runs {len(analysis.concurrent)}",
        f"  runs {len(runs)} (aborted {dict(aborted)}, unfinished {unfinished}, frozen by a "
        f"pause and fenced on waking {analysis.fenced}); messages run more than once "
        f"{redelivered}; lease.lost {len(lost)} {dict(reasons)}",
        f"  stale runs (started after a later delivery of the message had started elsewhere) "
        f"{len(analysis.stale)}, of which committed {stale_commits}",
        f"  at the end: queue (visible, in flight) {left}, DLQ {dead}; worker exit codes "
        f"{sorted(codes.values(), key=str)}; drained in {took:.1f} s",
    ]

    def why(run: Run) -> str:
        found = [
            f"{x.reason} at {x.at:.3f}"
            for x in lost
            if (x.pid, x.message_id) == (run.pid, run.message_id)
        ]
        return f"pid {run.pid} lease.lost: {', '.join(found) or 'none'}"

    for a, b in analysis.concurrent[:10]:
        report.lines.append(
            f"    concurrent {a.message_id}: {a.show()} / {b.show()} ({why(a)}; {why(b)})"
        )
    for run in analysis.stale[:10]:
        report.lines.append(f"    stale {run.message_id}: {run.show()} ({why(run)})")
    for message_id in list(analysis.unexplained)[:10]:
        shown = "; ".join(r.show() for r in analysis.runs if r.message_id == message_id)
        report.lines.append(f"    unexplained duplicate {message_id}: {shown}")
