"""The alert rules, checked and unit-tested by Prometheus' own promtool (Debian's
`prometheus` package): each alert quiet before its condition has held long enough, firing
after, with its exact labels and annotations."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "alerts.yaml"

pytestmark = pytest.mark.skipif(
    shutil.which("promtool") is None, reason="promtool (Debian's prometheus) is not installed"
)


@dataclass(frozen=True)
class Case:
    alert: str
    #: series -> promtool's expanding notation, one sample a minute.
    series: dict[str, str]
    quiet_at: str
    #: None: the alert must stay quiet (checked at quiet_at and 30 minutes).
    fires_at: str | None
    labels: dict[str, str]


#: The labels a PodMonitor's scrape gives every series of a worker pod.
W = 'namespace="orders",job="orders/lease-worker",pod="lease-worker-5d8f-x2x9q",instance="w1"'
#: What each alert built on the workers' series keeps of them.
WORKER = {"namespace": "orders", "job": "orders/lease-worker"}
POD = {**WORKER, "pod": "lease-worker-5d8f-x2x9q", "instance": "w1"}
#: kube-state-metrics' and KEDA's series: their own job, the worker's namespace.
KSM = 'namespace="orders",job="kube-state-metrics",pod="lease-worker-5d8f-x2x9q",container="worker"'
KEDA = (
    'exported_namespace="orders",namespace="keda",job="keda-operator",scaledObject="lease-worker"'
)

CASES = (
    Case(
        "LeaseWorkerLeasesLost",
        {f'lease_worker_leases_lost_total{{{W},queue="jobs",reason="lapsed"}}': "0x10 1x10"},
        quiet_at="5m",
        fires_at="15m",
        labels={**WORKER, "queue": "jobs"},
    ),
    Case(
        "LeaseWorkerEventLoopLag",
        {f"lease_worker_event_loop_lag_seconds{{{W}}}": "0x5 2x10"},
        quiet_at="8m",  # pending: above 1 s for less than 5 minutes
        fires_at="13m",
        labels=POD,
    ),
    Case(
        "LeaseWorkerHandlerErrorRatio",
        {
            f'lease_worker_messages_handled_total{{{W},queue="jobs",outcome="failed"}}': "0+6x30",
            f'lease_worker_messages_handled_total{{{W},queue="jobs",outcome="succeeded"}}': (
                "0+54x30"
            ),
        },
        quiet_at="5m",
        fires_at="20m",
        labels={**WORKER, "queue": "jobs"},
    ),
    Case(
        "LeaseWorkerDeadLetterQueueGrowing",
        {
            "lease_worker_dead_letter_queue_messages"
            f'{{{W},queue="jobs",dead_letter_queue="jobs-dlq"}}': "0x20 3x20"
        },
        quiet_at="10m",
        fires_at="25m",
        labels={**WORKER, "queue": "jobs", "dead_letter_queue": "jobs-dlq"},
    ),
    Case(
        "LeaseWorkerOldestMessageAge",
        {f'lease_worker_queue_oldest_message_age_seconds{{{W},queue="jobs"}}': "100x5 1000x10"},
        quiet_at="8m",
        fires_at="13m",
        labels={**WORKER, "queue": "jobs"},
    ),
    Case(
        "LeaseWorkerNotReady",
        {f"lease_worker_ready{{{W}}}": "1x5 0x15"},
        quiet_at="10m",
        fires_at="18m",
        labels=POD,
    ),
    Case(
        "LeaseWorkerInFlightNearQuota",
        {
            f'lease_worker_queue_messages{{{W},queue="jobs",state="in_flight"}}': (
                "1000x5 110000x10"
            ),
            f'lease_worker_queue_in_flight_quota{{{W},queue="jobs"}}': "120000x15",
        },
        quiet_at="8m",
        fires_at="13m",
        labels={**WORKER, "queue": "jobs"},
    ),
    # The target gone: its last scrape at 10 m, then a stale marker and nothing. Every
    # lease_worker_ series goes with it; only Prometheus' memory of `up` is left.
    Case(
        "LeaseWorkerDown",
        {f"up{{{W}}}": "1x10 stale"},
        quiet_at="9m",
        fires_at="17m",
        labels=WORKER,
    ),
    # The target there but down (the pod answers no scrape).
    Case(
        "LeaseWorkerDown",
        {f"up{{{W}}}": "1x5 0x20"},
        quiet_at="8m",
        fires_at="12m",
        labels=WORKER,
    ),
    # KEDA scaled the workers to zero (minReplicaCount 0): its scaler inactive, the queue
    # idle, no worker wanted. It fired here.
    Case(
        "LeaseWorkerDown",
        {
            f"up{{{W}}}": "1x10 stale",
            f'keda_scaler_active{{{KEDA},scaler="awsSqsQueueScaler",metric="s0-aws-sqs-queue"}}': (
                "1x5 0x30"
            ),
        },
        quiet_at="17m",
        fires_at=None,
        labels=WORKER,
    ),
    # KEDA's scaler active (messages wait) and still no worker up: it fires.
    Case(
        "LeaseWorkerDown",
        {
            f"up{{{W}}}": "1x10 stale",
            f'keda_scaler_active{{{KEDA},scaler="awsSqsQueueScaler",metric="s0-aws-sqs-queue"}}': (
                "1x5 0x5 1x30"
            ),
        },
        quiet_at="16m",
        fires_at="22m",
        labels=WORKER,
    ),
    # One pod down of two: the job still works, no alert.
    Case(
        "LeaseWorkerDown",
        {
            f"up{{{W}}}": "1x5 0x30",
            'up{namespace="orders",job="orders/lease-worker",pod="lease-worker-5d8f-b7k2m",'
            'instance="w2"}': "1x35",
        },
        quiet_at="12m",
        fires_at=None,
        labels=WORKER,
    ),
    Case(
        "LeaseWorkerCrashLooping",
        {f"kube_pod_container_status_restarts_total{{{KSM}}}": "0x5 1+1x20"},
        quiet_at="7m",
        fires_at="16m",
        labels={"namespace": "orders", "pod": "lease-worker-5d8f-x2x9q", "container": "worker"},
    ),
    # Messages wait and no worker exists at all: KEDA's view alone fires.
    Case(
        "LeaseWorkerBacklogUnattended",
        {f'keda_scaler_metrics_value{{{KEDA},metric="s0-aws-sqs-queue"}}': "0x5 40x30"},
        quiet_at="12m",
        fires_at="22m",
        labels={"namespace": "orders", "scaledObject": "lease-worker"},
    ),
    # Messages wait while the namespace's workers receive: quiet.
    Case(
        "LeaseWorkerBacklogUnattended",
        {
            f'keda_scaler_metrics_value{{{KEDA},metric="s0-aws-sqs-queue"}}': "40x35",
            f'lease_worker_messages_received_total{{{W},queue="jobs"}}': "0+10x35",
        },
        quiet_at="12m",
        fires_at=None,
        labels={"namespace": "orders", "scaledObject": "lease-worker"},
    ),
)


def rules() -> dict[str, dict[str, Any]]:
    loaded = yaml.safe_load(RULES.read_text())
    return {rule["alert"]: rule for group in loaded["groups"] for rule in group["rules"]}


def expand(template: str, labels: dict[str, str]) -> str:
    return re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m.group(1)], template)


def unit_test(case: Case, rule: dict[str, Any]) -> dict[str, Any]:
    labels = {**rule["labels"], **case.labels}
    annotations = {key: expand(text, labels) for key, text in rule["annotations"].items()}
    checks: list[dict[str, Any]] = [
        {"eval_time": case.quiet_at, "alertname": case.alert, "exp_alerts": []}
    ]
    if case.fires_at is None:
        checks.append({"eval_time": "30m", "alertname": case.alert, "exp_alerts": []})
    else:
        checks.append(
            {
                "eval_time": case.fires_at,
                "alertname": case.alert,
                "exp_alerts": [{"exp_labels": labels, "exp_annotations": annotations}],
            }
        )
    return {
        "interval": "1m",
        "input_series": [{"series": s, "values": v} for s, v in case.series.items()],
        "alert_rule_test": checks,
    }


def test_every_alert_has_a_case_and_runbook_text() -> None:
    found = rules()
    assert sorted(found) == sorted({case.alert for case in CASES})
    for name, rule in found.items():
        assert len(rule["annotations"]["runbook"]) > 200, name
        assert "$value" not in str(rule["annotations"]), name


def test_promtool_checks_the_rules() -> None:
    run = subprocess.run(
        ["promtool", "check", "rules", str(RULES)], capture_output=True, text=True, check=False
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"SUCCESS: {len(rules())} rules found" in run.stdout


def test_promtool_unit_tests_each_alert(tmp_path: Path) -> None:
    found = rules()
    tests = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [unit_test(case, found[case.alert]) for case in CASES],
    }
    path = tmp_path / "alerts.test.yaml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False))
    run = subprocess.run(
        ["promtool", "test", "rules", str(path)], capture_output=True, text=True, check=False
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "SUCCESS" in run.stdout


def test_every_alert_keeps_the_namespace_and_the_workers_job() -> None:
    """Each aggregation keeps `namespace` (Alertmanager routes by it; two namespaces'
    same-named queues stay apart), and `job` wherever it aggregates the workers' own
    series; every case that fires expects `namespace` among its exact labels."""
    for name, rule in rules().items():
        groupings = aggregations(rule["expr"])
        assert groupings, name
        for grouping, body in groupings:
            kept = {label.strip() for label in grouping.split(",")}
            assert "namespace" in kept, (name, grouping)
            if re.search(r"\b(lease_worker_[a-z_]+|up)\{", body):  # not KEDA's, say
                assert "job" in kept, (name, grouping)
        assert "namespace" in rule["annotations"]["summary"], name
    for case in CASES:
        assert case.labels["namespace"] == "orders", case.alert


def aggregations(expr: str) -> list[tuple[str, str]]:
    """Each `by (labels) (body)` of `expr`: its labels and its body."""
    found = []
    for match in re.finditer(r"\bby \(([^)]*)\)\s*\(", expr):
        depth, end = 1, match.end()
        while depth:
            depth += {"(": 1, ")": -1}.get(expr[end], 0)
            end += 1
        found.append((match.group(1), expr[match.end() : end - 1]))
    return found


def test_the_workers_down_alert_needs_no_worker_series() -> None:
    """Prometheus' own view: the rule reads `up` for the PodMonitor's job, nothing the
    workers export (they export nothing once they are gone)."""
    expr = rules()["LeaseWorkerDown"]["expr"]
    assert "lease_worker_" not in expr
    assert 'up{job=~"(.+/)?lease-worker"}' in expr
    backlog = rules()["LeaseWorkerBacklogUnattended"]["expr"]
    assert backlog.split("unless")[0].count("lease_worker_") == 0
