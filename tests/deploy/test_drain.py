"""terminationGracePeriodSeconds covers the worker's whole shutdown, as configured.

On SIGTERM the worker drains for grace_s, releases what is left within flush_timeout_s and
closes its SQS client within call_timeout_s (worker/runtime/supervisor.py,
worker/cli/run.py). The kubelet's SIGKILL must come later than all of that, with a margin.
"""

from __future__ import annotations

import pytest

from tests.deploy.kit import (
    BASE,
    DIRECTORIES,
    EXAMPLE,
    MARGIN_S,
    ROOT,
    config_data,
    pod_spec,
    rendered,
    shutdown_bound_s,
)
from worker.config import ShutdownConfig, WorkerConfig


def _grace_period_findings(directory_name: str, data: dict[str, str]) -> list[str]:
    spec = pod_spec(rendered(DIRECTORIES[directory_name]))
    period = spec["terminationGracePeriodSeconds"]
    needed = shutdown_bound_s(data) + MARGIN_S
    if period < needed:
        return [f"terminationGracePeriodSeconds {period} < {needed:g} (bound + margin)"]
    return []


@pytest.mark.parametrize("name", sorted(DIRECTORIES))
def test_the_grace_period_exceeds_the_configured_shutdown_bound(name: str) -> None:
    data = config_data(rendered(DIRECTORIES[name]))
    assert _grace_period_findings(name, data) == []


def test_the_bound_reads_the_configmap_and_the_config_defaults() -> None:
    shutdown, config = ShutdownConfig(), WorkerConfig()
    defaults = shutdown.grace_s + shutdown.flush_timeout_s + config.call_timeout_s
    assert shutdown_bound_s({}) == defaults == 45.0
    assert shutdown_bound_s(config_data(rendered(BASE))) == 30 + 10 + 5
    assert shutdown_bound_s(config_data(rendered(EXAMPLE))) == 120 + 10 + 5


def test_a_longer_drain_without_a_longer_grace_period_fails() -> None:
    data = config_data(rendered(EXAMPLE))
    data["LEASE_WORKER_GRACE_S"] = "121"
    assert _grace_period_findings("example", data) == [
        "terminationGracePeriodSeconds 140 < 141 (bound + margin)"
    ]
    data["LEASE_WORKER_GRACE_S"] = "120"
    assert _grace_period_findings("example", data) == []


def test_the_base_drains_by_default_as_long_as_the_worker_does() -> None:
    """The base ConfigMap states the default drain, so the arithmetic in deployment.yaml
    holds for an app that keeps ShutdownConfig's defaults."""
    data = config_data(rendered(BASE))
    assert float(data["LEASE_WORKER_GRACE_S"]) == ShutdownConfig().grace_s


def test_the_readme_table_states_the_manifests_arithmetic() -> None:
    rows = {
        cells[0]: cells[1:]
        for line in (ROOT / "deploy" / "README.md").read_text().splitlines()
        if line.startswith("| base |") or line.startswith("| example overlay |")
        for cells in [[cell.strip() for cell in line.strip("|").split("|")]]
    }
    for row, name in (("base", "base"), ("example overlay", "example")):
        resources = rendered(DIRECTORIES[name])
        grace, flush, close, margin, period = (float(cell) for cell in rows[row])
        assert grace + flush + close == shutdown_bound_s(config_data(resources))
        assert (margin, period) == (MARGIN_S, pod_spec(resources)["terminationGracePeriodSeconds"])
        assert grace + flush + close + margin == period
