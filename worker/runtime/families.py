"""Labelled metric families kept as plain numbers, turned into Prometheus samples at scrape.

prometheus-client's own metrics take a lock and two method calls for every `inc()` and a
bucket search under the lock for every `observe()`; the runtime records several per message,
all from the event loop's thread, so here a child is a slotted number that the loop adds to,
and the family is a `Collector` that builds the samples when Prometheus asks (rare, beside
the messages). Same names, labels, types and sample values as prometheus-client's
`Counter`, `Gauge` and `Histogram`, without their `_created` samples.

Rules this module keeps:
- Children are looked up once per label values and kept; `labels()` is a dict lookup.
- Writes come from one thread (the loop's). A scrape from another thread may see a
  histogram's buckets one observation apart from its count: the same as a scrape between
  two observations.
- A counter only goes up: `inc()` with a negative amount is a `ValueError`.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar, Generic, TypeVar

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

__all__ = ["CounterFamily", "GaugeFamily", "HistogramFamily"]


class CounterChild:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError(f"a counter only goes up (inc({amount!r}))")
        self.value += amount


class GaugeChild:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount

    def dec(self, amount: float = 1.0) -> None:
        self.value -= amount

    def set(self, value: float) -> None:
        self.value = float(value)


class HistogramChild:
    __slots__ = ("_bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self._bounds = bounds
        #: Observations per bucket, not cumulative; the last is +Inf's own.
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.sum += value
        if value != value:  # NaN: in no bucket, as prometheus-client does
            return
        # The first upper bound >= value: Prometheus' `le` buckets.
        self.counts[bisect_left(self._bounds, value)] += 1


C = TypeVar("C", CounterChild, GaugeChild, HistogramChild)


class _Family(Collector, Generic[C]):
    #: prometheus-client's family type, built at each scrape.
    _metric: ClassVar[type[Any]]

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str]) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        #: One child per series (label values as text), for the scrape.
        self._children: dict[tuple[str, ...], C] = {}
        #: The same children by the values as given (the hot path's lookup).
        self._lookup: dict[tuple[object, ...], C] = {}

    def labels(self, *values: str) -> C:
        child = self._lookup.get(values)
        if child is None:
            if len(values) != len(self.labelnames):
                raise ValueError(f"{self.name}: labels {self.labelnames}, given {values!r}")
            # As prometheus-client does: a label value is its str() (an int error code,
            # say), and 503 and "503" are one series.
            key = tuple(str(value) for value in values)
            child = self._children.get(key)
            if child is None:
                child = self._children[key] = self._new_child()
            self._lookup[values] = child
        return child

    def _new_child(self) -> C:
        raise NotImplementedError

    def _sample(self, family: Any, values: list[str], child: C) -> None:
        """Add `child`'s samples to `family` (an instance of `_metric`)."""
        raise NotImplementedError

    def describe(self) -> Iterator[Metric]:
        yield self._metric(self.name, self.documentation, labels=self.labelnames)

    def collect(self) -> Iterator[Metric]:
        family = self._metric(self.name, self.documentation, labels=self.labelnames)
        for values, child in list(self._children.items()):
            self._sample(family, list(values), child)
        yield family


V = TypeVar("V", CounterChild, GaugeChild)


class _ValueFamily(_Family[V]):
    """A family whose children are one number each (counters, gauges)."""

    def _sample(self, family: Any, values: list[str], child: V) -> None:
        family.add_metric(values, child.value)


class CounterFamily(_ValueFamily[CounterChild]):
    _metric = CounterMetricFamily

    def _new_child(self) -> CounterChild:
        return CounterChild()


class GaugeFamily(_ValueFamily[GaugeChild]):
    _metric = GaugeMetricFamily

    def _new_child(self) -> GaugeChild:
        return GaugeChild()


class HistogramFamily(_Family[HistogramChild]):
    _metric = HistogramMetricFamily

    def __init__(
        self, name: str, documentation: str, labelnames: Sequence[str], buckets: Sequence[float]
    ) -> None:
        super().__init__(name, documentation, labelnames)
        bounds = tuple(float(bound) for bound in buckets if bound != math.inf)
        if list(bounds) != sorted(set(bounds)):
            raise ValueError(f"{name}: buckets must increase, given {buckets!r}")
        self.bounds = bounds

    def _new_child(self) -> HistogramChild:
        return HistogramChild(self.bounds)

    def _sample(self, family: Any, values: list[str], child: HistogramChild) -> None:
        counts, total = list(child.counts), child.sum
        cumulative, buckets = 0, []
        for bound, count in zip((*self.bounds, math.inf), counts, strict=True):
            cumulative += count
            buckets.append((floatToGoString(bound), float(cumulative)))  # type: ignore[no-untyped-call]
        family.add_metric(values, buckets, total)
