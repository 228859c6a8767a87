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
    fires_at: str
    labels: dict[str, str]


CASES = (
    Case(
        "LeaseWorkerLeasesLost",
        {'lease_worker_leases_lost_total{queue="jobs",reason="lapsed"}': "0x10 1x10"},
        quiet_at="5m",
        fires_at="15m",
        labels={"queue": "jobs"},
    ),
    Case(
        "LeaseWorkerEventLoopLag",
        {'lease_worker_event_loop_lag_seconds{instance="w1"}': "0x5 2x10"},
        quiet_at="8m",  # pending: above 1 s for less than 5 minutes
        fires_at="13m",
        labels={"instance": "w1"},
    ),
    Case(
        "LeaseWorkerHandlerErrorRatio",
        {
            'lease_worker_messages_handled_total{queue="jobs",outcome="failed"}': "0+6x30",
            'lease_worker_messages_handled_total{queue="jobs",outcome="succeeded"}': "0+54x30",
        },
        quiet_at="5m",
        fires_at="20m",
        labels={"queue": "jobs"},
    ),
    Case(
        "LeaseWorkerDeadLetterQueueGrowing",
        {
            'lease_worker_dead_letter_queue_messages{queue="jobs",dead_letter_queue="jobs-dlq"}': (
                "0x20 3x20"
            )
        },
        quiet_at="10m",
        fires_at="25m",
        labels={"queue": "jobs", "dead_letter_queue": "jobs-dlq"},
    ),
    Case(
        "LeaseWorkerOldestMessageAge",
        {'lease_worker_queue_oldest_message_age_seconds{queue="jobs"}': "100x5 1000x10"},
        quiet_at="8m",
        fires_at="13m",
        labels={"queue": "jobs"},
    ),
    Case(
        "LeaseWorkerNotReady",
        {'lease_worker_ready{instance="w1"}': "1x5 0x15"},
        quiet_at="10m",
        fires_at="18m",
        labels={"instance": "w1"},
    ),
    Case(
        "LeaseWorkerInFlightNearQuota",
        {
            'lease_worker_queue_messages{queue="jobs",state="in_flight"}': "1000x5 110000x10",
            'lease_worker_queue_in_flight_quota{queue="jobs"}': "120000x15",
        },
        quiet_at="8m",
        fires_at="13m",
        labels={"queue": "jobs"},
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
    return {
        "interval": "1m",
        "input_series": [{"series": s, "values": v} for s, v in case.series.items()],
        "alert_rule_test": [
            {"eval_time": case.quiet_at, "alertname": case.alert, "exp_alerts": []},
            {
                "eval_time": case.fires_at,
                "alertname": case.alert,
                "exp_alerts": [{"exp_labels": labels, "exp_annotations": annotations}],
            },
        ],
    }


def test_every_alert_has_a_case_and_runbook_text() -> None:
    found = rules()
    assert sorted(found) == sorted(case.alert for case in CASES)
    for name, rule in found.items():
        assert len(rule["annotations"]["runbook"]) > 200, name
        assert "$value" not in str(rule["annotations"]), name


def test_promtool_checks_the_rules() -> None:
    run = subprocess.run(
        ["promtool", "check", "rules", str(RULES)], capture_output=True, text=True, check=False
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"SUCCESS: {len(CASES)} rules found" in run.stdout


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
