"""`worker.runtime.families` exposes exactly what prometheus-client's own metrics would, for
the same updates (less the `_created` samples), and keeps a counter's rules."""

from __future__ import annotations

import math

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from worker.runtime.families import CounterFamily, GaugeFamily, HistogramFamily

BUCKETS = (0.01, 0.5, 1, 10, 43200)
#: On a bucket's bound, between bounds, below the first, above the last, zero.
VALUES = (0.01, 0.3, 0.5, 1.0, 7.0, 0.001, 50_000.0, 0.0, 10.0)


def _exposition(registry: CollectorRegistry) -> list[str]:
    text = generate_latest(registry).decode()
    return [line for line in text.splitlines() if "_created" not in line]


def test_the_same_samples_as_prometheus_client() -> None:
    theirs, ours = CollectorRegistry(), CollectorRegistry()
    counter = Counter("jobs", "Jobs.", ["queue", "outcome"], registry=theirs)
    gauge = Gauge("held", "Held.", ["queue"], registry=theirs)
    histogram = Histogram("seconds", "Seconds.", ["queue"], buckets=BUCKETS, registry=theirs)
    our_counter = CounterFamily("jobs", "Jobs.", ["queue", "outcome"])
    our_gauge = GaugeFamily("held", "Held.", ["queue"])
    our_histogram = HistogramFamily("seconds", "Seconds.", ["queue"], BUCKETS)
    for family in (our_counter, our_gauge, our_histogram):
        ours.register(family)
    for value in VALUES:
        counter.labels("a", "ok").inc(value)
        our_counter.labels("a", "ok").inc(value)
        histogram.labels("a").observe(value)
        our_histogram.labels("a").observe(value)
    counter.labels("b", "failed")  # declared at zero
    our_counter.labels("b", "failed")
    gauge.labels("a").inc(3)
    gauge.labels("a").dec()
    gauge.labels("b").set(7)
    our_gauge.labels("a").inc(3)
    our_gauge.labels("a").dec()
    our_gauge.labels("b").set(7)
    assert _exposition(ours) == _exposition(theirs)
    assert ours.get_sample_value("seconds_bucket", {"queue": "a", "le": "0.5"}) == 5.0
    assert ours.get_sample_value("seconds_count", {"queue": "a"}) == len(VALUES)


def test_label_values_are_text_and_nan_is_in_no_bucket() -> None:
    """As prometheus-client: an int label value is its str() (one series with the same
    text), and a NaN observation goes to the sum but into no bucket."""
    theirs, ours = CollectorRegistry(), CollectorRegistry()
    counter = Counter("errors", "Errors.", ["queue", "code"], registry=theirs)
    histogram = Histogram("seconds", "Seconds.", ["queue"], buckets=BUCKETS, registry=theirs)
    our_counter = CounterFamily("errors", "Errors.", ["queue", "code"])
    our_histogram = HistogramFamily("seconds", "Seconds.", ["queue"], BUCKETS)
    ours.register(our_counter)
    ours.register(our_histogram)
    for code in (503, "503", 503):
        counter.labels("a", code).inc()
        our_counter.labels("a", code).inc()  # type: ignore[arg-type]
    for value in (0.3, math.nan):
        histogram.labels("a").observe(value)
        our_histogram.labels("a").observe(value)
    assert _exposition(ours) == _exposition(theirs)
    assert ours.get_sample_value("errors_total", {"queue": "a", "code": "503"}) == 3.0


def test_a_counter_only_goes_up() -> None:
    counter = CounterFamily("jobs", "Jobs.", ["queue"])
    counter.labels("a").inc(2)
    with pytest.raises(ValueError, match="only goes up"):
        counter.labels("a").inc(-1)
    assert counter.labels("a").value == 2.0


def test_wrong_label_count_is_refused() -> None:
    with pytest.raises(ValueError, match=r"labels \('queue', 'outcome'\)"):
        CounterFamily("jobs", "Jobs.", ["queue", "outcome"]).labels("a")


def test_buckets_must_increase() -> None:
    with pytest.raises(ValueError, match="must increase"):
        HistogramFamily("seconds", "Seconds.", ["queue"], (1, 0.5))


def test_a_name_registered_twice_is_refused() -> None:
    registry = CollectorRegistry()
    registry.register(CounterFamily("jobs", "Jobs.", ["queue"]))
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        registry.register(CounterFamily("jobs", "Jobs.", ["queue"]))
