"""Prometheus metrics, registered on a registry the caller passes (never the global one
unless asked). Labels are queues, outcomes and error codes: never message ids."""

from __future__ import annotations

import anyio
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["Metrics", "watch_loop_lag"]

_DURATION_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600, 14400, 43200)
_TIME_LEFT_BUCKETS = (0, 1, 2, 5, 10, 15, 20, 30, 60, 120, 600)


class Metrics:
    """Every metric the runtime records. `Metrics()` uses a private registry."""

    def __init__(
        self, registry: CollectorRegistry | None = None, *, prefix: str = "lease_worker"
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        p, r = prefix, self.registry
        self.received = Counter(
            f"{p}_messages_received", "Messages received.", ["queue"], registry=r
        )
        self.handled = Counter(
            f"{p}_messages_handled", "Handler outcomes.", ["queue", "outcome"], registry=r
        )
        self.handler_seconds = Histogram(
            f"{p}_handler_duration_seconds",
            "Handler run time.",
            ["queue"],
            buckets=_DURATION_BUCKETS,
            registry=r,
        )
        self.in_flight = Gauge(
            f"{p}_messages_in_flight",
            "Messages held (received, not yet settled).",
            ["queue"],
            registry=r,
        )
        self.renewals = Counter(f"{p}_lease_renewals", "Leases extended.", ["queue"], registry=r)
        self.renewal_calls = Counter(
            f"{p}_lease_renewal_calls",
            "Visibility batch calls made to extend leases.",
            ["queue"],
            registry=r,
        )
        self.renewal_failures = Counter(
            f"{p}_lease_renewal_failures",
            "Failed lease extensions (entry or call).",
            ["queue", "code"],
            registry=r,
        )
        self.leases_lost = Counter(
            f"{p}_leases_lost",
            "Leases lost while their message was held.",
            ["queue", "reason"],
            registry=r,
        )
        self.leases_capped = Counter(
            f"{p}_leases_capped", "Handlers cancelled at the maximum lease.", ["queue"], registry=r
        )
        self.time_to_deadline = Histogram(
            f"{p}_lease_time_to_deadline_seconds",
            "Time left before the deadline at renewal.",
            ["queue"],
            buckets=_TIME_LEFT_BUCKETS,
            registry=r,
        )
        self.settle_calls = Counter(
            f"{p}_settle_calls", "Delete and release batch calls.", ["queue", "action"], registry=r
        )
        self.settle_failures = Counter(
            f"{p}_settle_failures",
            "Deletes and releases that failed.",
            ["queue", "action", "code"],
            registry=r,
        )
        self.receive_calls = Counter(f"{p}_receive_calls", "Receive calls.", ["queue"], registry=r)
        self.receive_errors = Counter(
            f"{p}_receive_errors", "Failed receive calls.", ["queue", "code"], registry=r
        )
        self.loop_lag = Gauge(f"{p}_event_loop_lag_seconds", "Event loop lag.", registry=r)

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
