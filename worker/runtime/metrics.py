"""Prometheus metrics, registered on a registry the caller passes (never the global one
unless asked). Labels are queues, handlers, outcomes, operations and error codes: never
message ids, so a series' count is bounded by the configuration, not by the traffic.

Counters for a queue's known label values (every outcome, every loss reason) are created at
zero when the queue is declared, so that `rate()` and `increase()` answer 0 rather than no
data before the first event, and alert rules see a series from the first scrape.

The runtime's metrics are `worker.runtime.families`: plain numbers the loop adds to, turned
into samples at scrape (several are recorded per message; prometheus-client's own metrics
lock on each). Values that are cheap to read and costly to keep current (the settle
backlog, the nearest deadline, threads of abandoned handlers) are read at scrape time from a
`MetricsSnapshot`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from worker.runtime.families import CounterFamily, GaugeFamily, HistogramFamily

__all__ = ["OUTCOMES", "Metrics", "MetricsSnapshot"]

F = TypeVar("F", CounterFamily, GaugeFamily, HistogramFamily)

#: Every value of the `outcome` label (worker.core.settlement.Outcome's, plus `duplicate`
#: for idempotent handlers that suppress a completed message).
OUTCOMES = (
    "succeeded",
    "retry",
    "failed",
    "discarded",
    "timed_out",
    "lease_lost",
    "shutdown",
    "skipped",
    "duplicate",
)
#: The `reason` of `leases_lost_total` and `settlements_dropped_total` known in advance (the
#: others are the codes with which the service refused a renewal).
LOSS_REASONS = ("lapsed",)


_DURATION_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600, 14400, 43200)
_TIME_LEFT_BUCKETS = (0, 1, 2, 5, 10, 15, 20, 30, 60, 120, 600)
_CALL_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25)


@dataclass(frozen=True, slots=True)
class MetricsSnapshot:
    """What the worker holds right now, read at each scrape."""

    #: Seconds from now to the nearest lease deadline, per queue with a message held.
    nearest_deadline_s: Mapping[str, float] = field(default_factory=dict)
    #: Deletes and releases waiting to be sent.
    settle_backlog: int = 0
    #: Threads still running a synchronous handler whose message is no longer held.
    abandoned_threads: int = 0


class _AtScrape(Collector):
    def __init__(self, prefix: str, read: Callable[[], MetricsSnapshot]) -> None:
        self.prefix = prefix
        self._read = read

    def collect(self) -> Iterator[Metric]:
        snapshot = self._read()
        nearest = GaugeMetricFamily(
            f"{self.prefix}_lease_nearest_deadline_seconds",
            "Seconds to the nearest lease deadline among the messages held.",
            labels=["queue"],
        )
        for queue, seconds in sorted(snapshot.nearest_deadline_s.items()):
            nearest.add_metric([queue], seconds)
        yield nearest
        yield GaugeMetricFamily(
            f"{self.prefix}_settle_backlog",
            "Deletes and releases waiting to be sent.",
            value=snapshot.settle_backlog,
        )
        yield GaugeMetricFamily(
            f"{self.prefix}_abandoned_handler_threads",
            "Threads still running a synchronous handler that was given up on.",
            value=snapshot.abandoned_threads,
        )


class Metrics:
    """Every metric the runtime records. `Metrics()` uses a private registry."""

    def __init__(
        self, registry: CollectorRegistry | None = None, *, prefix: str = "lease_worker"
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.prefix = prefix
        self._watching = False
        self.received = self._counter("messages_received", "Messages received.", "queue")
        self.handled = self._counter("messages_handled", "Handler outcomes.", "queue", "outcome")
        self.handler_seconds = self._histogram(
            "handler_duration_seconds", "Handler run time.", _DURATION_BUCKETS, "queue"
        )
        self.handler_info = self._gauge(
            "handler_info", "1 for each queue's handler (join on queue).", "queue", "handler"
        )
        self.in_flight = self._gauge(
            "messages_in_flight", "Messages held (received, not yet settled).", "queue"
        )
        self.in_flight_quota = self._gauge(
            "queue_in_flight_quota", "The service's in-flight limit of the queue.", "queue"
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
        self.handlers_fenced = self._counter(
            "handlers_fenced",
            "Handler runs stopped by their lease's fence: a LeaseLostError (ensure_held(), "
            "extend()) raised out of the handler for a lease that was gone.",
            "queue",
        )
        self.time_to_deadline = self._histogram(
            "lease_time_to_deadline_seconds",
            "Time left before the deadline at renewal.",
            _TIME_LEFT_BUCKETS,
            "queue",
        )
        self.settle_calls = self._counter(
            "settle_calls", "Delete and release batch calls.", "queue", "action"
        )
        self.settle_failures = self._counter(
            "settle_failures", "Deletes and releases that failed.", "queue", "action", "code"
        )
        self.settlements_dropped = self._counter(
            "settlements_dropped",
            "Deletes and releases not sent because their lease was gone by the time they "
            "would have gone out (reason: as leases_lost's); the message comes back.",
            "queue",
            "action",
            "reason",
        )
        self.receive_calls = self._counter("receive_calls", "Receive calls.", "queue")
        self.empty_receives = self._counter(
            "empty_receives", "Receive calls that answered no message.", "queue"
        )
        self.receive_errors = self._counter(
            "receive_errors", "Failed receive calls.", "queue", "code"
        )
        # `wait` tells a long poll (a receive allowed to wait for messages: its time is
        # mostly waiting, up to 20 s) from every other call, whose time is the service's
        # latency; summed over `wait`, the series are what they were before the label.
        self.api_seconds = self._histogram(
            "api_call_duration_seconds",
            "Queue service calls, by operation (failures included); wait: long_poll for a "
            "receive allowed to wait for messages, none for every other call.",
            _CALL_BUCKETS,
            "queue",
            "operation",
            "wait",
        )
        self.queue_messages = self._gauge(
            "queue_messages",
            "The service's approximate message counts (state: visible, in_flight, delayed).",
            "queue",
            "state",
        )
        self.dead_letter_messages = self._gauge(
            "dead_letter_queue_messages",
            "Messages in the queue's dead-letter queue (the service's approximate count).",
            "queue",
            "dead_letter_queue",
        )
        self.oldest_message_age = self._gauge(
            "queue_oldest_message_age_seconds",
            "Age of the queue's oldest message (where the service tells; else the oldest "
            "received since the last sample).",
            "queue",
        )
        self.loop_lag = Gauge(
            f"{prefix}_event_loop_lag_seconds", "Event loop lag.", registry=self.registry
        )
        # Flow control (`FlowControl`): series exist only for queues that turn a part on.
        self.flow_rate_wait = self._counter(
            "flow_rate_wait_seconds",
            "Seconds receives waited for the rate limit before being sent.",
            "queue",
        )
        self.flow_rate_grants = self._counter(
            "flow_rate_grants", "Grants asked of a shared rate limit's store.", "queue"
        )
        self.flow_rate_store_errors = self._counter(
            "flow_rate_store_errors",
            "Grants a shared rate limit's store did not answer (down or too slow).",
            "queue",
        )
        self.flow_concurrency_limit = self._gauge(
            "flow_concurrency_limit",
            "Handlers of the queue that may run at once now (the adaptive limit, else "
            "max_in_flight).",
            "queue",
        )
        self.flow_tenant_released = self._counter(
            "flow_tenant_released",
            "Messages over their tenant's cap handed back because the worker's hold was full "
            "(only on a queue without a redrive policy).",
            "queue",
        )
        self.flow_tenant_waiting = self._gauge(
            "flow_tenant_waiting",
            "Messages over their tenant's cap waiting in the worker for their turn (leases "
            "renewed, no handler slot taken).",
            "queue",
        )
        self.flow_tenant_key_errors = self._counter(
            "flow_tenant_key_errors",
            "Messages whose tenant key function raised or answered neither a str nor None "
            "(each capped as the fallback tenant '<key failed>').",
            "queue",
        )

    def _counter(self, name: str, documentation: str, *labels: str) -> CounterFamily:
        return self._register(CounterFamily(f"{self.prefix}_{name}", documentation, labels))

    def _gauge(self, name: str, documentation: str, *labels: str) -> GaugeFamily:
        return self._register(GaugeFamily(f"{self.prefix}_{name}", documentation, labels))

    def _histogram(
        self, name: str, documentation: str, buckets: tuple[float, ...], *labels: str
    ) -> HistogramFamily:
        family = HistogramFamily(f"{self.prefix}_{name}", documentation, labels, buckets)
        return self._register(family)

    def _register(self, family: F) -> F:
        self.registry.register(family)
        return family

    def declare_queue(self, queue: str, handler: str) -> None:
        """Create the queue's series at zero: queries see 0, not no data, before any event."""
        self.handler_info.labels(queue, handler).set(1)
        self.received.labels(queue)
        self.in_flight.labels(queue)
        for outcome in OUTCOMES:
            self.handled.labels(queue, outcome)
        for reason in LOSS_REASONS:
            self.leases_lost.labels(queue, reason)
        for counter in (
            self.renewals,
            self.renewal_calls,
            self.leases_capped,
            self.handlers_fenced,
        ):
            counter.labels(queue)
        for counter in (self.receive_calls, self.empty_receives):
            counter.labels(queue)
        for action in ("delete", "release"):
            self.settle_calls.labels(queue, action)
            for reason in LOSS_REASONS:
                self.settlements_dropped.labels(queue, action, reason)

    def watch(self, read: Callable[[], MetricsSnapshot]) -> None:
        """Read `read()` at each scrape (once per registry: a second call is ignored)."""
        if not self._watching:
            self._watching = True
            self.registry.register(_AtScrape(self.prefix, read))

    def value(self, name: str, **labels: str) -> float:
        """A sample's current value (0 when absent): for tests and the CLI's summary."""
        found = self.registry.get_sample_value(name, labels)
        return 0.0 if found is None else found
