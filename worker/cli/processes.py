"""`--processes N`: several worker processes under one parent.

One Python process runs handlers on one core, and the SQS client's own CPU cost per call
counts at thousands of messages a second. The parent starts N children running the same
`lease-worker run` command, each a whole worker with its own leases, and:

- forwards SIGTERM and SIGINT to every child (each drains and releases on its own);
- restarts a child that dies unasked (crash, OOM kill) after a pause of its own: 1 s,
  doubling to 30 s while that child keeps dying within a minute of its start, back to 1 s
  once it lived longer. A pending restart is a deadline, not a sleep: the loop goes on
  reaping and restarting the other children, and a signal cancels it;
- exits once every child has exited after a signal: 0 if all exited 0, else the highest
  status (a child killed by a signal counts as 128 + its number).

Child i gets `LEASE_WORKER_PROCESS_INDEX=i` in its environment and, with `--ops-port P`,
its own ops listener on port P + i: one per child, not prometheus-client's multiprocess
mode, because health is per process (a child whose loop is blocked must fail its own
probe, which an aggregate would hide), and the scrape-time gauges (nearest deadline, settle
backlog) and the default registry's process collectors do not work in multiprocess mode.
Prometheus scrapes the N ports; in Kubernetes, prefer one process per pod.

The children are plain processes, not forks of this one, so nothing of the parent's state
is shared. They run `python -P -m worker`: without `-P`, `-m` would put the
current directory first on `sys.path`, and a user's own `worker.py` there would run instead
of lease-worker (`PYTHONSAFEPATH=1` would do the same, but would also reach every Python
process a handler starts).

The loop waits in `select` on the pipe that `signal.set_wakeup_fd` writes to, so SIGCHLD,
SIGTERM and SIGINT wake it at once, and otherwise until the next pending restart is due.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType

import structlog

__all__ = ["INDEX_VARIABLE", "restart_pause", "run_processes"]

#: The environment variable that tells a child its index, 0 to N - 1.
INDEX_VARIABLE = "LEASE_WORKER_PROCESS_INDEX"

_QUICK_DEATH_S = 60.0
_FIRST_PAUSE_S = 1.0
_LONGEST_PAUSE_S = 30.0


def restart_pause(previous_s: float | None, lived_s: float) -> float:
    """The pause before restarting a child that died after `lived_s`; `previous_s` is the
    pause before its current run (None if it never died)."""
    if previous_s is None or lived_s > _QUICK_DEATH_S:
        return _FIRST_PAUSE_S
    return min(previous_s * 2, _LONGEST_PAUSE_S)


@dataclass(slots=True)
class _Child:
    index: int
    process: subprocess.Popen[bytes] | None = None  # None: exited (restart pending or not)
    started: float = 0.0
    pause_s: float | None = None
    restart_at: float | None = None


class _Wakeup:
    """The read end of the pipe Python's C signal handler writes each signal's number to."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def wait(self, timeout_s: float | None) -> None:
        select.select([self._fd], [], [], timeout_s)
        try:
            while os.read(self._fd, 512):
                pass
        except BlockingIOError:
            pass


@contextmanager
def _signal_wakeup() -> Iterator[_Wakeup]:
    read_fd, write_fd = os.pipe()
    for fd in (read_fd, write_fd):
        os.set_blocking(fd, False)
    # Only a signal with a Python handler reaches the wakeup fd: SIGCHLD needs one.
    previous_handler = signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    previous_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    try:
        yield _Wakeup(read_fd)
    finally:
        signal.set_wakeup_fd(previous_fd)
        signal.signal(signal.SIGCHLD, previous_handler)
        os.close(read_fd)
        os.close(write_fd)


class _Fleet:
    def __init__(self, argv: Sequence[str], count: int, ops_port: int | None) -> None:
        self._argv = list(argv)
        self._ops_port = ops_port
        self._children = [_Child(index) for index in range(count)]
        self._stopping = False
        self._stop_signal = signal.SIGTERM
        self._worst = 0
        self._log = structlog.get_logger("lease_worker.processes")

    def _start(self, child: _Child) -> None:
        command = [sys.executable, "-P", "-m", "worker", *self._argv, "--processes", "1"]
        if self._ops_port is not None:
            command += ["--ops-port", str(self._ops_port + child.index)]
        # A session of its own: a signal to our process group (Ctrl-C, systemd) reaches the
        # child once, through us, not twice (a second signal would cut its drain short).
        env = {**os.environ, INDEX_VARIABLE: str(child.index)}
        child.restart_at = None
        try:
            process = subprocess.Popen(command, env=env, start_new_session=True)
        except OSError as error:  # out of processes or memory: try again later, like a crash
            pause_s = self._schedule_restart(child, lived_s=0.0)
            self._log.error(
                "process.start_failed", index=child.index, error=str(error), restart_in_s=pause_s
            )
            return
        child.process, child.started = process, time.monotonic()
        self._log.info("process.started", index=child.index, pid=process.pid)
        if self._stopping:
            # The signal came while Popen ran: the handler did not see this child yet.
            os.kill(process.pid, self._stop_signal)

    def signal_all(self, signum: int, frame: FrameType | None = None) -> None:
        self._stopping = True
        self._stop_signal = signal.Signals(signum)
        for child in self._children:
            if child.process is not None:
                # os.kill, not Popen.send_signal: its poll() would reap a child that just
                # died, here in the handler, and _reap would never see it go. Until _reap
                # waits for it the pid stays ours, so it cannot name another process.
                os.kill(child.process.pid, signum)

    def run(self, wakeup: _Wakeup) -> int:
        for child in self._children:
            if not self._stopping:
                self._start(child)
        while True:
            self._reap()
            self._restart_due()
            if not self._running():
                return self._worst
            wakeup.wait(self._next_restart_in())

    def _running(self) -> bool:
        return any(
            child.process is not None or (child.restart_at is not None and not self._stopping)
            for child in self._children
        )

    def _next_restart_in(self) -> float | None:
        due = [child.restart_at for child in self._children if child.restart_at is not None]
        return max(0.0, min(due) - time.monotonic()) if due else None

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:  # no child left at all
                return
            if pid == 0:
                return
            child = next((c for c in self._children if c.process and c.process.pid == pid), None)
            if child is not None:
                self._exited(child, status)

    def _exited(self, child: _Child, status: int) -> None:
        assert child.process is not None
        process, child.process = child.process, None
        process.returncode = os.waitstatus_to_exitcode(status)
        code = process.returncode if process.returncode >= 0 else 128 - process.returncode
        if self._stopping or code == 0:
            self._worst = max(self._worst, code)
            self._log.info("process.exited", index=child.index, pid=process.pid, status=code)
            return
        pause_s = self._schedule_restart(child, lived_s=time.monotonic() - child.started)
        self._log.warning(
            "process.died", index=child.index, pid=process.pid, status=code, restart_in_s=pause_s
        )

    def _schedule_restart(self, child: _Child, *, lived_s: float) -> float:
        child.pause_s = restart_pause(child.pause_s, lived_s)
        child.restart_at = time.monotonic() + child.pause_s
        return child.pause_s

    def _restart_due(self) -> None:
        now = time.monotonic()
        for child in self._children:
            if child.restart_at is None:
                continue
            if self._stopping:
                child.restart_at = None
            elif child.restart_at <= now:
                self._start(child)


def run_processes(argv: Sequence[str], count: int, ops_port: int | None) -> int:
    """Run `count` children of `lease-worker <argv>` until they have all exited."""
    fleet = _Fleet(argv, count, ops_port)
    with _signal_wakeup() as wakeup:
        signal.signal(signal.SIGTERM, fleet.signal_all)
        signal.signal(signal.SIGINT, fleet.signal_all)
        return fleet.run(wakeup)
