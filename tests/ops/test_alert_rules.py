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
#: A second worker pod of the same job.
W2 = 'namespace="orders",job="orders/lease-worker",pod="lease-worker-5d8f-b7k2m",instance="w2"'
#: What each alert built on the workers' series keeps of them.
WORKER = {"namespace": "orders", "job": "orders/lease-worker"}
#: What an alert on the namespace's Deployment keeps: one Deployment a namespace.
NAMESPACE = {"namespace": "orders"}
POD = {**WORKER, "pod": "lease-worker-5d8f-x2x9q", "instance": "w1"}
#: kube-state-metrics' and KEDA's series: their own job, the worker's namespace.
KSM = 'namespace="orders",job="kube-state-metrics",pod="lease-worker-5d8f-x2x9q",container="worker"'
KEDA = (
    'exported_namespace="orders",namespace="keda",job="keda-operator",scaledObject="lease-worker"'
)
KEDA_ACTIVE = f'keda_scaler_active{{{KEDA},scaler="awsSqsQueueScaler",metric="s0-aws-sqs-queue"}}'
#: kube-state-metrics' view of KEDA's HPA and of the Deployment.
HPA_MIN = (
    'kube_horizontalpodautoscaler_spec_min_replicas{namespace="orders",job="kube-state-metrics",'
    'horizontalpodautoscaler="keda-hpa-lease-worker"}'
)
REPLICAS = (
    'kube_deployment_spec_replicas{namespace="orders",job="kube-state-metrics",'
    'deployment="lease-worker"}'
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
    # lease_worker_ series goes with it; only Prometheus' memory of `up` is left, and with
    # no kube-state-metrics the namespace wants 1 pod.
    Case(
        "LeaseWorkerDown",
        {f"up{{{W}}}": "1x10 stale"},
        quiet_at="15m",
        fires_at="16m",
        labels=NAMESPACE,
    ),
    # The target there but down (the pod answers no scrape).
    Case(
        "LeaseWorkerDown",
        {f"up{{{W}}}": "1x5 0x20"},
        quiet_at="10m",
        fires_at="11m",
        labels=NAMESPACE,
    ),
    # KEDA scaled the workers to zero (minReplicaCount 0), seen without kube-state-metrics:
    # its scaler inactive, the queue idle, no worker wanted.
    Case(
        "LeaseWorkerDown",
        {f"up{{{W}}}": "1x10 stale", KEDA_ACTIVE: "1x5 0x30"},
        quiet_at="17m",
        fires_at=None,
        labels=NAMESPACE,
    ),
    # KEDA's scaler active again (messages wait) at 12 m and still no worker up: it fires.
    Case(
        "LeaseWorkerDown",
        {f"up{{{W}}}": "1x10 stale", KEDA_ACTIVE: "1x5 0x5 1x30"},
        quiet_at="16m",
        fires_at="17m",
        labels=NAMESPACE,
    ),
    # KEDA at zero as kube-state-metrics sees it: the Deployment at 0 replicas (the HPA's
    # minimum is 1 even for minReplicaCount 0). No KEDA metrics needed.
    Case(
        "LeaseWorkerDown",
        {f"up{{{W}}}": "1x10 stale", HPA_MIN: "1x40", REPLICAS: "1x10 0x30"},
        quiet_at="20m",
        fires_at=None,
        labels=NAMESPACE,
    ),
    # One pod down of two, and no minimum known (no kube-state-metrics): 1 is enough.
    Case(
        "LeaseWorkerDown",
        {f"up{{{W}}}": "1x5 0x30", f"up{{{W2}}}": "1x35"},
        quiet_at="12m",
        fires_at=None,
        labels=NAMESPACE,
    ),
    # One pod down of two with the ScaledObject's minimum at 2: fewer than the minimum.
    Case(
        "LeaseWorkerDown",
        {f"up{{{W}}}": "1x5 0x30", f"up{{{W2}}}": "1x35", HPA_MIN: "2x35", REPLICAS: "2x35"},
        quiet_at="10m",
        fires_at="11m",
        labels=NAMESPACE,
    ),
    # Two restarts (at 6 and 8 m), the container waiting in back-off before each.
    Case(
        "LeaseWorkerCrashLooping",
        {
            f"kube_pod_container_status_restarts_total{{{KSM}}}": "0x5 1x1 2x20",
            f'kube_pod_container_status_waiting_reason{{{KSM},reason="CrashLoopBackOff"}}': (
                "_x5 1 stale 1 stale _x20"
            ),
        },
        quiet_at="7m",
        fires_at="8m",
        labels={"namespace": "orders", "pod": "lease-worker-5d8f-x2x9q", "container": "worker"},
    ),
    # One crash and a restart: no loop.
    Case(
        "LeaseWorkerCrashLooping",
        {
            f"kube_pod_container_status_restarts_total{{{KSM}}}": "0x5 1x25",
            f'kube_pod_container_status_waiting_reason{{{KSM},reason="CrashLoopBackOff"}}': (
                "_x5 1 stale _x25"
            ),
        },
        quiet_at="7m",
        fires_at=None,
        labels={"namespace": "orders", "pod": "lease-worker-5d8f-x2x9q", "container": "worker"},
    ),
    # Messages wait and no worker exists at all: KEDA's view alone fires.
    Case(
        "LeaseWorkerBacklogUnattended",
        {f'keda_scaler_metrics_value{{{KEDA},metric="s0-aws-sqs-queue"}}': "0x5 40x30"},
        quiet_at="20m",
        fires_at="21m",
        labels={"namespace": "orders", "scaledObject": "lease-worker"},
    ),
    # Messages wait while the namespace's workers complete handlers: quiet.
    Case(
        "LeaseWorkerBacklogUnattended",
        {
            f'keda_scaler_metrics_value{{{KEDA},metric="s0-aws-sqs-queue"}}': "40x35",
            f'lease_worker_messages_handled_total{{{W},queue="jobs",outcome="failed"}}': "0+10x35",
        },
        quiet_at="12m",
        fires_at=None,
        labels={"namespace": "orders", "scaledObject": "lease-worker"},
    ),
    # Messages wait while every slot holds a long handler: nothing completes, but leases
    # are renewed. Busy, not stuck: quiet.
    Case(
        "LeaseWorkerBacklogUnattended",
        {
            f'keda_scaler_metrics_value{{{KEDA},metric="s0-aws-sqs-queue"}}': "40x35",
            f'lease_worker_lease_renewals_total{{{W},queue="jobs"}}': "0+20x35",
        },
        quiet_at="12m",
        fires_at=None,
        labels={"namespace": "orders", "scaledObject": "lease-worker"},
    ),
    # Messages wait; the workers receive them and lose every lease: stuck, it fires.
    Case(
        "LeaseWorkerBacklogUnattended",
        {
            f'keda_scaler_metrics_value{{{KEDA},metric="s0-aws-sqs-queue"}}': "40x35",
            f'lease_worker_messages_received_total{{{W},queue="jobs"}}': "0+10x35",
            f'lease_worker_messages_handled_total{{{W},queue="jobs",outcome="lease_lost"}}': (
                "0+10x35"
            ),
        },
        quiet_at="14m",
        fires_at="15m",
        labels={"namespace": "orders", "scaledObject": "lease-worker"},
    ),
)


def rules(path: Path = RULES) -> dict[str, dict[str, Any]]:
    """The alerting rules by name."""
    loaded = yaml.safe_load(path.read_text())
    return {
        rule["alert"]: rule
        for group in loaded["groups"]
        for rule in group["rules"]
        if "alert" in rule
    }


def records(path: Path = RULES) -> dict[str, dict[str, Any]]:
    """The recording rules by the series they record."""
    loaded = yaml.safe_load(path.read_text())
    return {
        rule["record"]: rule
        for group in loaded["groups"]
        for rule in group["rules"]
        if "record" in rule
    }


def expand(template: str, labels: dict[str, str]) -> str:
    return re.sub(
        r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels.get(m.group(1), "<no value>"), template
    )


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


def test_every_alert_has_a_case_and_a_runbook_that_says_what_to_check_first() -> None:
    found = rules()
    assert sorted(found) == sorted({case.alert for case in CASES})
    for name, rule in found.items():
        runbook = rule["annotations"]["runbook"]
        assert len(runbook) > 200, name
        assert runbook.startswith("First: "), name
        assert "$value" not in str(rule["annotations"]), name


def test_promtool_checks_the_rules() -> None:
    run = subprocess.run(
        ["promtool", "check", "rules", str(RULES)], capture_output=True, text=True, check=False
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"SUCCESS: {len(rules()) + len(records())} rules found" in run.stdout


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


#: Aggregations of the workers' `up` that keep `namespace` alone, and why.
PER_NAMESPACE = {
    # Counted against the minimum of the namespace's one Deployment (and its ScaledObject).
    "namespace:lease_worker_pods_up:count",
    "namespace:lease_worker_pods_wanted:min",
}
#: A series the workers' scrape job exports (Prometheus' `up` included), not a recorded one.
WORKER_SERIES = re.compile(r"(?<![:\w])(lease_worker_[a-z_]+|up)\s*[{\[]")


def test_every_rule_keeps_the_namespace_and_the_workers_job() -> None:
    """Each aggregation keeps `namespace` (Alertmanager routes by it; two namespaces'
    same-named queues stay apart), and `job` wherever it aggregates the workers' own
    series; an alert without aggregation reads recorded series that keep them; every case
    that fires expects `namespace` among its exact labels."""
    every_rule = {**rules(), **records()}
    for name, rule in every_rule.items():
        groupings = aggregations(rule["expr"])
        for grouping, body in groupings:
            kept = {label.strip() for label in grouping.split(",")}
            assert "namespace" in kept, (name, grouping)
            if WORKER_SERIES.search(body) and name not in PER_NAMESPACE:  # not KEDA's, say
                assert "job" in kept, (name, grouping)
        if not groupings:
            read = set(re.findall(r"\b[a-z_]+:[a-z_]+:[a-z_]+\b", rule["expr"]))
            assert read, name
            assert all(record in records() for record in read), name
            assert all(record.startswith("namespace") for record in read), name
        if "alert" in rule:
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


def test_the_alerts_for_a_fleet_gone_read_no_series_of_the_workers() -> None:
    """Prometheus' own view: Down reads `up` for the PodMonitor's job (through its
    records), kube-state-metrics and KEDA, nothing the workers export (they export
    nothing once they are gone); the backlog's own side is KEDA's."""
    expr = rules()["LeaseWorkerDown"]["expr"]
    read = set(re.findall(r"\b[a-z_]+:[a-z_]+:[a-z_]+\b", expr))
    assert read == {
        "namespace:lease_worker_pods_wanted:min",
        "namespace:lease_worker_pods_up:count",
    }
    for record in read:
        body = records()[record]["expr"]
        assert not re.search(r"(?<![:\w])lease_worker_", body), record
    assert (
        'up{job=~"(.+/)?lease-worker"}' in records()["namespace:lease_worker_pods_up:count"]["expr"]
    )
    backlog = rules()["LeaseWorkerBacklogUnattended"]["expr"]
    assert backlog.split("unless")[0].count("lease_worker_") == 0
