"""Receive answers held on the way, against real processes: does a lease stay safe when the
answer that carried its message comes late?

    python -m bench.late_receives [--scenario a b c] [--tree new=. --tree old=../wt-old]
        [--sqs-client lean botocore] [--messages 5] [--hold-s S] [--work-s S] [--alone]
        [--out DIR]

Each scenario runs `lease-worker serve-sqs` on 127.0.0.1 (this checkout's), a queue with the
scenario's visibility and a DLQ (maxReceiveCount 5), and sends its messages. Then two
`lease-worker run` processes of bench/apps/late_app.py take them:
- `held`, through bench/http_delay.py's proxy, which forwards every call at once and holds
  the answer of every ReceiveMessage `hold_s` (nothing else is held);
- `direct`, started once `held`'s first receive has taken the messages, polling the same
  queue straight from serve-sqs: the consumer that gets a message whose lease lapsed
  (`--alone`: none, to see what the held worker does with the messages by itself).
Each handler works `work_s`, asks `message.lease.ensure_held()`, and appends its side effect
to one shared file (bench/late_ledger.py reads it back). A scenario ends once the queue is
empty, no held answer carrying messages is still on its way and no handler runs; then both
workers get SIGTERM, and what is left in the queue and in the DLQ is read.

Both workers run the runtime of one checkout (`--tree LABEL=PATH`: its folder is their
working directory and first on `PYTHONPATH`; serve-sqs and this bench always run from this
checkout), so an older commit runs the same scenario against the same service.

Scenarios (leases and long polls are the `WorkerConfig` defaults, but for `--visibility-s`):
- `a`: every receive answer held 8 s, on 6 s leases (handlers of 2.5 s);
- `b`: held 3 s, on 6 s leases (handlers of 2.5 s);
- `c`: the defaults (30 s leases, no `--visibility-s`), answers held 15 s, handlers of 16 s.
In `b` a run of the code before the fix (3 s late, 2.5 s of work) ends before the service's
visibility does, so it shows nothing; `--work-s 4` makes the run outlast it.

Measured (bench/late_ledger.py has the rules): overlaps (two runs of one message at once),
side effects made after the lease had lapsed at the service (`ensure_held()` passed, yet the
service had handed the message out again), messages lost (handled by no run, and neither in
the queue nor in the DLQ at the end), runs per worker, messages handled, dead-lettered.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from bench import _harness
from bench.chaos_fleet import ROOT, SqsQueues, Workers, wait_until
from bench.http_delay import Exchange, Hold, HttpDelayProxy, running
from bench.late_ledger import Receive, Run, Tally, after_lapse, overlaps, read_runs, tally

__all__ = ["SCENARIOS", "Result", "Scenario", "Setup", "main", "run", "table"]

APPS = Path(__file__).resolve().parent / "apps"
APP = "late_app:app"
QUEUE = "late"
HELD, DIRECT = "held", "direct"
_RECEIVE = "ReceiveMessage"


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    #: How long the proxy holds each ReceiveMessage answer of the `held` worker.
    hold_s: float
    #: How long each handler works before its side effect.
    work_s: float
    #: The workers' `--visibility-s` and the queue's VisibilityTimeout; None: the defaults.
    visibility_s: int | None
    messages: int = 5
    max_receive_count: int = 5
    #: No `direct` worker: what the held worker does with the messages by itself.
    alone: bool = False
    #: The longest the scenario may take to empty its queue.
    timeout_s: float = 180.0


SCENARIOS = {
    "a": Scenario("a", hold_s=8.0, work_s=2.5, visibility_s=6),
    "b": Scenario("b", hold_s=3.0, work_s=2.5, visibility_s=6),
    "c": Scenario("c", hold_s=15.0, work_s=16.0, visibility_s=None),
}


@dataclass(frozen=True, slots=True)
class Setup:
    """Which runtime the workers run, and how it talks to SQS."""

    label: str
    tree: Path = ROOT
    sqs_client: str = "lean"


@dataclass(slots=True)
class Result:
    scenario: Scenario
    setup: Setup
    out: Path
    tally: Tally | None = None
    #: Why the scenario was not measured (None: it was).
    failure: str | None = None
    wall_s: float = 0.0
    #: The `held` worker's ReceiveMessage calls, those it gave up on while held, and its
    #: renewal calls (ChangeMessageVisibility and its batch).
    receives: int = 0
    abandoned: int = 0
    renewals: int = 0
    #: `lease.lost` lines per worker (by reason), and each worker's exit status.
    lease_lost: dict[str, Counter[str]] = field(default_factory=dict)
    exits: dict[str, int | None] = field(default_factory=dict)
    #: The overlapping pairs and the side effects after a lapse, one line each.
    details: list[str] = field(default_factory=list)


def _workers(setup: Setup, s: Scenario, out: Path, name: str, endpoint: str) -> Workers:
    env = {
        **_harness.CREDENTIALS,
        "PYTHONPATH": f"{setup.tree}{os.pathsep}{APPS}",
        "LATE_QUEUE": QUEUE,
        "LATE_OUT": str(out),
        "LATE_NAME": name,
        "LATE_WORK_S": str(s.work_s),
    }
    args = ["--sqs-client", setup.sqs_client]
    if s.visibility_s is not None:
        args += ["--visibility-s", str(s.visibility_s)]
    return Workers(out, "sqs", endpoint, env, tuple(args), app=APP, cwd=setup.tree)


def run(s: Scenario, setup: Setup, out: Path | None = None) -> Result:
    """One scenario on one runtime; files (logs, the effects file) in `out`."""
    out = out or Path(tempfile.mkdtemp(prefix=f"late-receives-{s.name}-"))
    result = Result(s, setup, out)
    began = time.monotonic()
    with _harness.server() as server:
        queues = SqsQueues(server.sqs, QUEUE, s.max_receive_count, s.visibility_s)
        sent = queues.send(s.messages)
        proxy = HttpDelayProxy(("127.0.0.1", server.port), [Hold(frozenset({_RECEIVE}), s.hold_s)])
        with running(proxy) as proxy_url:
            held = _workers(setup, s, out, HELD, proxy_url)
            direct = _workers(setup, s, out, DIRECT, server.url)
            try:
                result.failure = _play(s, queues, proxy, held, direct)
                result.exits = _stop(held, direct)
            finally:
                held.kill_all()
                direct.kill_all()
            exchanges = proxy.exchanges
        result.wall_s = time.monotonic() - began
        in_queue, in_dlq = _left(queues, s)
    _judge(result, exchanges, sent, in_queue, in_dlq, (held, direct))
    return result


def _play(
    s: Scenario, queues: SqsQueues, proxy: HttpDelayProxy, held: Workers, direct: Workers
) -> str | None:
    """Start `held`; once its first receive has taken messages, `direct`; then wait for the
    end. Why the scenario could not be played, or None."""
    held.start()
    if not wait_until(lambda: any(_carried(proxy.exchanges)) or bool(held.exited()), 60):
        return "the held worker took no message within 60 s"
    if held.exited():
        return f"the held worker exited: {held.tail(held.pids[0], 3)}"
    if not s.alone:
        direct.start()

    def over() -> bool:
        return _quiet(queues, proxy, held) or bool(held.exited() or direct.exited())

    ended = wait_until(over, s.timeout_s, 0.2)
    if ended:  # again a second later: a held answer just delivered starts its handlers
        time.sleep(1)
        ended = wait_until(over, s.timeout_s, 0.2)
    if not ended:
        return f"the queue was not emptied within {s.timeout_s:g} s"
    if held.exited() or direct.exited():
        return f"a worker exited early: {held.exited() | direct.exited()}"
    return None


def _carried(exchanges: list[Exchange]) -> list[Exchange]:
    return [e for e in exchanges if e.operation == _RECEIVE and e.carried()]


def _quiet(queues: SqsQueues, proxy: HttpDelayProxy, held: Workers) -> bool:
    """Nothing left to happen: the queue empty (each message deleted or dead-lettered), no
    answer carrying messages still held, no handler running."""
    on_the_way = [
        e for e in _carried(proxy.exchanges) if e.delivered_at is None and not e.client_gone
    ]
    running_ = [r for r in read_runs(held.out / "effects.txt") if r.ended is None]
    return not on_the_way and not running_ and queues.left() == (0, 0)


def _stop(*fleets: Workers) -> dict[str, int | None]:
    for workers in fleets:
        workers.signal_all(signal.SIGTERM)
    return {
        str(workers.env["LATE_NAME"]): code
        for workers in fleets
        for code in workers.wait_all(60).values()
    }


def _left(queues: SqsQueues, s: Scenario) -> tuple[list[str], list[str]]:
    """The ids in the queue and in the DLQ at the end. A message still in flight (taken by a
    receive its worker gave up on) is waited for until it is visible again."""
    visibility_s = 30 if s.visibility_s is None else s.visibility_s
    wait_until(lambda: queues.left()[1] == 0, visibility_s + 5, 0.5)
    return _drain_ids(queues, queues.url), _drain_ids(queues, queues.dlq_url)


def _drain_ids(queues: SqsQueues, url: str) -> list[str]:
    """Receive everything visible in `url` (kept invisible for a minute): the ids."""
    ids: list[str] = []
    while True:
        answer = queues.sqs.call(
            _RECEIVE, QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=60, WaitTimeSeconds=0
        )
        got = [message["MessageId"] for message in answer.get("Messages", [])]
        if not got:
            return ids
        ids += got


def _judge(
    result: Result,
    exchanges: list[Exchange],
    sent: list[str],
    in_queue: list[str],
    in_dlq: list[str],
    fleets: tuple[Workers, Workers],
) -> None:
    runs = read_runs(result.out / "effects.txt")
    polls = [e for e in exchanges if e.operation == _RECEIVE]
    receives = [
        Receive(message_id, HELD, e.answered_at)
        for e in polls
        if e.answered_at is not None
        for message_id in e.carried()
    ]
    receives += [Receive(r.message_id, r.process, r.started) for r in runs if r.process != HELD]
    result.tally = tally(runs, receives, sent, in_queue, in_dlq)
    result.receives = len(polls)
    result.abandoned = sum(1 for e in polls if e.client_gone)
    result.renewals = sum(1 for e in exchanges if e.operation.startswith("ChangeMessageVis"))
    for workers in fleets:
        name = str(workers.env["LATE_NAME"])
        result.lease_lost[name] = Counter(
            str(e.get("reason")) for _, e in workers.events("lease.lost")
        )
    result.details = _details(runs, receives)


def _details(runs: list[Run], receives: list[Receive]) -> list[str]:
    lines = [f"overlap: {a.show()} / {b.show()}" for a, b in overlaps(runs)]
    return lines + [f"effect after a lapse: {run.show()}" for run in after_lapse(runs, receives)]


# -- the report -----------------------------------------------------------------------------


def _scenario(s: Scenario) -> str:
    visibility = "30 (default)" if s.visibility_s is None else str(s.visibility_s)
    alone = ", no direct worker" if s.alone else ""
    return f"{s.name}: held {s.hold_s:g} s, visibility {visibility} s, work {s.work_s:g} s{alone}"


def _lost_shown(counts: Counter[str]) -> str:
    return ", ".join(f"{n} {reason}" for reason, n in sorted(counts.items())) or "0"


def table(results: Sequence[Result]) -> list[str]:
    lines = [
        "| scenario | runtime | client | runs held/direct | handled | side effects | overlaps | "
        "effects after lapse | fence refused | lease.lost held/direct | DLQ | lost | "
        "receives held (abandoned) | renewal calls held | wall s |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: "
        "| ---: | ---: |",
    ]
    for r in results:
        head = f"| {_scenario(r.scenario)} | {r.setup.label} | {r.setup.sqs_client} |"
        t = r.tally
        if r.failure is not None or t is None:
            lines.append(f"{head} **not measured**: {r.failure} |" + " |" * 12)
            continue
        lost_lines = " / ".join(_lost_shown(r.lease_lost.get(n, Counter())) for n in (HELD, DIRECT))
        lines.append(
            f"{head} {t.runs.get(HELD, 0)}/{t.runs.get(DIRECT, 0)} | {t.handled} | {t.effects} | "
            f"{t.overlaps} | {t.after_lapse} | {t.refused} | {lost_lines} | {t.dead} | "
            f"{t.lost} | {r.receives} ({r.abandoned}) | {r.renewals} | {r.wall_s:.0f} |"
        )
    return lines


# -- the command line -------------------------------------------------------------------------


def _tree(text: str) -> Setup:
    label, sep, path = text.partition("=")
    if not sep or not label:
        raise argparse.ArgumentTypeError(f"expected LABEL=PATH, got {text!r}")
    return Setup(label, Path(path).resolve())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.late_receives", description=__doc__)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--scenario", nargs="+", choices=sorted(SCENARIOS), default=["a", "b", "c"])
    parser.add_argument("--tree", type=_tree, action="append", help="LABEL=PATH (default: new=.)")
    parser.add_argument("--sqs-client", nargs="+", choices=["lean", "botocore"], default=["lean"])
    parser.add_argument("--messages", type=int, default=5)
    parser.add_argument("--hold-s", type=float, help="instead of each scenario's own")
    parser.add_argument("--work-s", type=float, help="instead of each scenario's own")
    parser.add_argument("--alone", action="store_true", help="start no direct worker")
    parser.add_argument("--out", type=Path, help="a folder per run under it (default: tmp)")
    args = parser.parse_args(argv)
    results = []
    for name in args.scenario:
        s = replace(SCENARIOS[name], messages=args.messages, alone=args.alone)
        s = replace(s, hold_s=args.hold_s or s.hold_s, work_s=args.work_s or s.work_s)
        for tree in args.tree or [Setup("new")]:
            for client in args.sqs_client:
                setup = replace(tree, sqs_client=client)
                results.append(_one(s, setup, args.out))
    print("\n".join(table(results)), flush=True)
    return 0 if all(r.failure is None for r in results) else 1


def _one(s: Scenario, setup: Setup, out: Path | None) -> Result:
    folder = None
    if out is not None:
        folder = out / f"{s.name}-{setup.label}-{setup.sqs_client}"
        folder.mkdir(parents=True, exist_ok=True)
    result = run(s, setup, folder)
    print(f"{_scenario(s)}, {setup.label}, {setup.sqs_client}: files in {result.out}", flush=True)
    print(f"  worker exits {result.exits}", flush=True)
    for line in result.details or ["no overlap, no effect after a lapse"]:
        print(f"  {line}", flush=True)
    if result.failure:
        print(f"  NOT MEASURED: {result.failure}", flush=True)
    return result


if __name__ == "__main__":
    sys.exit(main())
