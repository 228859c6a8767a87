"""The Grafana dashboard, as code: `python -m worker.ops.dashboard > lease-worker.json`.

Every panel's PromQL is in `PANELS` (a plain table: the tests run each query against a real
Prometheus scraping a worker, so no panel names a metric the worker does not export).
Built with grafana-foundation-sdk (`pip install 'lease-worker[dashboard]'`), Grafana's own
typed builders: grafanalib, the older choice, writes schemaVersion 12 dashboards (Grafana
migrates them on every load) and has no type information; the SDK writes a current schema
and checks under mypy --strict.

`deploy/grafana/lease-worker.json` is this module's output, and a test fails when it is not
current: regenerate with `python -m worker.ops.dashboard --out deploy/grafana/lease-worker.json`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from grafana_foundation_sdk.builders import common, dashboard, prometheus, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.common import GraphDrawStyle, StackingMode, VisibilityMode
from grafana_foundation_sdk.models.dashboard import (
    DashboardCursorSync,
    DataSourceRef,
    GridPos,
    VariableHide,
    VariableOption,
    VariableRefresh,
    VariableSort,
)

__all__ = ["PANELS", "Panel", "build", "render"]

_NS = 'namespace=~"$namespace"'
_Q = f'{_NS}, queue=~"$queue"'
_RATE = "[$__rate_interval]"
#: Every series keeps its namespace, in its grouping and its legend: with several namespaces
#: chosen, two namespaces' same-named queues are two lines, each saying whose it is.
_IN = "{{namespace}}/"


@dataclass(frozen=True, slots=True)
class Panel:
    title: str
    unit: str
    #: (legend, PromQL) per series.
    queries: tuple[tuple[str, str], ...]
    description: str
    stacked: bool = False


def _rate(metric: str, by: str = "queue") -> str:
    return f"sum by (namespace, {by}) (rate({metric}{{{_Q}}}{_RATE}))"


def _max(metric: str, by: str) -> str:
    return f"max by (namespace, {by}) ({metric}{{{_Q}}})"


def _quantiles(
    metric: str, by: str, selector: str = "", quantiles: tuple[str, ...] = ("50", "90", "99")
) -> tuple[tuple[str, str], ...]:
    labels = f"{_Q}, {selector}" if selector else _Q
    return tuple(
        (
            f"p{q} {_IN}{{{{{by}}}}}",
            f"histogram_quantile(0.{q}, sum by (le, namespace, {by}) "
            f"(rate({metric}_bucket{{{labels}}}{_RATE})))",
        )
        for q in quantiles
    )


PANELS: tuple[Panel, ...] = (
    Panel(
        "Throughput",
        "ops",
        (
            (f"received {_IN}{{{{queue}}}}", _rate("lease_worker_messages_received_total")),
            (f"handled {_IN}{{{{queue}}}}", _rate("lease_worker_messages_handled_total")),
        ),
        "Messages received and handled per second, all workers.",
    ),
    Panel(
        "Outcomes",
        "ops",
        ((f"{_IN}{{{{outcome}}}}", _rate("lease_worker_messages_handled_total", "outcome")),),
        "Handler outcomes per second: succeeded, retry, failed, discarded, timed_out, "
        "lease_lost, shutdown, skipped, duplicate.",
        stacked=True,
    ),
    Panel(
        "Handler duration",
        "s",
        _quantiles("lease_worker_handler_duration_seconds", "queue"),
        "Handler run time percentiles.",
    ),
    Panel(
        "In flight vs the queue's quota",
        "percentunit",
        (
            (
                f"held by workers {_IN}{{{{queue}}}}",
                f"sum by (namespace, queue) (lease_worker_messages_in_flight{{{_Q}}}) / "
                f"max by (namespace, queue) (lease_worker_queue_in_flight_quota{{{_Q}}})",
            ),
            (
                f"in flight at the service {_IN}{{{{queue}}}}",
                f"max by (namespace, queue) "
                f'(lease_worker_queue_messages{{{_Q}, state="in_flight"}}) / '
                f"max by (namespace, queue) (lease_worker_queue_in_flight_quota{{{_Q}}})",
            ),
        ),
        "Messages in flight as a share of the service's in-flight limit (SQS: 120,000 per "
        "queue); at the limit receives return fewer messages or fail with OverLimit.",
    ),
    Panel(
        "Lease renewals and losses",
        "ops",
        (
            (f"renewed {_IN}{{{{queue}}}}", _rate("lease_worker_lease_renewals_total")),
            (f"calls {_IN}{{{{queue}}}}", _rate("lease_worker_lease_renewal_calls_total")),
            # Failures are labelled by code, so no series exists before the first: "or"
            # shows 0 until then.
            (
                f"failed {_IN}{{{{queue}}}}",
                f"{_rate('lease_worker_lease_renewal_failures_total')} or "
                f"0 * {_rate('lease_worker_lease_renewals_total')}",
            ),
            (f"lost {_IN}{{{{queue}}}}", _rate("lease_worker_leases_lost_total")),
        ),
        "Leases extended, the batch calls that extended them (up to 10 leases a call on "
        "SQS), failed extensions, and leases lost (the handler was cancelled).",
    ),
    Panel(
        "Time to the nearest deadline",
        "s",
        (
            (
                f"nearest {_IN}{{{{queue}}}}",
                f"min by (namespace, queue) (lease_worker_lease_nearest_deadline_seconds{{{_Q}}})",
            ),
            *_quantiles("lease_worker_lease_time_to_deadline_seconds", "queue")[:1],
        ),
        "Seconds left on the lease closest to its deadline, and the time left when leases "
        "were renewed (p50). Near 0: renewals come late.",
    ),
    Panel(
        "Event loop lag",
        "s",
        (
            (
                f"{_IN}{{{{instance}}}}",
                f"max by (namespace, instance) (lease_worker_event_loop_lag_seconds{{{_NS}}})",
            ),
        ),
        "How late each worker's event loop wakes up; a blocked loop renews no lease.",
    ),
    Panel(
        "Queue depth",
        "short",
        (
            (
                f"{_IN}{{{{queue}}}} {{{{state}}}}",
                _max("lease_worker_queue_messages", "queue, state"),
            ),
        ),
        "The service's approximate counts: visible, in flight, delayed.",
        stacked=True,
    ),
    Panel(
        "Oldest message age",
        "s",
        ((f"{_IN}{{{{queue}}}}", _max("lease_worker_queue_oldest_message_age_seconds", "queue")),),
        "Age of the oldest message (on SQS: of the oldest received since the last sample).",
    ),
    Panel(
        "Dead-letter queue depth",
        "short",
        (
            (
                f"{_IN}{{{{dead_letter_queue}}}}",
                _max("lease_worker_dead_letter_queue_messages", "queue, dead_letter_queue"),
            ),
        ),
        "Messages in each handler queue's dead-letter queue.",
    ),
    Panel(
        "Queue service latency",
        "s",
        _quantiles("lease_worker_api_call_duration_seconds", "operation", 'wait="none"', ("99",)),
        "p99 of calls to the queue service by operation: the service's latency. Long polls "
        "(receives allowed to wait for messages) are not here: their time is mostly waiting "
        "(next panel).",
    ),
    Panel(
        "Receive waits (long polls)",
        "s",
        _quantiles(
            "lease_worker_api_call_duration_seconds", "queue", 'wait="long_poll"', ("50", "99")
        ),
        "How long receives allowed to wait for messages took: near the wait (20 s on SQS) "
        "when the queue is idle, short when messages are there.",
    ),
    Panel(
        "Receives, settle backlog, abandoned threads",
        "short",
        (
            (f"empty receives/s {_IN}{{{{queue}}}}", _rate("lease_worker_empty_receives_total")),
            (f"receive calls/s {_IN}{{{{queue}}}}", _rate("lease_worker_receive_calls_total")),
            (
                "settle backlog {{namespace}}",
                f"sum by (namespace) (lease_worker_settle_backlog{{{_NS}}})",
            ),
            (
                "abandoned threads {{namespace}}",
                f"sum by (namespace) (lease_worker_abandoned_handler_threads{{{_NS}}})",
            ),
        ),
        "Receive calls and how many answered nothing, deletes and releases waiting to be "
        "sent, and threads of synchronous handlers that were given up on.",
    ),
    Panel(
        "Flow control",
        "short",
        (
            (
                f"concurrency limit {_IN}{{{{queue}}}}",
                f"min by (namespace, queue) (lease_worker_flow_concurrency_limit{{{_Q}}})",
            ),
            (
                f"rate-limit wait s/s {_IN}{{{{queue}}}}",
                _rate("lease_worker_flow_rate_wait_seconds_total"),
            ),
            (
                f"store errors/s {_IN}{{{{queue}}}}",
                _rate("lease_worker_flow_rate_store_errors_total"),
            ),
            (
                f"waiting for their tenant {_IN}{{{{queue}}}}",
                f"sum by (namespace, queue) (lease_worker_flow_tenant_waiting{{{_Q}}})",
            ),
            (
                f"tenant releases/s {_IN}{{{{queue}}}}",
                _rate("lease_worker_flow_tenant_released_total"),
            ),
            (
                f"tenant key errors/s {_IN}{{{{queue}}}}",
                _rate("lease_worker_flow_tenant_key_errors_total"),
            ),
        ),
        "Queues with flow control (FlowControl): the handlers each worker may run at once "
        "(the adaptive limit; else max_in_flight), seconds receives waited for the rate "
        "limit per second, grants a shared limit's Redis did not answer, messages waiting "
        "in the workers for their tenant's turn (receives pause at the cap's hold), "
        "messages released past the hold (queues without a redrive policy only), and "
        "messages whose tenant key function failed.",
    ),
)

_DATASOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")


def _panel(spec: Panel, index: int) -> timeseries.Panel:
    panel = (
        timeseries.Panel()
        .id(index + 1)
        .title(spec.title)
        .description(spec.description)
        .unit(spec.unit)
        .datasource(_DATASOURCE)
        .draw_style(GraphDrawStyle.LINE)
        .fill_opacity(20 if spec.stacked else 5)
        .show_points(VisibilityMode.NEVER)
        .grid_pos(GridPos(h=8, w=12, x=12 * (index % 2), y=8 * (index // 2)))
    )
    if spec.stacked:
        panel = panel.stacking(common.StackingConfig().mode(StackingMode.NORMAL))
    for number, (legend, expr) in enumerate(spec.queries):
        query = (
            prometheus.Dataquery()
            .expr(expr)
            .legend_format(legend)
            .ref_id(chr(ord("A") + number))
            .datasource(_DATASOURCE)
        )
        panel = panel.with_target(query)
    return panel


def _variable(name: str, label: str, query: str) -> dashboard.QueryVariable:
    """A variable of label values, several selectable, all by default."""
    return (
        dashboard.QueryVariable(name)
        .label(label)
        .datasource(_DATASOURCE)
        .query(query)
        .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(VariableSort.ALPHABETICAL_ASC)
        .multi(True)
        .include_all(True)
        .all_value(".*")
        .current(VariableOption(selected=True, text="All", value="$__all"))
        .hide(VariableHide.DONT_HIDE)
    )


def build() -> dashboard.Dashboard:
    datasource = dashboard.DatasourceVariable("datasource").label("Prometheus").type("prometheus")
    namespace = _variable(
        "namespace", "Namespace", "label_values(lease_worker_messages_received_total, namespace)"
    )
    queue = _variable(
        "queue", "Queue", f"label_values(lease_worker_messages_received_total{{{_NS}}}, queue)"
    )
    board = (
        dashboard.Dashboard("lease-worker")
        .uid("lease-worker")
        .description("Leases, throughput, outcomes and queues of lease-worker workers.")
        .tags(["lease-worker", "sqs"])
        .refresh("30s")
        .time("now-1h", "now")
        .timezone("browser")
        .tooltip(DashboardCursorSync.CROSSHAIR)
        .with_variable(datasource)
        .with_variable(namespace)
        .with_variable(queue)
    )
    for index, spec in enumerate(PANELS):
        board = board.with_panel(_panel(spec, index))
    return board


def render() -> str:
    return JSONEncoder(sort_keys=True, indent=2).encode(build().build()) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m worker.ops.dashboard", description=__doc__)
    parser.add_argument("--out", help="write the JSON here (default: standard output)")
    args = parser.parse_args(argv)
    text = render()
    if args.out:
        with open(args.out, "w", encoding="utf-8") as out:
            out.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
