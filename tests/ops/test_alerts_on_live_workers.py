"""The alert rules in a real Prometheus (Debian's package) scraping real worker processes,
fast-forwarded: every duration in the rules (ranges and `for`) is divided by `SPEED`, and
Prometheus scrapes and evaluates every second (30 s at the rules' scale: the PodMonitor's
interval) with a lookback of 5 minutes / `SPEED`. So 20 minutes of a failure take 40 s.

- A worker killed and restarted at the kubelet's back-off (10 s doubling to 5 minutes,
  scaled) for 20 minutes: LeaseWorkerDown fires and stays firing, one alert, throughout,
  though each start answers scrapes for a while.
- 10 handlers holding every slot of a worker for 30 minutes: no alert fires, while the
  backlog rule's old expression (messages wait, nothing received) held for 15 minutes.
  KEDA's operator is stood in for by a static exporter of what it would read from the
  queue: 10 messages (in flight count, scaleOnInFlight).
"""

from __future__ import annotations

import contextlib
import http.server
import itertools
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.ops.test_alert_rules import RULES
from tests.ops.test_prometheus import free_port, get_json, query, wait_for
from tests.ops.timelines import crash_loop

ROOT = Path(__file__).resolve().parents[2]
#: How many times faster than the rules' own clock.
SPEED = 30
MIN = 60

pytestmark = [
    pytest.mark.process,
    pytest.mark.timeout(180),
    pytest.mark.skipif(shutil.which("prometheus") is None, reason="prometheus is not installed"),
]

_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def scaled(duration: str) -> str:
    """A Prometheus duration divided by SPEED, in milliseconds."""
    parts = re.findall(r"(\d+)(ms|s|m|h|d)", duration)
    assert "".join(n + unit for n, unit in parts) == duration, duration
    total_ms = sum(int(n) * _UNIT_MS[unit] for n, unit in parts)
    return f"{max(total_ms // SPEED, 1)}ms"


def fast_forwarded(rules: Path, out: Path) -> Path:
    """The rules with every range, subquery step and `for` divided by SPEED."""
    loaded = yaml.safe_load(rules.read_text())
    for group in loaded["groups"]:
        for rule in group["rules"]:
            rule["expr"] = re.sub(
                r"\[(\w+)(?::(\w+))?\]",
                lambda m: "[" + ":".join(scaled(d) for d in m.groups() if d) + "]",
                rule["expr"],
            )
            if "for" in rule:
                rule["for"] = scaled(rule["for"])
    out.write_text(yaml.safe_dump(loaded, sort_keys=False))
    return out


@dataclass
class Prometheus:
    port: int

    def query(self, expr: str) -> list[dict[str, Any]]:
        return query(self.port, expr)

    def rule_health(self) -> set[str]:
        groups = get_json(f"http://127.0.0.1:{self.port}/api/v1/rules")["data"]["groups"]
        return {rule["health"] for group in groups for rule in group["rules"]}


@contextlib.contextmanager
def prometheus(tmp: Path, jobs: dict[str, tuple[str, dict[str, str]]]) -> Iterator[Prometheus]:
    """Prometheus scraping each job's one target (address, target labels) every second,
    with the fast-forwarded rules."""
    port = free_port()
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(fast_forwarded(RULES, tmp / "rules.yaml"))],
        "scrape_configs": [
            {"job_name": job, "static_configs": [{"targets": [address], "labels": labels}]}
            for job, (address, labels) in jobs.items()
        ],
    }
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
    process = subprocess.Popen(
        [
            "prometheus",
            f"--config.file={tmp / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            f"--query.lookback-delta={scaled('5m')}",
            "--log.level=warn",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        found = Prometheus(port)
        # Targets are first scraped a few seconds after start-up (discovery's batching).
        wait_for("every target scraped", lambda: len(found.query("up")) == len(jobs))
        yield found
    finally:
        process.terminate()
        process.wait(timeout=20)


def start_worker(app: str, port: int, log: Path) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-P", "-m", "worker", "run", app, "--ops-port", str(port)]
    command += ["--queue-sample-s", "1", "--grace-s", "1", "--log-format", "json"]
    with log.open("a") as out:
        return subprocess.Popen(
            command, stdout=out, stderr=out, env={**os.environ, "PYTHONPATH": str(ROOT)}
        )


def at(t0: float, scaled_s: float) -> None:
    """Wait for a moment of the timeline (seconds at the rules' scale from t0): the
    timeline's own schedule, not a wait for something to settle."""
    time.sleep(max(0.0, t0 + scaled_s / SPEED - time.monotonic()))


def firing_samples(prom: Prometheus, alert: str, window_s: float) -> list[list[Any]]:
    """Each firing alert's raw samples in the last window_s (real) seconds, per label set."""
    found = prom.query(f'ALERTS{{alertname="{alert}",alertstate="firing"}}[{int(window_s)}s]')
    return [series["values"] for series in found]


def test_a_worker_killed_and_restarted_for_20_minutes_keeps_one_alert_firing(
    tmp_path: Path,
) -> None:
    port = free_port()
    labels = {"namespace": "orders"}
    runs = crash_loop(0, [100], until_s=20 * MIN)[:-1]  # killed 100 s into each start
    with prometheus(tmp_path, {"lease-worker": (f"127.0.0.1:{port}", labels)}) as prom:
        t0, wall_t0 = time.monotonic(), time.time()
        for run in runs:
            at(t0, run.start_s)
            worker = start_worker("tests.apps.idle_app:app", port, tmp_path / "worker.log")
            at(t0, run.end_s)
            worker.send_signal(signal.SIGKILL)
            worker.wait()
        at(t0, 20 * MIN)
        # Firing by 5 minutes (and two scrapes) after the first scrape that found no
        # worker, which was before the first start, to the end: one alert, no gap.
        onset_s = 5 * MIN + 2 * 30
        window_s = (20 * MIN - onset_s) / SPEED
        (samples,) = firing_samples(prom, "LeaseWorkerDown", window_s)
        times = [float(t) for t, _ in samples]
        assert times[0] < wall_t0 + onset_s / SPEED + 1.5
        assert times[-1] > wall_t0 + 20 * MIN / SPEED - 1.5
        assert max(b - a for a, b in itertools.pairwise(times)) < 1.5
        (alert,) = prom.query('ALERTS{alertstate="firing"}')
        assert alert["metric"] == {
            "__name__": "ALERTS",
            "alertname": "LeaseWorkerDown",
            "alertstate": "firing",
            "namespace": "orders",
            "severity": "critical",
        }
        # Meanwhile the worker answered scrapes at each start: `up` was 1 while it fired.
        answered = prom.query(
            f'count_over_time((up{{job="lease-worker"}} == 1)[{int(window_s)}s:1s])'
        )
        # (How many scrapes a start answers depends on how fast the interpreter starts on
        # a loaded machine: at least one is what makes the point.)
        assert answered and float(answered[0]["value"][1]) >= 1
        assert prom.rule_health() == {"ok"}


class _KedaStandIn(http.server.BaseHTTPRequestHandler):
    """What KEDA's operator would export for the namespace's ScaledObject: 10 messages
    (visible + in flight), its scaler active."""

    BODY = (
        "\n".join(
            f'{name}{{namespace="orders",scaledObject="lease-worker",scaler="awsSqsQueueScaler",'
            f'metric="s0-aws-sqs-queue"}} {value}'
            for name, value in (("keda_scaler_metrics_value", 10), ("keda_scaler_active", 1))
        )
        + "\n"
    ).encode()

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(self.BODY)))
        self.end_headers()
        self.wfile.write(self.BODY)

    def log_message(self, format: str, *args: Any) -> None:
        return None


@contextlib.contextmanager
def keda_stand_in() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _KedaStandIn)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


#: The backlog alert's expression before it told busy from stuck: messages wait (KEDA) and
#: no worker of the namespace received one in 10 minutes (here 20 s).
OLD_BACKLOG = (
    "max by (namespace, scaledObject) (label_replace("
    'keda_scaler_metrics_value{scaledObject="lease-worker"}, '
    '"namespace", "$1", "exported_namespace", "(.+)")) > 0 unless on (namespace) '
    "sum by (namespace) (rate(lease_worker_messages_received_total[20s])) > 0"
)


def test_ten_long_handlers_holding_every_slot_for_30_minutes_page_nothing(
    tmp_path: Path,
) -> None:
    port = free_port()
    with keda_stand_in() as keda:
        jobs = {
            "lease-worker": (f"127.0.0.1:{port}", {"namespace": "orders"}),
            "keda-operator": (keda, {"namespace": "keda"}),
        }
        with prometheus(tmp_path, jobs) as prom:
            worker = start_worker("tests.apps.long_handlers_app:app", port, tmp_path / "worker.log")
            try:
                wait_for(
                    "10 handlers holding every slot",
                    lambda: prom.query('lease_worker_messages_in_flight{queue="jobs"} == 10'),
                )
                t0 = time.monotonic()
                at(t0, 30 * MIN)
                window = f"{30 * MIN // SPEED}s"
                assert prom.query(f'ALERTS{{alertstate="firing"}}[{window}]') == []
                # The scenario held: every slot taken, nothing completed, leases renewed...
                (held,) = prom.query(f"min_over_time(lease_worker_messages_in_flight[{window}])")
                assert held["value"][1] == "10"
                (done,) = prom.query(
                    f"sum(increase(lease_worker_messages_handled_total[{window}]))"
                )
                assert done["value"][1] == "0"
                (renewed,) = prom.query(
                    f"sum(increase(lease_worker_lease_renewals_total[{window}]))"
                )
                assert float(renewed["value"][1]) > 100
                # ...and the old expression held for 15 minutes: it would have paged.
                (held_old,) = prom.query(f"count_over_time(({OLD_BACKLOG})[30s:1s])")
                assert float(held_old["value"][1]) >= 30
                assert prom.rule_health() == {"ok"}
            finally:
                worker.terminate()
                worker.wait(timeout=30)
