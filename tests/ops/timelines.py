"""Failure timelines written as promtool's input series: what Prometheus would have scraped,
sample by sample, while the kubelet ran a pod's container through a failure.

A series is sampled every `step_s` seconds from 0; at each sample it has a value or none.
`Clock.values()` writes promtool's notation: the number, `stale` where a series ends
(Prometheus writes a stale marker when a target or one of its series goes away), `_` while
it stays absent.

The kubelet restarts a container that exits after a back-off of 10 s, doubled after each
exit and capped at 5 minutes (it resets only after 10 minutes of running, which no
timeline here reaches). While it waits, kube-state-metrics shows the container waiting
with reason CrashLoopBackOff; the pod keeps its address, so Prometheus keeps scraping it
and `up` reads 0.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

BACKOFF_FIRST_S = 10
BACKOFF_CAP_S = 300

#: A series' value at a time (seconds), or None where there is no series.
State = Callable[[float], float | None]


@dataclass(frozen=True)
class Run:
    """One start of a container: [start_s, end_s)."""

    start_s: float
    end_s: float

    def holds(self, t: float) -> bool:
        return self.start_s <= t < self.end_s


def crash_loop(start_s: float, run_s: Sequence[float], until_s: float) -> list[Run]:
    """A container that exits `run_s[n % len(run_s)]` seconds into its n-th start, restarted
    after the kubelet's back-off, for as long as a start begins before `until_s`; the first
    start at or after `until_s` runs on (the failure is over)."""
    runs: list[Run] = []
    t = start_s
    for n in itertools.count():
        if t >= until_s:
            runs.append(Run(t, float("inf")))
            return runs
        runs.append(Run(t, t + run_s[n % len(run_s)]))
        t = runs[-1].end_s + min(BACKOFF_FIRST_S * 2**n, BACKOFF_CAP_S)
    raise AssertionError("unreachable")


@dataclass(frozen=True)
class Pod:
    """A pod from `created_s` until `deleted_s`, its worker container running `runs`."""

    name: str
    instance: str
    created_s: float
    deleted_s: float
    runs: tuple[Run, ...]

    def exists(self, t: float) -> bool:
        return self.created_s <= t < self.deleted_s

    def running(self, t: float) -> bool:
        return self.exists(t) and any(run.holds(t) for run in self.runs)

    def up(self, t: float) -> float | None:
        """Prometheus' `up` for the pod's target: there while the pod is."""
        return (1.0 if self.running(t) else 0.0) if self.exists(t) else None

    def backing_off(self, t: float) -> float | None:
        """kube-state-metrics' waiting reason CrashLoopBackOff: a series only while the
        container waits to be restarted (its first start is ContainerCreating instead)."""
        started = [run for run in self.runs if run.start_s <= t]
        waiting = self.exists(t) and started and not self.running(t)
        return 1.0 if waiting else None

    def while_running(self, value: State) -> State:
        """A series the worker exports: scraped only while its container runs."""
        return lambda t: value(t) if self.running(t) else None


def steady(name: str, instance: str, created_s: float, deleted_s: float = float("inf")) -> Pod:
    """A pod whose worker starts at once and never exits."""
    return Pod(name, instance, created_s, deleted_s, (Run(created_s, float("inf")),))


def looping(
    name: str, instance: str, created_s: float, run_s: Sequence[float], until_s: float
) -> Pod:
    """A pod whose worker exits `run_s` into each start, restarted by the kubelet."""
    runs = tuple(crash_loop(created_s, run_s, until_s))
    return Pod(name, instance, created_s, float("inf"), runs)


def constant(value: float, since_s: float = 0, until_s: float = float("inf")) -> State:
    return lambda t: value if since_s <= t < until_s else None


def steps(*changes: tuple[float, float | None]) -> State:
    """A value that changes at given times: (from_s, value), ordered; none before the first."""

    def state(t: float) -> float | None:
        found: float | None = None
        for since_s, value in changes:
            if t >= since_s:
                found = value
        return found

    return state


def rising(per_s: float, since_s: float = 0, until_s: float = float("inf")) -> State:
    """A counter going up by `per_s` a second from `since_s`, flat after `until_s`."""
    return lambda t: per_s * (min(t, until_s) - since_s) if t >= since_s else 0.0


def either(*states: State) -> State:
    """The first state that has a value."""

    def state(t: float) -> float | None:
        for one in states:
            value = one(t)
            if value is not None:
                return value
        return None

    return state


@dataclass(frozen=True)
class Clock:
    """Samples every `step_s` seconds from 0 to `length_s` included."""

    step_s: int
    length_s: int

    @property
    def interval(self) -> str:
        return f"{self.step_s}s"

    def times(self) -> range:
        return range(0, self.length_s + 1, self.step_s)

    def values(self, state: State) -> str:
        out: list[str] = []
        present = False
        for t in self.times():
            value = state(t)
            if value is None:
                out.append("stale" if present else "_")
            else:
                out.append(f"{value:.12g}")
            present = value is not None
        return " ".join(out)
