"""The Grafana dashboard is generated from Python, and the committed JSON is its output."""

from __future__ import annotations

import json
import re
from pathlib import Path

from worker.ops.dashboard import PANELS, render

COMMITTED = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "lease-worker.json"


def test_the_committed_dashboard_is_current() -> None:
    assert COMMITTED.read_text() == render(), (
        "deploy/grafana/lease-worker.json is stale: run "
        "python -m worker.ops.dashboard --out deploy/grafana/lease-worker.json"
    )


def test_panels_follow_the_queue_variable_and_the_rate_interval() -> None:
    board = json.loads(render())
    assert [panel["title"] for panel in board["panels"]] == [panel.title for panel in PANELS]
    variables = board["templating"]["list"]
    assert [v["name"] for v in variables] == ["datasource", "namespace", "queue"]
    # The queues offered are those of the namespaces chosen.
    assert 'namespace=~"$namespace"' in variables[2]["query"]
    for panel in board["panels"]:
        assert panel["type"] == "timeseries" and panel["description"]
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        for target in panel["targets"]:
            expr = target["expr"]
            assert "rate(" not in expr or "[$__rate_interval]" in expr, expr
            # Every series read is the chosen namespaces' (two namespaces' same-named
            # queues are two queues).
            selectors = re.findall(r"lease_worker_[a-z_]+(\{[^}]*\})?", expr)
            assert selectors and all('namespace=~"$namespace"' in s for s in selectors), expr
            if "queue" in expr and "instance" not in expr and "settle" not in expr:
                assert 'queue=~"$queue"' in expr, expr


def test_every_series_keeps_its_namespace_in_its_grouping_and_its_legend() -> None:
    """With every namespace chosen, two namespaces' same-named queues are two lines, and
    each line's legend says whose it is (issue 42, 7)."""
    board = json.loads(render())
    for panel in board["panels"]:
        for target in panel["targets"]:
            expr = target["expr"]
            groupings = re.findall(r"\bby \(([^)]*)\)", expr)
            assert groupings, expr  # no bare sum(): it would merge the namespaces
            for grouping in groupings:
                assert "namespace" in {label.strip() for label in grouping.split(",")}, expr
            assert "{{namespace}}" in target["legendFormat"], (panel["title"], target)


def test_call_latency_and_long_poll_waits_are_separate_series() -> None:
    """With 20 s long polls, idle receives buried the calls' milliseconds (issue 29)."""
    board = json.loads(render())
    panels = {panel["title"]: panel for panel in board["panels"]}
    latency = [t["expr"] for t in panels["Queue service latency"]["targets"]]
    waits = [t["expr"] for t in panels["Receive waits (long polls)"]["targets"]]
    assert latency and all('wait="none"' in expr for expr in latency)
    assert waits and all('wait="long_poll"' in expr for expr in waits)


def test_every_panel_named_in_the_issue_is_there() -> None:
    titles = {panel.title for panel in PANELS}
    for wanted in (
        "Throughput",
        "Outcomes",
        "Handler duration",
        "In flight vs the queue's quota",
        "Lease renewals and losses",
        "Time to the nearest deadline",
        "Event loop lag",
        "Queue depth",
        "Oldest message age",
        "Dead-letter queue depth",
    ):
        assert wanted in titles
