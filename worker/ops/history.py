"""The console's memory of the last minutes: cumulative counters per queue, sampled at a
fixed interval into a ring buffer. Pure: the caller passes the time and the counters.

Counters, not rates: the page computes rates from neighbouring points, so a point that
is missing (a sample skipped while the loop was blocked) costs resolution, not accuracy.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from worker.runtime.metrics import Metrics

__all__ = ["Counts", "History", "Point", "read_counts"]

#: queue -> counter name ("received", or an outcome) -> cumulative value.
Counts = Mapping[str, Mapping[str, float]]


@dataclass(frozen=True, slots=True)
class Point:
    #: Wall-clock time, epoch seconds.
    at: float
    counts: Counts


class History:
    def __init__(self, *, interval_s: float = 2.0, span_s: float = 600.0) -> None:
        if not 0 < interval_s <= span_s:
            raise ValueError(f"interval_s={interval_s!r}: must be above 0 and at most span_s")
        self.interval_s = interval_s
        self._points: deque[Point] = deque(maxlen=int(span_s // interval_s) + 1)

    def add(self, at: float, counts: Counts) -> None:
        self._points.append(Point(at, {queue: dict(c) for queue, c in counts.items()}))

    def points(self) -> list[Point]:
        return list(self._points)


def read_counts(metrics: Metrics, queues: Iterable[str]) -> Counts:
    """Each queue's messages received and handled by outcome, from those two counters only
    (not a whole registry's collection, which would also compute the scrape-time gauges)."""
    wanted = set(queues)
    counts: dict[str, dict[str, float]] = {queue: {} for queue in wanted}
    for family in metrics.received.collect():
        for sample in family.samples:
            if sample.name.endswith("_total") and sample.labels["queue"] in wanted:
                counts[sample.labels["queue"]]["received"] = sample.value
    for family in metrics.handled.collect():
        for sample in family.samples:
            if sample.name.endswith("_total") and sample.labels["queue"] in wanted:
                counts[sample.labels["queue"]][sample.labels["outcome"]] = sample.value
    return counts
