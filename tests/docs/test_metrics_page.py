"""docs/reference/metrics.md lists every metric with all the labels it is declared with,
before any sample shows them (issue 29: the runtime's own families were listed bare until
traffic gave them samples)."""

from __future__ import annotations

from docs.gen.metrics_page import families
from worker.idempotency.metrics import IdempotencyMetrics
from worker.runtime.families import CounterFamily, GaugeFamily, HistogramFamily
from worker.runtime.metrics import Metrics


def declared() -> dict[str, tuple[str, ...]]:
    """Family name -> label names, as the runtime and the idempotency guard declare them."""
    metrics = Metrics()
    IdempotencyMetrics.on(metrics.registry)
    found = {}
    for collector in list(metrics.registry._collector_to_names):
        if isinstance(collector, CounterFamily | GaugeFamily | HistogramFamily):
            found[collector.name] = collector.labelnames
    return found


def test_every_family_lists_the_labels_it_is_declared_with() -> None:
    listed = {family.name: family.labels for family in families()}
    expected = declared()
    assert len(expected) > 20
    for name, labels in expected.items():
        assert name in listed, name
        assert set(listed[name]) == set(labels), (name, listed[name], labels)
    # Only the process-wide gauges have no label.
    assert sorted(name for name, labels in listed.items() if not labels) == [
        "lease_worker_abandoned_handler_threads",
        "lease_worker_event_loop_lag_seconds",
        "lease_worker_healthy",
        "lease_worker_ready",
        "lease_worker_settle_backlog",
    ]
