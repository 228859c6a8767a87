"""`--processes N`: real child processes, real signals.

The parent's JSON log lines are read on a thread, so every wait for one is bounded by
`WAIT_S`: a parent that hangs fails the test instead of blocking it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from tests.json_log import Event, JsonLog
from worker.cli.processes import _Fleet, restart_pause

ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 30.0


class Parent:
    """`lease-worker run --processes 2` on an idle app, its JSON log lines on stderr."""

    def __init__(self, *args: str, own_session: bool = False) -> None:
        self.proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "worker", "run", "tests.apps.idle_app:app"),
                *("--processes", "2", "--log-format", "json", "--grace-s", "5", *args),
            ],
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            start_new_session=own_session,
        )
        self.log = JsonLog(self.proc, WAIT_S)
        self.seen = self.log.events
        self.other_lines = self.log.other_lines  # a child's own one-line error

    def until(self, name: str, where: Callable[[Event], bool] = lambda _: True) -> Event:
        """The next event called `name` that matches `where`; fails after WAIT_S."""
        return self.log.next(lambda event: event.get("event") == name and where(event), repr(name))

    def exit(self) -> int:
        """Wait for the exit and the end of its log; its status."""
        code = self.proc.wait(timeout=WAIT_S)
        self.log.drain()
        return code

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=WAIT_S)


def index_is(index: int) -> Callable[[Event], bool]:
    return lambda event: event.get("index") == index


def test_restart_pause_doubles_while_a_child_dies_young_and_resets_after_a_long_life() -> None:
    pauses = [restart_pause(None, 0.5)]
    for _ in range(6):
        pauses.append(restart_pause(pauses[-1], 59.0))
    assert pauses == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    assert restart_pause(30.0, 61.0) == 1.0


@pytest.mark.process
def test_children_are_restarted_after_a_crash_and_stop_on_sigterm() -> None:
    parent = Parent()
    try:
        pids = [parent.until("process.started")["pid"] for _ in range(2)]
        for _ in range(2):
            parent.until("worker.started")
        os.kill(pids[0], signal.SIGKILL)
        died = parent.until("process.died")
        assert died["pid"] == pids[0] and died["status"] == 128 + signal.SIGKILL
        assert died["restart_in_s"] == 1.0
        restarted = parent.until("process.started")
        assert restarted["pid"] not in pids and restarted["index"] == died["index"]
        parent.until("worker.started")
        parent.proc.send_signal(signal.SIGTERM)
        exits = [parent.until("process.exited") for _ in range(2)]
        assert sorted(e["status"] for e in exits) == [0, 0]
        assert parent.exit() == 0
    finally:
        parent.stop()


def _ops_ports() -> tuple[socket.socket, int]:
    """A socket listening on port P, with P + 1 free: child 0 (ops listener on P) cannot start,
    child 1 (on P + 1) can."""
    for _ in range(20):
        taken = socket.socket()
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port: int = taken.getsockname()[1]
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port + 1))
            except OSError:
                taken.close()
                continue
        return taken, port
    raise AssertionError("no port P with P + 1 free")


@pytest.mark.process
def test_a_crash_looping_child_does_not_hold_up_the_restart_of_another() -> None:
    # Once, one backoff was shared by all children and slept inside the reaping loop: while
    # the pause of a child that kept dying ran, no other child was reaped or restarted (and
    # the next one to die inherited the grown pause).
    taken, port = _ops_ports()
    parent = Parent("--ops-port", str(port))
    try:
        pids = {e["index"]: e["pid"] for e in (parent.until("process.started") for _ in "01")}
        parent.until("worker.started")  # child 1's: child 0 dies of its taken port
        # Child 0 keeps dying at start-up: its pauses grow 1, 2, 4 s.
        parent.until("process.died", lambda e: e["index"] == 0 and e["restart_in_s"] >= 4)
        os.kill(pids[1], signal.SIGKILL)
        killed = time.monotonic()
        died = parent.until("process.died", index_is(1))
        restarted = parent.until("process.started", index_is(1))
        back_after_s = time.monotonic() - killed
        assert 1.0 <= back_after_s < 2.5, back_after_s
        assert died["pid"] == pids[1] and died["status"] == 128 + signal.SIGKILL
        assert died["restart_in_s"] == 1.0  # its own first pause, not child 0's
        assert restarted["pid"] != pids[1]
        parent.until("worker.started")
        since_kill = parent.seen[parent.seen.index(died) :]
        assert [e for e in since_kill if e["event"] == "process.started"] == [restarted]
        # Child 0's restart is still pending: a signal cancels it, child 1 drains, exit 0.
        parent.proc.send_signal(signal.SIGTERM)
        assert parent.exit() == 0
        after_signal = parent.seen[parent.seen.index(restarted) + 1 :]
        assert [e["event"] for e in after_signal if e["event"].startswith("process.")] == [
            "process.exited"
        ]
    finally:
        parent.stop()
        taken.close()


@pytest.mark.process
def test_a_bad_app_is_one_error_before_any_child_starts() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "worker", "run", "nomodule:app", "--processes", "3"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert (
        done.stderr.strip() == "lease-worker: error: APP='nomodule:app': cannot import 'nomodule'"
    )


@pytest.mark.process
def test_a_signal_to_the_whole_process_group_reaches_each_child_once() -> None:
    # Ctrl-C in a terminal and systemd signal the whole group; a child that got the signal
    # twice (directly and forwarded) would take it as a second signal and cut its drain.
    parent = Parent(own_session=True)
    try:
        for _ in range(2):
            parent.until("worker.started")
        os.killpg(parent.proc.pid, signal.SIGINT)
        assert parent.exit() == 0
    finally:
        parent.stop()
    assert [e["event"] for e in parent.seen].count("signal.received") == 2


def test_a_child_that_cannot_be_started_is_retried_after_its_pause(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Out of processes or memory, Popen raises: once that ended the parent, its other
    # children left running unwatched.
    def refuse(*args: object, **kwargs: object) -> None:
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(subprocess, "Popen", refuse)
    fleet = _Fleet(["run", "tests.apps.idle_app:app"], 1, None)
    [child] = fleet._children
    with capture_logs() as logs:
        fleet._start(child)
        fleet._start(child)
    assert child.process is None and child.pause_s == 2.0 and child.restart_at is not None
    assert [(e["event"], e["restart_in_s"]) for e in logs] == [
        ("process.start_failed", 1.0),
        ("process.start_failed", 2.0),
    ]
