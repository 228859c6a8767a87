"""A worker application for the crash test, configured from `CRASH_APP_*` variables.

Run it as `python -m worker run tests.apps.crash_app:app --backend sqs --endpoint-url URL`.
It handles the queue `CRASH_APP_QUEUE`, whose bodies are `{"n": <number>}`. Each handler
appends a line when it starts and another when it has done its work (between
`CRASH_APP_MIN_WORK_S` and `CRASH_APP_MAX_WORK_S`, drawn from the message number and receive
count, so a rerun of the same delivery takes as long), and only then returns:

    start <n> <worker> <pid> <receive count> <started> - <message id>
    end <n> <worker> <pid> <receive count> <started> <ended> <message id>

to the file `CRASH_APP_OUT` (worker: `CRASH_APP_WORKER`, else the pid; times in Unix
seconds); `Records` reads them back. So a SIGKILL between the `end` line and the delete
leaves a completed run of a message that will be delivered, and handled, again: a duplicate,
which at-least-once allows; and a `start` with no `end` is a run that was cut short.

Each line is one `write` of a short line to a file opened with `O_APPEND`, unbuffered: on a
local file system such writes from several processes do not interleave, and a line written
is in the file even if the process is killed the next instant.
"""

from __future__ import annotations

import os
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

import anyio

from worker import Message, Worker, WorkerConfig


def _env(name: str, default: str) -> str:
    return os.environ.get("CRASH_APP_" + name, default)


QUEUE = _env("QUEUE", "crash-test")
OUT = _env("OUT", "")
WORKER = _env("WORKER", str(os.getpid()))
MIN_WORK_S = float(_env("MIN_WORK_S", "0.05"))
MAX_WORK_S = float(_env("MAX_WORK_S", "0.4"))

app = Worker(WorkerConfig(max_in_flight=10), name="crash-app")

__all__ = ["Records", "Run", "app"]

_out_fd: int | None = None


def _append(*fields: object) -> None:
    global _out_fd
    if _out_fd is None:
        _out_fd = os.open(OUT, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(_out_fd, (" ".join(map(str, fields)) + "\n").encode())


def work_s(n: int, receive_count: int) -> float:
    """How long the handler of delivery `receive_count` of message `n` works."""
    return random.Random(n * 1_000 + receive_count).uniform(MIN_WORK_S, MAX_WORK_S)


@app.handler(QUEUE)
async def handle(message: Message) -> None:
    n = int(message.body["n"])
    who = (n, WORKER, os.getpid(), message.receive_count)
    started = f"{time.time():.3f}"
    _append("start", *who, started, "-", message.message_id)
    await anyio.sleep(work_s(n, message.receive_count))
    _append("end", *who, started, f"{time.time():.3f}", message.message_id)


@dataclass(slots=True)
class Run:
    """One handler run, as the app wrote it: `ended` is None until (unless) it completed."""

    n: int
    worker: int
    pid: int
    receive_count: int
    started: float
    ended: float | None
    message_id: str

    @classmethod
    def parse(cls, line: bytes) -> Run:
        kind, n, worker, pid, count, started, ended, message_id = line.decode().split()
        assert kind == ("start" if ended == "-" else "end"), line
        end = None if ended == "-" else float(ended)
        return cls(int(n), int(worker), int(pid), int(count), float(started), end, message_id)

    @property
    def key(self) -> tuple[int, int, int]:
        return self.n, self.worker, self.receive_count

    def show(self) -> str:
        ended = "cut short" if self.ended is None else f"ended {self.ended:.3f}"
        return (
            f"worker {self.worker} (pid {self.pid}) receive {self.receive_count}: "
            f"started {self.started:.3f}, {ended}"
        )


@dataclass
class Records:
    """The lines the handlers appended, read incrementally: one `Run` per start."""

    path: Path
    runs: dict[tuple[int, int, int], Run] = field(default_factory=dict)
    _offset: int = 0
    _partial: bytes = b""

    def read(self) -> list[Run]:
        if self.path.exists():
            with self.path.open("rb") as file:
                file.seek(self._offset)
                chunk = file.read()
            self._offset += len(chunk)
            *complete, self._partial = (self._partial + chunk).split(b"\n")
            for run in map(Run.parse, complete):
                self.runs[run.key] = run  # an end replaces its start
        return list(self.runs.values())

    def completed(self) -> list[Run]:
        return [run for run in self.read() if run.ended is not None]

    def numbers(self) -> set[int]:
        return {run.n for run in self.completed()}

    def workers(self) -> set[int]:
        return {run.worker for run in self.completed()}
