"""A real Prometheus (Debian's package) scraping a real worker process: every dashboard
panel's query and every alert rule's expression answers with data from what the worker
exports, and Prometheus loads the rules.

One worker and one Prometheus for the module: about 10 s in all.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.ops.test_alert_rules import RULES, WORKER_SERIES, records, rules

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "lease-worker.json"

pytestmark = [
    pytest.mark.process,
    pytest.mark.timeout(90),
    pytest.mark.skipif(shutil.which("prometheus") is None, reason="prometheus is not installed"),
]


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as answer:
        return json.loads(answer.read())


def _answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


def query(port: int, expr: str) -> list[dict[str, Any]]:
    """An instant query of the Prometheus on `port`: its result (the query must succeed)."""
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    answer = get_json(url)
    assert answer["status"] == "success", (expr, answer)
    result: list[dict[str, Any]] = answer["data"]["result"]
    return result


def wait_for(what: str, check: Any, timeout_s: float = 30) -> Any:
    """Poll an outside process for a condition (it has no event to wait on)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            found = check()
        except OSError:
            found = None
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.25)


@dataclass
class Stack:
    """The worker and Prometheus, on free loopback ports."""

    worker_port: int
    prometheus_port: int
    log: Path

    def query(self, expr: str) -> list[dict[str, Any]]:
        return query(self.prometheus_port, expr)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("prometheus")
    worker_port, prometheus_port = free_port(), free_port()
    log = tmp / "worker.log"
    command = [sys.executable, "-P", "-m", "worker", "run", "tests.apps.ops_app:app"]
    options = ["--ops-port", str(worker_port), "--queue-sample-s", "1", "--grace-s", "1"]
    options += ["--log-format", "json"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with log.open("w") as out:
        worker = subprocess.Popen([*command, *options], stderr=out, stdout=out, env=env)
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RULES)],
        "scrape_configs": [
            {
                "job_name": "lease-worker",
                # As a PodMonitor's scrape labels a pod's series.
                "static_configs": [
                    {"targets": [f"127.0.0.1:{worker_port}"], "labels": {"namespace": "orders"}}
                ],
            }
        ],
    }
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
    # Scraped only once it answers: a first scrape that found it still starting would leave
    # `up == 0` in the Down rule's 3-minute window ("pods up 3 minutes straight") for the
    # whole test, as on a loaded machine.
    wait_for("the worker's ops listener", lambda: _answers(worker_port))
    prometheus = subprocess.Popen(
        [
            "prometheus",
            f"--config.file={tmp / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp / 'data'}",
            f"--web.listen-address=127.0.0.1:{prometheus_port}",
            "--log.level=warn",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        found = Stack(worker_port, prometheus_port, log)
        # Enough scrapes for every rate window (two in 10 s) and a poison message in the DLQ.
        wait_for(
            "ten scrapes with a dead-lettered message",
            lambda: found.query(
                "count_over_time(lease_worker_dead_letter_queue_messages[1m]) > 10"
            ),
        )
        yield found
    finally:
        for process in (worker, prometheus):
            process.terminate()
        for process in (worker, prometheus):
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def panel_queries() -> list[tuple[str, str]]:
    board = json.loads(DASHBOARD.read_text())
    return [
        (panel["title"], target["expr"]) for panel in board["panels"] for target in panel["targets"]
    ]


def concrete(expr: str) -> str:
    return (
        expr.replace("$__rate_interval", "10s").replace("$queue", ".*").replace("$namespace", ".*")
    )


def test_every_dashboard_query_returns_data(stack: Stack) -> None:
    queries = panel_queries()
    assert len(queries) == 31
    empty = [(title, expr) for title, expr in queries if not stack.query(concrete(expr))]
    assert empty == []


def test_every_rule_expression_runs_on_exported_series(stack: Stack) -> None:
    for name, rule in {**records(), **rules()}.items():
        stack.query(rule["expr"])  # valid PromQL over real data (firing or not)
        for metric in {m.group(1) for m in WORKER_SERIES.finditer(rule["expr"])} - {"up"}:
            assert stack.query(f'count({{__name__="{metric}"}})'), (name, metric)
        for record in set(re.findall(r"\b[a-z_]+:[a-z_]+:[a-z_]+\b", rule["expr"])):
            assert record in records(), (name, record)


def test_prometheus_loads_every_rule(stack: Stack) -> None:
    url = f"http://127.0.0.1:{stack.prometheus_port}/api/v1/rules"
    loaded = wait_for(
        "the rules evaluated",
        lambda: [
            rule
            for group in get_json(url)["data"]["groups"]
            for rule in group["rules"]
            if rule.get("lastEvaluation", "").startswith("20")
        ],
    )
    assert sorted(rule["name"] for rule in loaded) == sorted([*rules(), *records()])
    assert {rule["health"] for rule in loaded} == {"ok"}


def test_process_and_user_metrics_are_scraped(stack: Stack) -> None:
    assert stack.query('process_resident_memory_bytes{job="lease-worker"}')
    assert stack.query("ops_app_orders_fulfilled_total > 0")


def test_a_librarys_stdlib_record_is_json_with_the_messages_context(stack: Stack) -> None:
    records = [json.loads(line) for line in stack.log.read_text().splitlines() if line]
    library = [r for r in records if r.get("logger") == "ops_app.library"]
    assert library, "no record of the library"
    assert library[0]["queue"] == "orders" and library[0]["message_id"]
    assert library[0]["event"].startswith("fulfilling order ")
    assert not any("not json" in json.dumps(record) for record in records)  # no body leaked


def test_the_workers_down_alert_sees_the_live_worker(stack: Stack) -> None:
    """The rule's selector finds the worker's own scrape job: one pod up of the one wanted
    (no kube-state-metrics here), and with the worker up the rule's expression is empty."""
    assert stack.query('up{job=~"(.+/)?lease-worker"} == 1')
    (up,) = stack.query(records()["namespace:lease_worker_pods_up:count"]["expr"])
    (wanted,) = stack.query(records()["namespace:lease_worker_pods_wanted:min"]["expr"])
    assert (up["metric"], up["value"][1]) == ({"namespace": "orders"}, "1")
    assert (wanted["metric"], wanted["value"][1]) == ({"namespace": "orders"}, "1")
    assert stack.query(rules()["LeaseWorkerDown"]["expr"]) == []
    # Series keep the scrape's namespace, which every alert and panel groups by.
    (found,) = stack.query("max by (namespace) (lease_worker_ready)")
    assert found["metric"] == {"namespace": "orders"}
