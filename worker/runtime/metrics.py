"""Prometheus metrics, registered on a registry the caller passes (never the global one
unless asked). Labels are queues, outcomes and error codes: never message ids."""

from __future__ import annotations

from typing import Generic, TypeVar

import anyio
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["Metrics", "watch_loop_lag"]

M = TypeVar("M", Counter, Gauge, Histogram)


class _Labelled(Generic[M]):
    """A labelled metric whose children are looked up once: `labels()` sits on the hot path
    (several calls per message) and prometheus-client's own lookup costs microseconds."""

    __slots__ = ("_children", "metric")

    def __init__(self, metric: M) -> None:
        self.metric: M = metric
        self._children: dict[tuple[str, ...], M] = {}

    def labels(self, *values: str) -> M:
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = self.metric.labels(*values)
        return child


_DURATION_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600, 14400, 43200)
_TIME_LEFT_BUCKETS = (0, 1, 2, 5, 10, 15, 20, 30, 60, 120, 600)


class Metrics:
    """Every metric the runtime records. `Metrics()` uses a private registry."""

    def __init__(
        self, registry: CollectorRegistry | None = None, *, prefix: str = "lease_worker"
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self._prefix = prefix
        self.received = self._counter("messages_received", "Messages received.", "queue")
        self.handled = self._counter("messages_handled", "Handler outcomes.", "queue", "outcome")
        self.handler_seconds = _Labelled(
            Histogram(
                f"{prefix}_handler_duration_seconds",
                "Handler run time.",
                ["queue"],
                buckets=_DURATION_BUCKETS,
                registry=self.registry,
            )
        )
        self.in_flight = _Labelled(
            Gauge(
                f"{prefix}_messages_in_flight",
                "Messages held (received, not yet settled).",
                ["queue"],
                registry=self.registry,
            )
        )
        self.renewals = self._counter("lease_renewals", "Leases extended.", "queue")
        self.renewal_calls = self._counter(
            "lease_renewal_calls", "Visibility batch calls made to extend leases.", "queue"
        )
        self.renewal_failures = self._counter(
            "lease_renewal_failures", "Failed lease extensions (entry or call).", "queue", "code"
        )
        self.leases_lost = self._counter(
            "leases_lost", "Leases lost while their message was held.", "queue", "reason"
        )
        self.leases_capped = self._counter(
            "leases_capped", "Handlers cancelled at the maximum lease.", "queue"
        )
        self.time_to_deadline = _Labelled(
            Histogram(
                f"{prefix}_lease_time_to_deadline_seconds",
                "Time left before the deadline at renewal.",
                ["queue"],
                buckets=_TIME_LEFT_BUCKETS,
                registry=self.registry,
            )
        )
        self.settle_calls = self._counter(
            "settle_calls", "Delete and release batch calls.", "queue", "action"
        )
        self.settle_failures = self._counter(
            "settle_failures", "Deletes and releases that failed.", "queue", "action", "code"
        )
        self.receive_calls = self._counter("receive_calls", "Receive calls.", "queue")
        self.receive_errors = self._counter(
            "receive_errors", "Failed receive calls.", "queue", "code"
        )
        self.loop_lag = Gauge(
            f"{prefix}_event_loop_lag_seconds", "Event loop lag.", registry=self.registry
        )

    def _counter(self, name: str, documentation: str, *labels: str) -> _Labelled[Counter]:
        return _Labelled(
            Counter(f"{self._prefix}_{name}", documentation, list(labels), registry=self.registry)
        )

    def value(self, name: str, **labels: str) -> float:
        """A sample's current value (0 when absent): for tests and the CLI's summary."""
        found = self.registry.get_sample_value(name, labels)
        return 0.0 if found is None else found


async def watch_loop_lag(metrics: Metrics, *, interval_s: float = 5.0) -> None:
    """Set `event_loop_lag_seconds` to how late each wake-up comes: a blocked loop shows."""
    while True:
        expected = anyio.current_time() + interval_s
        await anyio.sleep_until(expected)
        metrics.loop_lag.set(max(0.0, anyio.current_time() - expected))
