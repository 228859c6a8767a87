"""The idempotency guard's metrics, on the registry the worker hands to its start-up hooks.

One set per registry, however many `Idempotency` objects start on it (two would otherwise
register the same names twice); a guard not started yet records on a private registry.
"""

from __future__ import annotations

import weakref

from prometheus_client import CollectorRegistry, Counter, Histogram

__all__ = ["DROP_REASONS", "IdempotencyMetrics"]

_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
_OPERATIONS = ("create", "replace", "remove", "beat", "beat_of")
#: Why a completion was not recorded: its claim was taken over before it was written, or
#: the worker stopped before the store took it.
DROP_REASONS = ("taken_over", "not_sent")

_by_registry: weakref.WeakKeyDictionary[CollectorRegistry, IdempotencyMetrics] = (
    weakref.WeakKeyDictionary()
)


class IdempotencyMetrics:
    """The guard's counters and store latency; `IdempotencyMetrics.on(registry)` shares
    one set per registry."""

    def __init__(self, registry: CollectorRegistry, *, prefix: str = "lease_worker") -> None:
        self.registry = registry
        name = f"{prefix}_idempotency"
        self.duplicates = Counter(
            f"{name}_duplicates",
            "Messages not run because their key's completion was recorded.",
            ["queue"],
            registry=registry,
        )
        self.busy = Counter(
            f"{name}_claimed_elsewhere",
            "Messages released because a live lease elsewhere holds their key.",
            ["queue"],
            registry=registry,
        )
        self.takeovers = Counter(
            f"{name}_takeovers",
            "Stale claims taken over (their owner crashed or let them go).",
            ["queue"],
            registry=registry,
        )
        self.completions_dropped = Counter(
            f"{name}_completions_dropped",
            "Handler successes whose completion was never recorded (the key may run again).",
            ["queue", "reason"],
            registry=registry,
        )
        self.store_errors = Counter(
            f"{name}_store_errors",
            "Store calls that failed or timed out.",
            ["operation"],
            registry=registry,
        )
        self.store_seconds = Histogram(
            f"{name}_store_seconds",
            "Store call latency, failures included.",
            ["operation"],
            buckets=_BUCKETS,
            registry=registry,
        )
        for operation in _OPERATIONS:
            self.store_errors.labels(operation)
            self.store_seconds.labels(operation)

    @classmethod
    def on(cls, registry: CollectorRegistry) -> IdempotencyMetrics:
        """The metrics registered on `registry` (registered at the first call)."""
        metrics = _by_registry.get(registry)
        if metrics is None:
            metrics = _by_registry[registry] = cls(registry)
        return metrics

    def declare_queue(self, queue: str) -> None:
        for counter in (self.duplicates, self.busy, self.takeovers):
            counter.labels(queue)
        for reason in DROP_REASONS:
            self.completions_dropped.labels(queue, reason)
