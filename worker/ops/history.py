"""The console's memory of the last minutes: cumulative counters per queue, sampled at a
fixed interval into a ring buffer. Pure: the caller passes the time and the counters.

Counters, not rates: the page computes rates from neighbouring points, so a point that
is missing (a sample skipped while the loop was blocked) costs resolution, not accuracy.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from prometheus_client import CollectorRegistry

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


def read_counts(registry: CollectorRegistry, prefix: str, queues: Iterable[str]) -> Counts:
    """One pass over the registry: each queue's messages received and handled by outcome."""
    wanted = set(queues)
    counts: dict[str, dict[str, float]] = {queue: {} for queue in wanted}
    received = f"{prefix}_messages_received_total"
    handled = f"{prefix}_messages_handled_total"
    for family in registry.collect():
        if family.name not in (received[: -len("_total")], handled[: -len("_total")]):
            continue
        for sample in family.samples:
            queue = sample.labels.get("queue")
            if queue not in wanted:
                continue
            if sample.name == received:
                counts[queue]["received"] = sample.value
            elif sample.name == handled:
                counts[queue][sample.labels["outcome"]] = sample.value
    return counts
