"""Shutdown of a real `lease-worker` process on real signals.

The worker runs `tests.apps.shutdown_app` on the embedded memory engine: 20 messages, at most 6
in flight, the first 3 handlers to start take `MEDIUM_S`, the others far longer. A test waits
on the child's JSON log lines (never on a clock) until all 6 handlers have started, signals it,
and then reads the app's report, written when the worker cancels its background tasks after
the final flush: the engine's counts and each message's state at exit.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parents[2]
MESSAGES, IN_FLIGHT, MEDIUM = 20, 6, 3
#: Long enough that the medium handlers are still running when the signal arrives.
MEDIUM_S = 1.5
#: Bound on any wait for a log line or an exit: a hang fails the test instead of blocking.
WAIT_S = 60.0

Event = dict[str, Any]


class WorkerProcess:
    """A `lease-worker run` child whose standard error is read, line by line, on a thread."""

    def __init__(self, tmp_path: Path, *args: str, **env: str) -> None:
        self.report_path = tmp_path / "report.json"
        child_env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("LEASE_WORKER_", "SHUTDOWN_APP_"))
        }
        child_env |= {"SHUTDOWN_APP_REPORT": str(self.report_path), **env}
        command = [sys.executable, "-m", "worker", "run", "tests.apps.shutdown_app:app"]
        self.proc = subprocess.Popen(
            [*command, "--backend", "memory", "--log-format", "json", *args],
            cwd=ROOT,
            env=child_env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.events: list[Event] = []
        self.other_lines: list[str] = []
        self._lines: queue.Queue[Event | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                self.other_lines.append(line.rstrip("\n"))
                continue
            self._lines.put(event)
        self._lines.put(None)

    def wait_for(self, matches: Callable[[Event], bool], what: str) -> Event:
        """Block until a log event `matches`; fail if the process ends or WAIT_S passes."""
        deadline = time.monotonic() + WAIT_S
        while True:
            try:
                event = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                pytest.fail(f"no {what} within {WAIT_S} s; log so far: {self.events}")
            if event is None:
                pytest.fail(f"the worker ended before {what}: {self.events} {self.other_lines}")
            self.events.append(event)
            if matches(event):
                return event

    def wait_for_event(self, name: str, **fields: Any) -> Event:
        return self.wait_for(
            lambda e: e["event"] == name and all(e.get(k) == v for k, v in fields.items()),
            name,
        )

    def wait_handlers_started(self, count: int) -> list[Event]:
        started: list[Event] = []
        for _ in range(count):
            started.append(self.wait_for_event("app.handler_started"))
        return started

    def signal(self, signum: signal.Signals) -> float:
        self.proc.send_signal(signum)
        return time.monotonic()

    def exit(self, timeout_s: float = WAIT_S) -> tuple[int, float]:
        """Wait for the exit and the end of the log; the exit code and when it was seen."""
        code = self.proc.wait(timeout=timeout_s)
        ended = time.monotonic()
        self._reader.join(timeout=WAIT_S)
        while (event := self._lines.get_nowait()) is not None:
            self.events.append(event)
        return code, ended

    def report(self) -> dict[str, Any]:
        report: dict[str, Any] = json.loads(self.report_path.read_text())
        return report

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=WAIT_S)
        if self.proc.stderr is not None:
            self.proc.stderr.close()


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    children: list[WorkerProcess] = []

    def start(*args: str, **env: str) -> WorkerProcess:
        workdir = tmp_path / f"worker-{len(children)}"
        workdir.mkdir()
        child = WorkerProcess(workdir, *args, **env)
        children.append(child)
        return child

    yield start
    for child in children:
        child.stop()


def names(events: list[Event]) -> list[str]:
    return [event["event"] for event in events]


def index_of(events: list[Event], name: str) -> int:
    return names(events).index(name)


def seconds_between(first: Event, then: Event) -> float:
    return (
        datetime.fromisoformat(then["timestamp"]) - datetime.fromisoformat(first["timestamp"])
    ).total_seconds()


def by_kind(started: list[Event], kind: str) -> set[str]:
    return {event["message_id"] for event in started if event["kind"] == kind}


def assert_released_at_once(report: dict[str, Any], message_ids: set[str]) -> None:
    """Visible now, after one receive: released with visibility 0.

    The report is written within milliseconds of the release and a visibility is whole
    seconds, so anything but 0 would leave the message in flight here.
    """
    for message_id in message_ids:
        message = report["messages"][message_id]
        assert message is not None, f"{message_id} was deleted, not released"
        assert message["state"] == "visible", (message_id, message)
        assert message["receive_count"] == 1, (message_id, message)
        assert message["visible_at"] <= report["now"], (message_id, message)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_signal_mid_work_drains_releases_and_exits_0(
    spawn: Callable[..., WorkerProcess], signum: signal.Signals
) -> None:
    grace_s = 2 * MEDIUM_S
    child = spawn(
        "--grace-s",
        str(grace_s),
        "--max-in-flight",
        str(IN_FLIGHT),
        SHUTDOWN_APP_MESSAGES=str(MESSAGES),
        SHUTDOWN_APP_MEDIUM=str(MEDIUM),
        SHUTDOWN_APP_MEDIUM_S=str(MEDIUM_S),
        SHUTDOWN_APP_LONG_S="3600",
    )
    started = child.wait_handlers_started(IN_FLIGHT)
    child.signal(signum)
    code, _ = child.exit()

    assert code == 0, (child.events, child.other_lines)
    assert child.other_lines == []
    events = child.events
    signalled = index_of(events, "signal.received")
    assert events[signalled]["signal"] == signum.name
    # Receiving stopped: every handler that ever started did so before the signal.
    handler_starts = [i for i, name in enumerate(names(events)) if name == "app.handler_started"]
    assert len(handler_starts) == IN_FLIGHT
    assert max(handler_starts) < signalled
    medium, long = by_kind(started, "medium"), by_kind(started, "long")
    assert len(medium) == MEDIUM and len(long) == IN_FLIGHT - MEDIUM
    # The medium handlers finished during the drain (not before the signal: the premise).
    finished = [e for e in events[signalled:] if e["event"] == "app.handler_finished"]
    assert {e["message_id"] for e in finished} == medium
    assert "app.handler_finished" not in names(events[:signalled]), "signalled too late"
    # The long ones were cancelled at the end of the grace period and released.
    releasing = events[index_of(events, "shutdown.releasing")]
    assert releasing["messages"] == IN_FLIGHT - MEDIUM
    cancelled = [e for e in events if e["event"] == "app.handler_cancelled"]
    assert {e["message_id"] for e in cancelled} == long
    assert index_of(events, "shutdown.releasing") > max(
        index_of(events, "shutdown.draining"), *(events.index(e) for e in finished)
    )
    # ... and not before the grace period was over.
    assert seconds_between(events[signalled], releasing) >= grace_s - 0.05
    assert names(events)[-1] == "shutdown.complete"

    report = child.report()
    assert report["queue"] == {"visible": MESSAGES - MEDIUM, "in_flight": 0, "delayed": 0}
    messages: dict[str, dict[str, Any] | None] = report["messages"]
    assert len(messages) == MESSAGES
    assert {m for m, state in messages.items() if state is None} == medium
    assert_released_at_once(report, long)
    never_received = set(messages) - medium - long
    assert len(never_received) == MESSAGES - IN_FLIGHT
    for message_id in never_received:
        message = messages[message_id]
        assert message is not None
        assert (message["state"], message["receive_count"]) == ("visible", 0), message


@pytest.mark.parametrize(
    "second", [signal.SIGTERM, signal.SIGINT], ids=lambda s: f"SIGTERM-then-{s.name}"
)
def test_second_signal_cuts_the_drain_short(
    spawn: Callable[..., WorkerProcess], second: signal.Signals
) -> None:
    grace_s = 120.0
    child = spawn(
        "--grace-s",
        str(grace_s),
        "--max-in-flight",
        str(IN_FLIGHT),
        SHUTDOWN_APP_MESSAGES=str(MESSAGES),
        SHUTDOWN_APP_MEDIUM=str(MEDIUM),
        SHUTDOWN_APP_MEDIUM_S="300",
        SHUTDOWN_APP_LONG_S="3600",
    )
    started = child.wait_handlers_started(IN_FLIGHT)
    child.signal(signal.SIGTERM)
    # Two signals sent back to back may merge into one: send the second once the first has
    # started the drain.
    draining = child.wait_for_event("shutdown.draining")
    assert draining["in_flight"] == IN_FLIGHT
    assert draining["grace_s"] == grace_s
    second_sent = child.signal(second)
    code, ended = child.exit()

    assert code == 0, (child.events, child.other_lines)
    # Well inside the 120 s grace: the second signal left no drain time (second_signal_grace_s
    # is 0), so the exit took only the release and the flush.
    assert ended - second_sent < 10.0
    events = child.events
    received = [e["signal"] for e in events if e["event"] == "signal.received"]
    assert received == ["SIGTERM", second.name]
    assert index_of(events, "shutdown.hurried") > index_of(events, "shutdown.draining")
    assert events[index_of(events, "shutdown.releasing")]["messages"] == IN_FLIGHT
    assert "app.handler_finished" not in names(events)
    assert names(events).count("app.handler_cancelled") == IN_FLIGHT
    assert names(events)[-1] == "shutdown.complete"

    report = child.report()
    assert report["queue"] == {"visible": MESSAGES, "in_flight": 0, "delayed": 0}
    assert_released_at_once(report, {e["message_id"] for e in started})


def test_idle_worker_exits_0_at_once_on_sigterm(spawn: Callable[..., WorkerProcess]) -> None:
    child = spawn("--grace-s", "120", SHUTDOWN_APP_MESSAGES="0")
    child.wait_for_event("worker.started")
    sent = child.signal(signal.SIGTERM)
    code, ended = child.exit()
    assert code == 0, (child.events, child.other_lines)
    # Nothing in flight: no drain, so the long grace is not waited out.
    assert ended - sent < 10.0
    assert "shutdown.draining" not in names(child.events)
    assert "shutdown.releasing" not in names(child.events)
    assert names(child.events)[-1] == "shutdown.complete"
    assert child.report()["queue"] == {"visible": 0, "in_flight": 0, "delayed": 0}


def test_sync_stragglers_are_released_and_do_not_hold_the_exit(
    spawn: Callable[..., WorkerProcess],
) -> None:
    grace_s = 2 * MEDIUM_S
    child = spawn(
        "--grace-s",
        str(grace_s),
        "--max-in-flight",
        str(IN_FLIGHT),
        SHUTDOWN_APP_SYNC="1",
        SHUTDOWN_APP_MESSAGES=str(MESSAGES),
        SHUTDOWN_APP_MEDIUM=str(MEDIUM),
        SHUTDOWN_APP_MEDIUM_S=str(MEDIUM_S),
        SHUTDOWN_APP_LONG_S="3600",
    )
    started = child.wait_handlers_started(IN_FLIGHT)
    child.signal(signal.SIGTERM)
    child.wait_for_event("shutdown.complete")
    # The drain itself works: the medium handlers finished, the long ones were released.
    medium, long = by_kind(started, "medium"), by_kind(started, "long")
    finished = {e["message_id"] for e in child.events if e["event"] == "app.handler_finished"}
    assert finished == medium
    assert child.events[index_of(child.events, "shutdown.releasing")]["messages"] == len(long)
    report = child.report()
    assert report["queue"] == {"visible": MESSAGES - MEDIUM, "in_flight": 0, "delayed": 0}
    assert_released_at_once(report, long)
    # Nothing is left to do: the process must end now, not when the abandoned threads do.
    code, _ = child.exit(timeout_s=5.0)
    assert code == 0
