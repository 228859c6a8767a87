"""`lease-worker run`'s flow-control options (issue 31): each becomes a part of the
worker-wide `WorkerConfig.flow`, from the command line or its `LEASE_WORKER_*` variable, over
what the app's own config sets; a bad value is one line naming the option.

In process: the options are mapped before anything starts (`_configure`), and a bad value
ends `main` with status 2 before the app runs.
"""

from __future__ import annotations

import argparse

import pytest

from tests.apps.idle_app import app as idle_app
from worker import Worker, WorkerConfig
from worker.cli.main import build_parser, main
from worker.cli.run import _configure
from worker.config import AdaptiveConcurrency, FlowControl, RateLimit, TenantCap

APP = "tests.apps.idle_app:app"


def _args(*options: str) -> argparse.Namespace:
    return build_parser().parse_args(["run", APP, *options])


def _flow(*options: str, app: Worker = idle_app) -> FlowControl:
    return _configure(app, _args(*options)).flow


def test_every_option_sets_its_part() -> None:
    flow = _flow(
        "--rate-limit",
        "50",
        "--rate-limit-shared",
        "redis://127.0.0.1:6379/0",
        "--rate-limit-outage",
        "open",
        "--tenant-cap",
        "2",
        "--tenant-hold",
        "50",
        "--max-bytes-in-flight",
        "1000000",
        "--adaptive-concurrency",
    )
    assert flow == FlowControl(
        rate=RateLimit(per_s=50.0, shared="redis://127.0.0.1:6379/0", on_outage="open"),
        tenants=TenantCap(per_tenant=2, hold=50),
        max_bytes=1_000_000,
        adaptive=AdaptiveConcurrency(),
    )


def test_with_no_flow_option_the_flow_control_stays_off() -> None:
    assert _flow().off
    assert _flow("--max-in-flight", "20") == FlowControl()


def test_the_environment_sets_them_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEASE_WORKER_RATE_LIMIT", "20")
    monkeypatch.setenv("LEASE_WORKER_RATE_LIMIT_SHARED", "memory://fleet")
    monkeypatch.setenv("LEASE_WORKER_TENANT_CAP", "3")
    monkeypatch.setenv("LEASE_WORKER_MAX_BYTES_IN_FLIGHT", "4096")
    monkeypatch.setenv("LEASE_WORKER_ADAPTIVE_CONCURRENCY", "yes")
    flow = _flow()
    assert flow.rate == RateLimit(per_s=20.0, shared="memory://fleet")
    assert flow.tenants == TenantCap(per_tenant=3)
    assert (flow.max_bytes, flow.adaptive) == (4096, AdaptiveConcurrency())
    # The command line wins over the environment.
    assert _flow("--tenant-cap", "5").tenants == TenantCap(per_tenant=5)


def test_an_option_changes_only_its_setting_of_the_apps_own_flow_control() -> None:
    def key(message: object) -> str:
        return "one"

    own = FlowControl(
        rate=RateLimit(per_s=5, burst=3, shared="memory://x", grant=3),
        tenants=TenantCap(per_tenant=4, key=key, release_s=9),
        adaptive=AdaptiveConcurrency(smallest=2),
    )
    app = Worker(WorkerConfig(flow=own))
    flow = _flow("--rate-limit", "8", "--tenant-cap", "1", "--adaptive-concurrency", app=app)
    assert flow.rate == RateLimit(per_s=8.0, burst=3, shared="memory://x", grant=3)
    assert flow.tenants == TenantCap(per_tenant=1, key=key, release_s=9)
    assert flow.adaptive == AdaptiveConcurrency(smallest=2)  # the app's, not the default
    assert _flow("--rate-limit-outage", "open", app=app).rate == RateLimit(
        per_s=5, burst=3, shared="memory://x", grant=3, on_outage="open"
    )


@pytest.mark.parametrize(
    ("options", "error"),
    [
        (["--rate-limit", "0"], "--rate-limit=0.0: must be a positive number"),
        (["--rate-limit", "nan"], "--rate-limit=nan: must be a positive number"),
        (["--tenant-cap", "0"], "--tenant-cap=0: must be a whole number >= 1"),
        (
            ["--tenant-cap", "1", "--tenant-hold", "-1"],
            "--tenant-hold=-1: must be a whole number >= 0",
        ),
        (["--tenant-hold", "5"], "--tenant-hold needs --tenant-cap N (no tenant cap to change)"),
        (["--max-bytes-in-flight", "-1"], "--max-bytes-in-flight=-1: must be a whole number >= 1"),
        (
            ["--rate-limit-shared", "redis://h:6379/0"],
            "--rate-limit-shared needs --rate-limit PER_S (no rate limit to change)",
        ),
        (
            ["--rate-limit-outage", "open"],
            "--rate-limit-outage needs --rate-limit PER_S (no rate limit to change)",
        ),
        (
            ["--rate-limit", "5", "--rate-limit-shared", "http://h:6379"],
            "--rate-limit-shared='http://h:6379': must be a Redis URL (redis://, rediss:// "
            "or unix://), or memory://NAME for the workers of one process",
        ),
    ],
)
def test_a_bad_value_is_one_line_naming_the_option(
    options: list[str], error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", APP, *options]) == 2
    assert capsys.readouterr().err == f"lease-worker: error: {error}\n"


def test_a_bad_value_in_the_environment_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LEASE_WORKER_RATE_LIMIT", "fast")
    with pytest.raises(SystemExit) as exited:
        main(["run", APP])
    assert exited.value.code == 2
    assert "LEASE_WORKER_RATE_LIMIT" in capsys.readouterr().err


def test_an_outage_choice_other_than_closed_or_open_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["run", APP, "--rate-limit", "5", "--rate-limit-outage", "sideways"])
    assert exited.value.code == 2
    assert "--rate-limit-outage: invalid choice: 'sideways'" in capsys.readouterr().err
