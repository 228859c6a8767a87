"""The JSON log lines of a process under test, read on a thread so that waits are bounded.

`JsonLog(proc, wait_s)` reads `proc.stderr` line by line: JSON objects become events, other
lines (a one-line error, a child's own message) are kept apart. `next(matches, what)` returns
the next event that matches, failing the test if the process ends or `wait_s` passes first.
"""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

Event = dict[str, Any]


class JsonLog:
    def __init__(self, proc: subprocess.Popen[str], wait_s: float) -> None:
        self.proc = proc
        self.wait_s = wait_s
        #: Every event taken from the log so far, in order.
        self.events: list[Event] = []
        self.other_lines: list[str] = []
        self._lines: queue.Queue[Event | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            try:
                self._lines.put(json.loads(line))
            except json.JSONDecodeError:
                self.other_lines.append(line.rstrip("\n"))
        self._lines.put(None)

    def next(self, matches: Callable[[Event], bool], what: str) -> Event:
        """The next event that `matches`; fails after `wait_s` or when the log ends."""
        deadline = time.monotonic() + self.wait_s
        while True:
            try:
                event = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                pytest.fail(f"no {what} within {self.wait_s} s; {self.recent()}")
            if event is None:
                pytest.fail(f"the process ended before {what}; {self.recent()}")
            self.events.append(event)
            if matches(event):
                return event

    def drain(self) -> None:
        """After the process exited: take the rest of the log."""
        self._reader.join(timeout=self.wait_s)
        while (event := self._lines.get_nowait()) is not None:
            self.events.append(event)

    def recent(self) -> str:
        return f"last events {self.events[-8:]}, other lines {self.other_lines[-10:]}"
