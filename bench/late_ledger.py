"""What bench/late_receives.py measured, read back and judged: the runs its handlers wrote
(bench/apps/late_app.py's `effects.txt`), the receives the service answered, and the counts.

The rules, on one clock (CLOCK_MONOTONIC: `time.monotonic()` in every process):
- A *run* is one handler call: START, then EFFECT (the side effect, with whether
  `ensure_held()` passed just before) and END, matched by process, message and receive count.
- A *receive* is one hand-out of a message by the service. Those of the worker behind the
  proxy are the ReceiveMessage answers the proxy read from the service (at once, before it
  held them), timed when it read them; those of a consumer without a proxy are its runs'
  STARTs, a little after the hand-out (never before it).
- An *overlap* is two runs of one message from different receives whose times intersect
  (a run with no END runs on to the end of the scenario).
- A side effect *after a lapse* is an EFFECT whose `ensure_held()` passed although the
  service had by then handed the message out again: more receives of it come before the
  effect than its own receive count. A receive timed late (a START) can only make this
  count fewer, never more, so every one counted is real.
- A message is *lost* when no run of it ended well and it is neither in the queue nor in
  the DLQ at the end.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Receive", "Run", "Tally", "after_lapse", "lost", "overlaps", "read_runs", "tally"]


@dataclass(slots=True)
class Run:
    """One handler call, as bench/apps/late_app.py wrote it."""

    process: str
    pid: int
    message_id: str
    receive_count: int
    started: float
    effect_at: float | None = None
    #: Whether `ensure_held()` passed just before the side effect (None: no effect made).
    held: bool | None = None
    ended: float | None = None
    #: "ok", or the type of the exception the handler ended with (None: no END).
    outcome: str | None = None

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"

    def show(self) -> str:
        effect = "no effect" if self.effect_at is None else f"effect {self.effect_at:.3f}"
        fence = "" if self.held is None else (" (held)" if self.held else " (refused)")
        return (
            f"{self.process} pid {self.pid} {self.message_id} receive {self.receive_count}: "
            f"{self.started:.3f}-{self.ended if self.ended is None else f'{self.ended:.3f}'} "
            f"{effect}{fence}, {self.outcome}"
        )


@dataclass(frozen=True, slots=True)
class Receive:
    """The service handed `message_id` out to `process` at `at` (or a little before)."""

    message_id: str
    process: str
    at: float


def read_runs(path: Path) -> list[Run]:
    """Every run in the effects file at `path` (none if there is no file)."""
    runs: dict[tuple[int, str, int], Run] = {}
    if not path.exists():
        return []
    for line in path.read_text().splitlines():
        kind, process, pid, message_id, count, at, *extra = line.split()
        key = (int(pid), message_id, int(count))
        if kind == "START":
            runs[key] = Run(process, int(pid), message_id, int(count), float(at))
        elif key in runs and kind == "EFFECT":
            runs[key].effect_at, runs[key].held = float(at), extra == ["held"]
        elif key in runs and kind == "END":
            runs[key].ended, runs[key].outcome = float(at), extra[0] if extra else "?"
    return list(runs.values())


def overlaps(runs: Sequence[Run]) -> list[tuple[Run, Run]]:
    """Pairs of runs of one message, from different receives, at the same time."""
    by_message: dict[str, list[Run]] = defaultdict(list)
    for run in runs:
        by_message[run.message_id].append(run)
    found = []
    for same in by_message.values():
        same.sort(key=lambda run: run.started)
        for i, first in enumerate(same):
            first_end = math.inf if first.ended is None else first.ended
            for second in same[i + 1 :]:
                other = (second.pid, second.receive_count) != (first.pid, first.receive_count)
                if other and second.started < first_end:
                    found.append((first, second))
    return found


def after_lapse(runs: Iterable[Run], receives: Iterable[Receive]) -> list[Run]:
    """The runs whose side effect passed `ensure_held()` after the service had handed their
    message out again."""
    times: dict[str, list[float]] = defaultdict(list)
    for receive in receives:
        times[receive.message_id].append(receive.at)
    return [run for run in runs if _lapsed_at_effect(run, times[run.message_id])]


def _lapsed_at_effect(run: Run, receive_times: list[float]) -> bool:
    effect_at = run.effect_at
    if not run.held or effect_at is None:
        return False
    return sum(1 for at in receive_times if at < effect_at) > run.receive_count


def lost(sent: Iterable[str], runs: Iterable[Run], left: Iterable[str]) -> list[str]:
    """The messages sent that no run handled well and that are not `left` (in the queue or
    its DLQ at the end)."""
    handled = {run.message_id for run in runs if run.ok}
    kept = set(left)
    return [message for message in sent if message not in handled and message not in kept]


@dataclass(frozen=True, slots=True)
class Tally:
    """One scenario's counts."""

    #: Runs per process.
    runs: dict[str, int]
    #: Messages that a run handled well (its handler returned).
    handled: int
    #: Side effects made with `ensure_held()` passed (two for one message: a duplicate).
    effects: int
    overlaps: int
    after_lapse: int
    refused: int
    dead: int
    lost: int


def tally(
    runs: Sequence[Run],
    receives: Sequence[Receive],
    sent: Sequence[str],
    in_queue: Sequence[str],
    in_dlq: Sequence[str],
) -> Tally:
    per_process: dict[str, int] = defaultdict(int)
    for run in runs:
        per_process[run.process] += 1
    return Tally(
        runs=dict(per_process),
        handled=len({run.message_id for run in runs if run.ok}),
        effects=sum(1 for run in runs if run.held),
        overlaps=len(overlaps(runs)),
        after_lapse=len(after_lapse(runs, receives)),
        refused=sum(1 for run in runs if run.held is False),
        dead=len(in_dlq),
        lost=len(lost(sent, runs, [*in_queue, *in_dlq])),
    )
