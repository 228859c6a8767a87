"""How a real `lease-worker` process ends: shutdown on real signals, crashes, start-up.

The worker runs `tests.apps.shutdown_app` on the embedded memory engine: 20 messages, at most 6
in flight, the first 3 handlers to start take `MEDIUM_S`, the others far longer. A test waits
on the child's JSON log lines (never on a clock) until all 6 handlers have started, signals it,
and then reads the app's report, written when the worker cancels its background tasks after
the final flush: the engine's counts and each message's state at exit.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.json_log import Event, JsonLog

pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parents[2]
QUEUE = "shutdown-test"  # tests.apps.shutdown_app's
MESSAGES, IN_FLIGHT, MEDIUM = 20, 6, 3
#: Long enough that the medium handlers are still running when the signal arrives.
MEDIUM_S = 1.5
#: Bound on any wait for a log line or an exit: a hang fails the test instead of blocking.
WAIT_S = 60.0


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
        self.log = JsonLog(self.proc, WAIT_S)
        self.events = self.log.events
        self.other_lines = self.log.other_lines

    def wait_for(self, matches: Callable[[Event], bool], what: str) -> Event:
        """Block until a log event `matches`; fail if the process ends or WAIT_S passes."""
        return self.log.next(matches, what)

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
        self.log.drain()
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
    # Issue 27, defect 4: the long poll in flight is waited for (its answer could hold
    # messages), so its wait bounds the exit: 2 s here.
    child = spawn("--grace-s", "120", SHUTDOWN_APP_MESSAGES="0", SHUTDOWN_APP_WAIT_S="2")
    child.wait_for_event("worker.started")
    sent = child.signal(signal.SIGTERM)
    code, ended = child.exit()
    assert code == 0, (child.events, child.other_lines)
    # Nothing in flight: no drain, so the long grace is not waited out.
    assert ended - sent < 10.0
    assert "shutdown.receive_cut_short" not in names(child.events)
    assert "shutdown.draining" not in names(child.events)
    assert "shutdown.releasing" not in names(child.events)
    assert names(child.events)[-1] == "shutdown.complete"
    assert child.report()["queue"] == {"visible": 0, "in_flight": 0, "delayed": 0}


# Issue 12, defect 7: sync stragglers were released (visibility 0) while their threads ran on,
# so another process could handle the same messages at the same time.
def test_sync_stragglers_keep_their_lease_and_do_not_hold_the_exit(
    spawn: Callable[..., WorkerProcess],
) -> None:
    grace_s, flush_s = 2 * MEDIUM_S, 2.0
    child = spawn(
        "--grace-s",
        str(grace_s),
        "--max-in-flight",
        str(IN_FLIGHT),
        SHUTDOWN_APP_SYNC="1",
        SHUTDOWN_APP_FLUSH_S=str(flush_s),
        SHUTDOWN_APP_MESSAGES=str(MESSAGES),
        SHUTDOWN_APP_MEDIUM=str(MEDIUM),
        SHUTDOWN_APP_MEDIUM_S=str(MEDIUM_S),
        SHUTDOWN_APP_LONG_S="3600",
    )
    started = child.wait_handlers_started(IN_FLIGHT)
    sent = child.signal(signal.SIGTERM)
    child.wait_for_event("shutdown.complete")
    medium, long = by_kind(started, "medium"), by_kind(started, "long")
    finished = {e["message_id"] for e in child.events if e["event"] == "app.handler_finished"}
    assert finished == medium
    gave_up = child.events[index_of(child.events, "shutdown.gave_up_waiting")]
    assert (gave_up["released"], gave_up["left_to_lapse"]) == (0, len(long))
    report = child.report()
    # Not handed back: still leased (to lapse after their last extension), never received
    # by anyone else while their threads may still be working on them.
    assert report["queue"] == {
        "visible": MESSAGES - IN_FLIGHT,
        "in_flight": len(long),
        "delayed": 0,
    }
    for message_id in long:
        assert report["messages"][message_id]["state"] == "in_flight"
        assert report["messages"][message_id]["receive_count"] == 1
    # Nothing is left to do: the process ends now, not when the abandoned threads do.
    code, ended = child.exit(timeout_s=5.0)
    assert code == 0
    assert ended - sent < grace_s + flush_s + 1


def assert_left_to_lapse(report: dict[str, Any], message_ids: set[str]) -> None:
    """Still in flight, received once: given up on, not released; every other one visible."""
    assert report["queue"] == {
        "visible": MESSAGES - len(message_ids),
        "in_flight": len(message_ids),
        "delayed": 0,
    }
    for message_id in message_ids:
        message = report["messages"][message_id]
        assert message is not None and message["state"] == "in_flight", (message_id, message)
        assert message["receive_count"] == 1, (message_id, message)


def assert_deleted_or_visible(report: dict[str, Any], message_ids: set[str]) -> None:
    for message_id in message_ids:
        message = report["messages"][message_id]
        assert message is None or message["state"] == "visible", (message_id, message)


# Issue 12, defect 6 (the must-show): a handler that swallows its cancellation (a slow
# rollback; or every cancellation, as a library's retry loop may) kept the worker alive for
# ever while its lease was renewed: with grace 1 s a shutdown took 601 s.
@pytest.mark.parametrize("swallow", ["once", "always"])
def test_sigterm_with_handlers_that_swallow_cancellation_ends_within_grace_plus_flush(
    spawn: Callable[..., WorkerProcess], swallow: str
) -> None:
    grace_s, flush_s = 1.0, 2.0
    child = spawn(
        "--grace-s",
        str(grace_s),
        "--max-in-flight",
        str(IN_FLIGHT),
        SHUTDOWN_APP_SWALLOW=swallow,
        SHUTDOWN_APP_FLUSH_S=str(flush_s),
        SHUTDOWN_APP_MESSAGES=str(MESSAGES),
        SHUTDOWN_APP_MEDIUM="0",
        SHUTDOWN_APP_LONG_S="600",
    )
    started = child.wait_handlers_started(IN_FLIGHT)
    sent = child.signal(signal.SIGTERM)
    code, ended = child.exit(timeout_s=grace_s + flush_s + 10)

    took = ended - sent
    print(f"swallow={swallow}: exit {code} {took:.2f} s after SIGTERM (grace + flush = 3 s)")
    assert code == 0, (child.events, child.other_lines)
    assert took <= grace_s + flush_s + 1
    held = {event["message_id"] for event in started}
    report = child.report()
    names_seen = names(child.events)
    if swallow == "once":  # the rollback's await was cancelled: they all ended
        assert report["queue"] == {"visible": MESSAGES, "in_flight": 0, "delayed": 0}
        assert_deleted_or_visible(report, held)
        assert_released_at_once(report, held)
        assert names_seen.count("app.handler_rolling_back") == IN_FLIGHT
        assert "shutdown.gave_up_waiting" not in names_seen
        assert "worker.exit_with_handlers_running" not in names_seen
    else:  # given up on after half the flush timeout, left to lapse, and the process ended
        # Issue 27, defect 5: never released while their coroutines exist.
        assert_left_to_lapse(report, held)
        assert names_seen.count("app.handler_swallowed") >= 2 * IN_FLIGHT
        gave_up = child.events[index_of(child.events, "shutdown.gave_up_waiting")]
        assert (gave_up["released"], gave_up["left_to_lapse"]) == (0, IN_FLIGHT)
        assert names_seen[-1] == "worker.exit_with_handlers_running"


def test_second_signal_forces_a_prompt_exit_past_handlers_that_swallow_cancellation(
    spawn: Callable[..., WorkerProcess],
) -> None:
    child = spawn(
        "--grace-s",
        "120",
        "--max-in-flight",
        str(IN_FLIGHT),
        SHUTDOWN_APP_SWALLOW="always",
        SHUTDOWN_APP_MESSAGES=str(MESSAGES),
        SHUTDOWN_APP_MEDIUM="0",
        SHUTDOWN_APP_LONG_S="600",
    )
    started = child.wait_handlers_started(IN_FLIGHT)
    child.signal(signal.SIGTERM)
    child.wait_for_event("shutdown.draining")
    second_sent = child.signal(signal.SIGTERM)
    code, ended = child.exit()
    assert code == 0, (child.events, child.other_lines)
    assert ended - second_sent < 2.0  # no drain left, no wait for the handlers
    # Issue 27, defect 5: given up on, left to lapse, never released while they exist.
    assert_left_to_lapse(child.report(), {e["message_id"] for e in started})


# Issue 12, defect 6: once the event loop had closed its signal handlers, a second SIGTERM
# during the final teardown killed the exiting process: 143 instead of 0.
def test_a_signal_during_the_final_teardown_does_not_change_the_exit_status(
    spawn: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    go_on = tmp_path / "go-on"
    child = spawn("--grace-s", "5", SHUTDOWN_APP_MESSAGES="0", SHUTDOWN_APP_EXIT_WAIT=str(go_on))
    child.wait_for_event("worker.started")
    child.signal(signal.SIGTERM)
    child.wait_for_event("app.exiting")  # main() has returned: the interpreter is exiting
    child.signal(signal.SIGTERM)
    child.signal(signal.SIGINT)
    go_on.touch()
    code, _ = child.exit()
    assert code == 0, (child.events, child.other_lines)
    assert child.other_lines == []


# Issue 12, defect 5: `sys.exit()` in a synchronous handler ended `lease-worker run` with
# status 0, stranding every message in flight.
def test_sys_exit_in_a_sync_handler_fails_its_message_and_the_worker_goes_on(
    spawn: Callable[..., WorkerProcess],
) -> None:
    child = spawn(
        "--grace-s",
        # Issue 27, defect 4: the poll in flight at the signal is waited for within the
        # grace; it must end before the poison's 5 s backoff does, or it takes it again.
        "1",
        "--max-in-flight",
        "2",
        SHUTDOWN_APP_SYNC="1",
        SHUTDOWN_APP_POISON="1",
        SHUTDOWN_APP_ON_ERROR="backoff",  # back after 5 s: not again before the SIGTERM
        SHUTDOWN_APP_MESSAGES="4",
        SHUTDOWN_APP_MEDIUM="4",
        SHUTDOWN_APP_MEDIUM_S="0.2",
    )
    poisoned = child.wait_for_event("app.handler_started", index=0)
    failed = child.wait_for_event("handler.failed")
    assert failed["message_id"] == poisoned["message_id"]
    assert "SystemExit" in failed["exception"]
    for index in (1, 2, 3):  # the others, received after the poison, are handled
        child.wait_for_event("app.handler_finished", index=index)
    child.signal(signal.SIGTERM)
    code, _ = child.exit()
    assert code == 0, (child.events, child.other_lines)
    report = child.report()
    assert report["queue"] == {"visible": 0, "in_flight": 1, "delayed": 0}
    message = report["messages"][poisoned["message_id"]]
    assert message["receive_count"] == 1
    assert message["visible_at"] > report["now"]  # released with the backoff's 5 s


# Issue 12, defect 5: a background task raising ended the worker without releasing anything.
def test_a_crashing_background_task_releases_what_is_held_and_exits_1(
    spawn: Callable[..., WorkerProcess],
) -> None:
    flush_s = 2.0
    child = spawn(
        "--grace-s",
        "60",
        "--max-in-flight",
        str(IN_FLIGHT),
        SHUTDOWN_APP_CRASH_AFTER=str(IN_FLIGHT),
        SHUTDOWN_APP_FLUSH_S=str(flush_s),
        SHUTDOWN_APP_MESSAGES=str(MESSAGES),
        SHUTDOWN_APP_MEDIUM="0",
    )
    started = child.wait_handlers_started(IN_FLIGHT)
    crashed = child.wait_for_event("worker.crashed")
    code, _ = child.exit()
    assert code == 1
    assert crashed["task"] == "background task crash"
    assert crashed["error"] == "RuntimeError"
    assert "Traceback" in crashed["exception"]
    # The last line is a JSON record like every other (issue 29: it was plain text).
    assert child.other_lines == []
    [failed] = [e for e in child.events if e["event"] == "worker.failed"]
    assert failed["level"] == "error"
    assert failed["error"] == "background task crash raised RuntimeError"
    # No drain (60 s): released at once, within the flush timeout of the crash.
    releasing = child.events[index_of(child.events, "shutdown.releasing")]
    assert seconds_between(crashed, releasing) < flush_s
    report = child.report()
    assert report["queue"] == {"visible": MESSAGES, "in_flight": 0, "delayed": 0}
    assert_released_at_once(report, {e["message_id"] for e in started})


# Issue 12, defect 15: an unreachable queue service at start-up ended the worker at the first
# try with a 114-line traceback. (A refused connection is found before the first call, by
# worker.cli.reach: tests/cli/test_startup_mistakes.py.)
def test_an_unreachable_queue_service_at_start_up_is_retried_then_one_line_and_exit_1(
    spawn: Callable[..., WorkerProcess],
) -> None:
    call_timeout_s = 0.25  # start-up gives up after 12 of them: 3 s
    with socket.socket() as silent:  # a port that accepts connections and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]
        child = spawn(
            "--backend",
            "sqs",
            "--region",
            "us-east-1",
            "--endpoint-url",
            f"http://127.0.0.1:{port}",
            "--queue-url",
            f"{QUEUE}=http://127.0.0.1:{port}/000000000000/{QUEUE}",
            SHUTDOWN_APP_MESSAGES="0",
            SHUTDOWN_APP_CREATE="0",
            SHUTDOWN_APP_CALL_TIMEOUT_S=str(call_timeout_s),
            AWS_ACCESS_KEY_ID="testing",
            AWS_SECRET_ACCESS_KEY="testing",
            AWS_CONFIG_FILE=os.devnull,
            AWS_SHARED_CREDENTIALS_FILE=os.devnull,
        )
        started = time.monotonic()
        code, ended = child.exit()
    assert code == 1
    assert ended - started < 12 * call_timeout_s + 5  # the bound, plus start-up itself
    retries = [e for e in child.events if e["event"] == "queue.check_failed"]
    assert len(retries) >= 2
    assert [e["attempt"] for e in retries] == list(range(1, len(retries) + 1))
    assert child.other_lines == []
    [failed] = [e for e in child.events if e["event"] == "worker.failed"]
    line = failed["error"]
    assert line.startswith(f"queue {QUEUE!r}: no answer from the queue ")
    assert f"after {len(retries) + 1} attempts" in line
