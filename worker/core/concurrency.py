"""An adaptive concurrency limit: how many handlers of a queue to run at once, found from their
latency and errors.

The model is TCP Vegas's, as the concurrency-limits libraries use it: with `running`
handlers at once (on average over the window) and a handler taking `rtt` seconds where it
takes `rtt_min` when nothing waits downstream, `running * (1 - rtt_min / rtt)` of them are
waiting in some queue of the downstream's rather than being served. Once per window (as many
completions as the limit), the limit grows by one while fewer than `alpha` wait, shrinks by
one when more than `beta` do, and is cut by `backoff` (multiplicative) when a handler fails,
times out or its lease is lost in the window: an overloaded downstream that answers with
errors backs the worker off at once, a slow one gradually. It grows only while the limit is
in use (at least half of it running), so that an idle spell does not lift it to the maximum.

`rtt_min` is the smallest window average seen since the last probe. Every `probe_every`
windows, one window runs `beta + 1` below the limit: what it measures becomes `rtt_min` (a
limit that settled with at most `beta` waiting is then under what the downstream serves
without queueing), and the limit goes back to where it was. A downstream that became slower
for good is so not held to an old ideal for ever, and a baseline that only ever moved up
(measured under load, as TCP Vegas' does after a reset) cannot lift the limit step by step
without end.

Pure: the caller passes the durations it measured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

__all__ = ["ConcurrencyLimit"]


@dataclass(slots=True)
class ConcurrencyLimit:
    """The limit, between `smallest` and `largest` (the queue's `max_in_flight`)."""

    largest: int
    smallest: int = 1
    initial: int | None = None
    #: Fewer than this many waiting downstream: grow by one.
    alpha: float = 3.0
    #: More than this many waiting: shrink by one.
    beta: float = 6.0
    #: The factor applied to the limit after a window with a failure.
    backoff: float = 0.9
    #: Windows between two probes of the downstream's unloaded latency.
    probe_every: int = 50
    limit: float = field(init=False)
    rtt_min: float = field(init=False, default=math.inf)
    _samples: int = field(init=False, default=0)
    _total_s: float = field(init=False, default=0.0)
    _failed: bool = field(init=False, default=False)
    _peak_running: int = field(init=False, default=0)
    _running_total: int = field(init=False, default=0)
    _windows: int = field(init=False, default=0)
    #: The limit to go back to after a probe window (None: not probing).
    _resume: float | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        if self.smallest < 1 or self.largest < self.smallest:
            raise ValueError(
                f"smallest={self.smallest}, largest={self.largest}: need 1 <= smallest <= largest"
            )
        if not 0 < self.backoff < 1:
            raise ValueError(f"backoff={self.backoff!r}: must be between 0 and 1")
        if not 0 <= self.alpha <= self.beta:
            raise ValueError(f"alpha={self.alpha}, beta={self.beta}: need 0 <= alpha <= beta")
        if self.probe_every < 2:
            raise ValueError(f"probe_every={self.probe_every!r}: must be >= 2")
        start = self.initial if self.initial is not None else min(self.largest, 10)
        self.limit = float(min(self.largest, max(self.smallest, start)))

    @property
    def probing(self) -> bool:
        """This window measures the unloaded latency, below the limit."""
        return self._resume is not None

    @property
    def current(self) -> int:
        """The limit to apply now."""
        return int(self.limit)

    def record(self, duration_s: float, *, failed: bool, running: int) -> bool:
        """One handler finished after `duration_s`, `running` being how many ran then
        (itself included). Returns True when the limit changed."""
        self._samples += 1
        self._total_s += max(duration_s, 0.0)
        self._failed = self._failed or failed
        self._peak_running = max(self._peak_running, running)
        self._running_total += running
        if self._samples < max(1, self.current):
            return False
        before = self.current
        self._end_window()
        return self.current != before

    def _end_window(self) -> None:
        rtt = self._total_s / self._samples
        running = self._running_total / self._samples
        failed, peak = self._failed, self._peak_running
        self._samples, self._total_s, self._failed, self._peak_running = 0, 0.0, False, 0
        self._running_total = 0
        self._windows += 1
        if self._resume is not None:  # the probe window ended: its latency is the baseline
            if not failed and rtt > 0:
                self.rtt_min = rtt
            self.limit, self._resume = self._resume, None
        if failed:
            self.limit = max(float(self.smallest), self.limit * self.backoff)
        elif rtt > 0:
            self.rtt_min = min(self.rtt_min, rtt)
            waiting = running * (1 - self.rtt_min / rtt)
            if waiting > self.beta:
                self.limit = max(float(self.smallest), self.limit - 1)
            elif waiting < self.alpha and peak * 2 >= self.current:
                self.limit = min(float(self.largest), self.limit + 1)
        if self._windows % self.probe_every == 0 and self.current > self.smallest:
            self._resume = self.limit
            self.limit = max(float(self.smallest), float(self.current - math.ceil(self.beta) - 1))
