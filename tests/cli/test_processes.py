"""`--processes N`: real child processes, real signals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.process


def _events(stream: IO[str]) -> Iterator[dict[str, Any]]:
    for line in stream:
        try:
            yield json.loads(line)
        except json.JSONDecodeError:
            continue


def _until(
    events: Iterator[dict[str, Any]], name: str, seen: list[dict[str, Any]]
) -> dict[str, Any]:
    for event in events:
        seen.append(event)
        if event.get("event") == name:
            return event
    raise AssertionError(f"the process ended before {name!r}; saw {seen[-5:]}")


def _parent(*, own_session: bool = False) -> subprocess.Popen[str]:
    """`lease-worker run --processes 2` on an idle app, its JSON log lines on stderr."""
    return subprocess.Popen(
        [
            *(sys.executable, "-m", "worker", "run", "tests.apps.idle_app:app"),
            *("--processes", "2", "--log-format", "json", "--grace-s", "5"),
        ],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        start_new_session=own_session,
    )


def test_children_are_restarted_after_a_crash_and_stop_on_sigterm() -> None:
    parent = _parent()
    assert parent.stderr is not None
    seen: list[dict[str, Any]] = []
    events = _events(parent.stderr)
    try:
        pids = [_until(events, "process.started", seen)["pid"] for _ in range(2)]
        for _ in range(2):
            _until(events, "worker.started", seen)
        os.kill(pids[0], signal.SIGKILL)
        died = _until(events, "process.died", seen)
        assert died["pid"] == pids[0] and died["status"] == 128 + signal.SIGKILL
        restarted = _until(events, "process.started", seen)
        assert restarted["pid"] not in pids and restarted["index"] == died["index"]
        _until(events, "worker.started", seen)
        parent.send_signal(signal.SIGTERM)
        exits = [_until(events, "process.exited", seen) for _ in range(2)]
        assert sorted(e["status"] for e in exits) == [0, 0]
        assert parent.wait(timeout=30) == 0
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


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


def test_a_signal_to_the_whole_process_group_reaches_each_child_once() -> None:
    # Ctrl-C in a terminal and systemd signal the whole group; a child that got the signal
    # twice (directly and forwarded) would take it as a second signal and cut its drain.
    parent = _parent(own_session=True)
    assert parent.stderr is not None
    seen: list[dict[str, Any]] = []
    events = _events(parent.stderr)
    try:
        for _ in range(2):
            _until(events, "worker.started", seen)
        os.killpg(parent.pid, signal.SIGINT)
        assert parent.wait(timeout=30) == 0
        seen.extend(events)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
    assert [e["event"] for e in seen].count("signal.received") == 2
