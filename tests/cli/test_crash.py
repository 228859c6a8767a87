"""Crashes: `lease-worker` processes SIGKILLed at random moments lose no message.

Three workers run `tests.apps.crash_app` against moto's server and 1,000 numbered messages
(a queue with a DLQ, maxReceiveCount 5). Each handler appends a line to a shared file when it
starts and another when it has done its work, before it returns (number, worker, pid, receive
count, times). A seeded schedule SIGKILLs a random live worker that has handled something (so
it has work in flight) after a random delay, notes when, and starts a replacement, 20 times.
Then the survivors drain until every number is handled or in the DLQ and the queue is empty,
and they exit 0 on SIGTERM.

What is checked: handled + dead-lettered = all 1,000 (none lost), and every duplicate comes
from a kill, with no other excuse: each completed run of a message that was delivered again
was in a worker that was SIGKILLed afterwards, which logged nothing about that message (no
`lease.lost`, no failed delete), and the next delivery of that message started after the
kill (while the worker lived, it held the lease, so nobody else got the message). A run cut
short (a start without an end) is likewise only allowed in a killed worker. A worker holds
at most `max_in_flight` messages, settled or not, so no kill explains more than that.

Moto is run serialized (`start_moto(serialized=True)`): unserialized, its own races under
concurrent calls deliver a message twice or bring a deleted one back, which real SQS does
not do, and which would show here as duplicates with no kill behind them (see
tests/moto_server.py for the mechanism and the numbers).

Every wait is on a condition (a line in the file, a queue count, a process exit) and bounded;
the kill delays are the test's input, drawn from the seeded schedule. Set `CRASH_SEED` to
replay another schedule.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest

from tests.apps.crash_app import Records, Run
from tests.moto_server import MOTO_ACCESS_KEY, MOTO_REGION, MOTO_SECRET_KEY, MotoServer, start_moto

#: Above the test's own bounds (RUN_S, then the exits), so that those fail first, and say why.
pytestmark = [pytest.mark.process, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]
SEED = int(os.environ.get("CRASH_SEED", "20240611"))
MESSAGES = 1_000
WORKERS = 3
KILLS = 20
MAX_IN_FLIGHT = 10
MAX_RECEIVE_COUNT = 5
#: Seconds between one kill and the next, drawn uniformly: the schedule's input.
KILL_DELAY_S = (0.3, 1.8)
#: Seconds a handler works, drawn per delivery: 1,000 messages take three workers at least
#: 1000 * 1.1 / 30 = 37 s, longer than the kills (20 * 1.05 s on average), so every kill
#: finds work in flight however fast the machine.
WORK_S = (0.2, 2.0)
#: Short leases, so that a killed worker's messages come back within 8 s; renewed when 5 s
#: are left, so the lease keeper renews throughout (a handler may outlive its first lease).
VISIBILITY_S = 8
LEASE_ARGS = ("--visibility-s", "8", "--extension-s", "8", "--renew-margin-s", "5")
#: Bounds: for a worker's first completion, for an exit, for the whole run.
FIRST_WORK_S = 30.0
EXIT_S = 30.0
RUN_S = 150.0
POLL_S = 0.1


@dataclass(frozen=True, slots=True)
class Kill:
    """A worker SIGKILLed: `sent` is the Unix time just before the signal."""

    worker: int
    sent: float


class Fleet:
    """The worker processes, numbered in start order: started, killed, replaced, stopped."""

    def __init__(self, tmp_path: Path, moto: MotoServer, queue: str, out: Path) -> None:
        self._tmp_path = tmp_path
        self._command = [
            sys.executable, "-m", "worker", "run", "tests.apps.crash_app:app",
            "--backend", "sqs", "--endpoint-url", moto.endpoint_url, "--region", MOTO_REGION,
            "--max-in-flight", str(MAX_IN_FLIGHT), "--grace-s", "10",
            "--log-format", "json", "--log-level", "warning", *LEASE_ARGS,
        ]  # fmt: skip
        self._env = _child_env(
            tmp_path,
            CRASH_APP_QUEUE=queue,
            CRASH_APP_OUT=str(out),
            CRASH_APP_MIN_WORK_S=str(WORK_S[0]),
            CRASH_APP_MAX_WORK_S=str(WORK_S[1]),
        )
        self.processes: list[subprocess.Popen[bytes]] = []
        self.kills: dict[int, Kill] = {}

    @property
    def killed(self) -> set[int]:
        return set(self.kills)

    @property
    def live(self) -> list[int]:
        return [i for i in range(len(self.processes)) if i not in self.kills]

    def log(self, worker: int) -> Path:
        return self._tmp_path / f"worker-{worker}.log"

    def start(self) -> int:
        worker = len(self.processes)
        with self.log(worker).open("wb") as stderr:
            self.processes.append(
                subprocess.Popen(
                    self._command,
                    cwd=ROOT,
                    env=self._env | {"CRASH_APP_WORKER": str(worker)},
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=stderr,
                )
            )
        return worker

    def kill(self, worker: int) -> None:
        process = self.processes[worker]
        sent = time.time()
        process.send_signal(signal.SIGKILL)
        assert process.wait(timeout=EXIT_S) == -signal.SIGKILL
        self.kills[worker] = Kill(worker, sent)

    def check_alive(self) -> None:
        for worker in self.live:
            exited = self.processes[worker].poll() is not None
            assert not exited, f"worker {worker} exited by itself: {self.tail(worker)}"

    def terminate_live(self) -> dict[int, int]:
        for worker in self.live:
            self.processes[worker].send_signal(signal.SIGTERM)
        return {worker: self.processes[worker].wait(timeout=EXIT_S) for worker in self.live}

    def logged(self) -> list[tuple[int, dict[str, Any]]]:
        """Every line the workers logged (warnings and errors: the level they run at)."""
        found = []
        for worker in range(len(self.processes)):
            for line in self.log(worker).read_text().splitlines():
                found.append(
                    (worker, json.loads(line) if line.startswith("{") else {"event": line})
                )
        return found

    def warnings(self) -> list[tuple[int, str]]:
        return [(worker, str(event.get("event"))) for worker, event in self.logged()]

    def warned(self) -> dict[tuple[int, str], str]:
        """The events each worker logged about each message, by (worker, message id)."""
        found: dict[tuple[int, str], list[str]] = {}
        for worker, event in self.logged():
            if "message_id" in event:
                key = (worker, str(event["message_id"]))
                found.setdefault(key, []).append(str(event.get("event")))
        return {key: ", ".join(events) for key, events in found.items()}

    def tail(self, worker: int) -> str:
        return "\n".join(self.log(worker).read_text().splitlines()[-20:])

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
            process.wait(timeout=EXIT_S)


def _child_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("LEASE_WORKER_", "CRASH_APP_", "AWS_"))
    }
    # Dummy credentials only; no shared config or credentials file is read.
    env |= {
        "AWS_ACCESS_KEY_ID": MOTO_ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": MOTO_SECRET_KEY,
        "AWS_DEFAULT_REGION": MOTO_REGION,
        "AWS_CONFIG_FILE": str(tmp_path / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "no-aws-credentials"),
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    return env | extra


def wait_until(
    condition: Callable[[], bool],
    timeout_s: float,
    what: str,
    state: Callable[[], str] = lambda: "",
) -> float:
    """Poll `condition` until it holds; the seconds it took. Fails after `timeout_s`, with
    `state()` in the message."""
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout_s:
            pytest.fail(f"{what}: not within {timeout_s:.0f} s {state()}".rstrip())
        time.sleep(POLL_S)
    return time.monotonic() - start


@pytest.fixture(scope="module")
def moto() -> Iterator[MotoServer]:
    with start_moto(serialized=True) as server:
        yield server


@pytest.fixture
def fleet_factory(tmp_path: Path) -> Iterator[Callable[..., Fleet]]:
    fleets: list[Fleet] = []

    def make(*args: Any) -> Fleet:
        fleets.append(Fleet(tmp_path, *args))
        return fleets[-1]

    yield make
    for fleet in fleets:
        fleet.stop()


class Queues:
    """The main queue and its DLQ, through boto3 straight to moto."""

    def __init__(self, moto: MotoServer, name: str) -> None:
        self.name = name
        self.sqs = boto3.client(
            "sqs",
            endpoint_url=moto.endpoint_url,
            region_name=MOTO_REGION,
            aws_access_key_id=MOTO_ACCESS_KEY,
            aws_secret_access_key=MOTO_SECRET_KEY,
        )
        self.dlq_url = self.sqs.create_queue(QueueName=f"{name}-dlq")["QueueUrl"]
        dlq_arn = self.sqs.get_queue_attributes(QueueUrl=self.dlq_url, AttributeNames=["QueueArn"])[
            "Attributes"
        ]["QueueArn"]
        policy = {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": MAX_RECEIVE_COUNT}
        attributes = {"VisibilityTimeout": str(VISIBILITY_S), "RedrivePolicy": json.dumps(policy)}
        self.url = self.sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
        self.dead: set[int] = set()

    def send_numbered(self, count: int) -> None:
        for start in range(0, count, 10):
            entries = [
                {"Id": str(n), "MessageBody": json.dumps({"n": n})}
                for n in range(start, min(start + 10, count))
            ]
            response = self.sqs.send_message_batch(QueueUrl=self.url, Entries=entries)
            assert not response.get("Failed"), response["Failed"]

    def remaining(self) -> int:
        """Messages still in the main queue, visible or not."""
        attributes = self.sqs.get_queue_attributes(
            QueueUrl=self.url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return sum(int(value) for value in attributes.values())

    def read_dead(self) -> set[int]:
        """Every number that reached the DLQ so far (kept invisible once read)."""
        while True:
            response = self.sqs.receive_message(
                QueueUrl=self.dlq_url, MaxNumberOfMessages=10, VisibilityTimeout=3_600
            )
            messages = response.get("Messages") or []
            if not messages:
                return self.dead
            self.dead.update(json.loads(m["Body"])["n"] for m in messages)


@dataclass(frozen=True, slots=True)
class Verdict:
    """A run of a message that was delivered again (or never completed), and why."""

    run: Run
    after: Run | None  # the next delivery's run, if one started
    kill: Kill | None  # the kill of the run's worker, if it was killed
    cause: str

    def show(self) -> str:
        shown = [self.run.show()]
        if self.kill is not None:
            shown.append(f"its worker killed at {self.kill.sent:.3f}")
            if self.run.ended is not None:
                shown.append(f"{self.kill.sent - self.run.ended:.3f} s after the run ended")
        if self.after is not None:
            shown.append(f"next: {self.after.show()}")
            if self.kill is not None:
                shown.append(f"{self.after.started - self.kill.sent:.3f} s after the kill")
        return f"{self.cause}: " + "; ".join(shown)


def judge(
    runs: list[Run], kills: dict[int, Kill], warned: dict[tuple[int, str], str]
) -> list[Verdict]:
    """Every run of one message that was cut short or followed by another delivery, and why.

    `warned`: the events a worker logged about a message, by (worker, message id). The only
    cause allowed is "kill": the run's worker was SIGKILLed while it held the message (it
    logged nothing about it, and the next delivery started after the kill).
    """
    runs = sorted(runs, key=lambda run: run.receive_count)
    verdicts = []
    for i, run in enumerate(runs):
        after = runs[i + 1] if i + 1 < len(runs) else None
        if after is None and run.ended is not None:
            continue
        kill = kills.get(run.worker)
        if (run.worker, run.message_id) in warned:
            cause = "warned: " + warned[run.worker, run.message_id]
        elif kill is None:
            cause = "cut short in a live worker" if run.ended is None else "redelivered, no kill"
        elif after is not None and after.started < kill.sent:
            cause = "delivered again before its worker was killed"
        else:
            cause = "kill"
        verdicts.append(Verdict(run, after, kill, cause))
    return verdicts


@dataclass
class Analysis:
    """What the records say after a run: completions, duplicates, and each one's cause."""

    runs: list[Run]
    dead: set[int]
    verdicts: dict[int, list[Verdict]]
    warnings: Counter[str]

    @classmethod
    def of(cls, records: Records, fleet: Fleet, dead: set[int]) -> Analysis:
        runs = records.read()
        warned = fleet.warned()
        by_number: dict[int, list[Run]] = {}
        for run in runs:
            by_number.setdefault(run.n, []).append(run)
        verdicts = {n: judge(found, fleet.kills, warned) for n, found in by_number.items()}
        warnings = Counter(event for _, event in fleet.warnings())
        return cls(runs, set(dead), {n: v for n, v in verdicts.items() if v}, warnings)

    @property
    def handled(self) -> set[int]:
        return {run.n for run in self.runs if run.ended is not None}

    @property
    def duplicated(self) -> set[int]:
        counts = Counter(run.n for run in self.runs if run.ended is not None)
        return {n for n, count in counts.items() if count > 1}

    def unexplained(self) -> dict[int, list[str]]:
        return {
            n: [verdict.show() for verdict in found if verdict.cause != "kill"]
            for n, found in self.verdicts.items()
            if any(verdict.cause != "kill" for verdict in found)
        }

    def per_kill(self) -> Counter[int]:
        """How many messages each kill caught in flight (completed or cut short)."""
        return Counter(
            verdict.run.worker
            for found in self.verdicts.values()
            for verdict in found
            if verdict.cause == "kill"
        )

    def report(self, kills: int, timings: dict[str, float]) -> str:
        causes = Counter(verdict.cause for found in self.verdicts.values() for verdict in found)
        cut = sum(run.ended is None for run in self.runs)
        lines = [
            f"crash test (seed {SEED}): {MESSAGES} messages, {kills} kills, {len(self.runs)} "
            f"runs ({cut} cut short), {len(self.handled)} handled, {len(self.dead)} "
            f"dead-lettered, {len(self.duplicated)} handled more than once; runs cut short or "
            f"delivered again, by cause: {dict(causes)}; most caught by one kill: "
            f"{max(self.per_kill().values(), default=0)}; logged: {dict(self.warnings)}; "
            + ", ".join(f"{name} {seconds:.1f} s" for name, seconds in timings.items())
        ]
        for n, found in sorted(self.verdicts.items()):
            lines += [
                f"  message {n}: {verdict.show()}"
                for verdict in found
                if verdict.cause != "kill" or n in self.duplicated
            ]
        return "\n".join(lines)


def kill_and_replace(fleet: Fleet, records: Records, rng: random.Random) -> list[int]:
    """The kills: each time a random live worker that has handled something (so has work in
    flight) is SIGKILLed and replaced. How many numbers were handled at each kill."""
    handled_at_kill = []
    for _ in range(KILLS):
        time.sleep(rng.uniform(*KILL_DELAY_S))
        fleet.check_alive()

        def busy() -> list[int]:
            return sorted(set(fleet.live) & records.workers())

        wait_until(lambda: bool(busy()), FIRST_WORK_S, "a live worker that has handled")
        fleet.kill(rng.choice(busy()))
        handled_at_kill.append(len(records.numbers()))
        fleet.start()
    return handled_at_kill


def drain(fleet: Fleet, records: Records, queues: Queues, timeout_s: float) -> None:
    """Until every number is handled or in the DLQ, and nothing is left in the queue (what a
    killed worker held comes back within a visibility timeout and is handled again)."""
    everything = set(range(MESSAGES))

    def accounted() -> bool:
        fleet.check_alive()
        if records.numbers() | queues.read_dead() != everything:
            return False
        return queues.remaining() == 0

    def state() -> str:
        missing = everything - records.numbers() - queues.dead
        left = queues.remaining()
        return f"({len(missing)} neither handled nor dead-lettered, {left} in the queue)"

    wait_until(accounted, timeout_s, "every message accounted for", state)


def test_random_sigkills_lose_no_message(
    moto: MotoServer, tmp_path: Path, fleet_factory: Callable[..., Fleet]
) -> None:
    rng = random.Random(SEED)
    timings: dict[str, float] = {}
    began = time.monotonic()
    queues = Queues(moto, f"crash-{uuid.uuid4().hex[:12]}")
    queues.send_numbered(MESSAGES)
    timings["send"] = time.monotonic() - began

    records = Records(tmp_path / "runs.txt")
    fleet: Fleet = fleet_factory(moto, queues.name, records.path)
    for _ in range(WORKERS):
        fleet.start()
    timings["first completion"] = wait_until(
        lambda: bool(records.completed()), FIRST_WORK_S, "a first message handled"
    )
    try:
        kills_began = time.monotonic()
        handled_at_kill = kill_and_replace(fleet, records, rng)
        timings["kills"] = time.monotonic() - kills_began
        drain(fleet, records, queues, RUN_S - (time.monotonic() - began))
        timings["drain and total"] = time.monotonic() - began
        codes = fleet.terminate_live()
    finally:  # the evidence, also when a wait above failed
        analysis = Analysis.of(records, fleet, queues.read_dead())
        print("\n" + analysis.report(len(fleet.kills), timings))

    print(f"numbers handled at each kill: {handled_at_kill}")
    everything = set(range(MESSAGES))
    lost = everything - analysis.handled - analysis.dead
    assert not lost, f"lost: {sorted(lost)}"
    assert len(fleet.kills) == KILLS
    # Every kill came while work was left: the workers were busy, not idle.
    assert max(handled_at_kill) < MESSAGES, handled_at_kill
    assert codes == dict.fromkeys(fleet.live, 0), {w: fleet.tail(w) for w in fleet.live}
    # Every duplicate, and every run cut short, traces to a kill while its worker held it.
    assert not analysis.unexplained(), analysis.unexplained()
    # A worker holds at most max_in_flight messages, running or waiting for their delete.
    assert max(analysis.per_kill().values()) <= MAX_IN_FLIGHT, analysis.per_kill()
