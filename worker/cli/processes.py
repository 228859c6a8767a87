"""`--processes N`: several worker processes under one parent.

One Python process runs handlers on one core, and the SQS client's own CPU cost per call
counts at thousands of messages a second. The parent starts N children running the same
`lease-worker run` command, each a whole worker with its own leases, and:

- forwards SIGTERM and SIGINT to every child (each drains and releases on its own);
- restarts a child that dies unasked (crash, OOM kill), after a pause that doubles from 1 s
  to 30 s while children keep dying within a minute of their start;
- exits once every child has exited after a signal: 0 if all exited 0, else the highest
  status (a child killed by a signal counts as 128 + its number).

Child i serves metrics on the metrics port + i. The children are plain processes, not forks
of this one, so nothing of the parent's state is shared.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from types import FrameType

import structlog

__all__ = ["run_processes"]

_QUICK_DEATH_S = 60.0
_LONGEST_PAUSE_S = 30.0


class _Fleet:
    def __init__(self, argv: Sequence[str], count: int, metrics_port: int | None) -> None:
        self._argv = list(argv)
        self._metrics_port = metrics_port
        self._children: dict[int, tuple[subprocess.Popen[bytes], float]] = {}
        self._stopping = False
        self._pause = 1.0
        self._worst = 0
        self._log = structlog.get_logger("lease_worker.processes")
        for index in range(count):
            self._start(index)

    def _start(self, index: int) -> None:
        command = [sys.executable, "-m", "worker", *self._argv, "--processes", "1"]
        if self._metrics_port is not None:
            command += ["--metrics-port", str(self._metrics_port + index)]
        # A session of its own: a signal to our process group (Ctrl-C, systemd) reaches the
        # child once, through us, not twice (a second signal would cut its drain short).
        child = subprocess.Popen(command, start_new_session=True)
        self._children[index] = (child, time.monotonic())
        self._log.info("process.started", index=index, pid=child.pid)

    def signal_all(self, signum: int, frame: FrameType | None = None) -> None:
        self._stopping = True
        for child, _ in self._children.values():
            if child.poll() is None:
                child.send_signal(signum)

    def wait(self) -> int:
        while self._children:
            pid, status = os.wait()
            index = next((i for i, (c, _) in self._children.items() if c.pid == pid), None)
            if index is None:
                continue
            child, started = self._children.pop(index)
            child.returncode = os.waitstatus_to_exitcode(status)
            code = child.returncode if child.returncode >= 0 else 128 - child.returncode
            self._exited(index, pid, code, started)
        return self._worst

    def _exited(self, index: int, pid: int, code: int, started: float) -> None:
        if self._stopping or code == 0:
            self._worst = max(self._worst, code)
            self._log.info("process.exited", index=index, pid=pid, status=code)
            return
        lived = time.monotonic() - started
        self._pause = 1.0 if lived > _QUICK_DEATH_S else min(self._pause * 2, _LONGEST_PAUSE_S)
        self._log.warning(
            "process.died", index=index, pid=pid, status=code, restart_in_s=self._pause
        )
        time.sleep(self._pause)  # a signal during the pause still reaches the others
        if not self._stopping:
            self._start(index)


def run_processes(argv: Sequence[str], count: int, metrics_port: int | None) -> int:
    """Run `count` children of `lease-worker <argv>` until they have all exited."""
    fleet = _Fleet(argv, count, metrics_port)
    signal.signal(signal.SIGTERM, fleet.signal_all)
    signal.signal(signal.SIGINT, fleet.signal_all)
    return fleet.wait()
