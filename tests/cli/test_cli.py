"""The `lease-worker` command, run as a real process (`python -m worker`).

Every run that gets past validation uses `tests.apps.shutdown_app` with no messages and a
background task that asks for a shutdown at once (`SHUTDOWN_APP_SELF_STOP=1`), so a setting
wrongly accepted ends in a quick exit 0 rather than a hang; its JSON report shows the settings
the worker ran with. Every subprocess is bounded by `TIMEOUT_S`.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import worker

ROOT = Path(__file__).resolve().parents[2]
APP = "tests.apps.shutdown_app:app"
TIMEOUT_S = 30

OPTIONS = (
    "--backend",
    "--region",
    "--endpoint-url",
    "--queue-url",
    "--visibility-s",
    "--extension-s",
    "--renew-margin-s",
    "--max-lease-s",
    "--adaptive",
    "--max-in-flight",
    "--grace-s",
    "--ops-port",
    "--ops-addr",
    "--max-loop-lag-s",
    "--queue-sample-s",
    "--console-bodies",
    "--no-console",
    "--log-format",
    "--log-level",
)


@dataclass(frozen=True)
class Run:
    returncode: int
    stdout: str
    stderr: str

    @property
    def stderr_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.strip()]

    @property
    def text_lines(self) -> list[str]:
        """Lines of standard error that are not JSON log events."""
        return [line for line in self.stderr_lines if not line.startswith("{")]

    def events(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.stderr_lines if line.startswith("{")]


def child_env(**extra: str) -> dict[str, str]:
    """This environment without any lease-worker, app or AWS setting, plus `extra`."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("LEASE_WORKER_", "SHUTDOWN_APP_", "AWS_"))
    }
    env |= {
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        "SHUTDOWN_APP_MESSAGES": "0",
        "SHUTDOWN_APP_SELF_STOP": "1",
    }
    return env | extra


def lease_worker(
    *args: str, env: dict[str, str] | None = None, command: list[str] | None = None
) -> Run:
    done = subprocess.run(
        [*(command or [sys.executable, "-m", "worker"]), *args],
        cwd=ROOT,
        env=env if env is not None else child_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    return Run(done.returncode, done.stdout, done.stderr)


def run_app(tmp_path: Path, *args: str, **env: str) -> tuple[Run, dict[str, Any]]:
    """Run the test app to its self-requested shutdown; return the run and its report."""
    report = tmp_path / "report.json"
    run = lease_worker("run", APP, *args, env=child_env(SHUTDOWN_APP_REPORT=str(report), **env))
    assert run.returncode == 0, run.stderr
    return run, json.loads(report.read_text())


def assert_one_error_line(run: Run, code: int, *fragments: str) -> str:
    """One error, and nothing else but log events. A failed run (status 1) under JSON logging
    ends with a JSON `worker.failed` record like every other line (issue 29); a settings
    error (status 2), or any error under console logging, with `lease-worker: error: ...`.
    Returns the line as printed (the record's `error` for JSON)."""
    assert run.returncode == code, run.stderr
    assert "Traceback" not in run.stderr, run.stderr
    failed = [event for event in run.events() if event["event"] == "worker.failed"]
    if failed:
        assert code == 1, run.stderr
        assert run.text_lines == [] and len(failed) == 1, run.stderr
        assert failed[0]["level"] == "error"
        line = str(failed[0]["error"])
    else:
        assert len(run.text_lines) == 1, run.stderr
        line = run.text_lines[0]
        assert line.startswith("lease-worker: error: "), line
    for fragment in fragments:
        assert fragment in line, (fragment, line)
    return line


def assert_usage_error(run: Run, error: str) -> None:
    """argparse's own errors: its usage block, then one `error:` line naming the option."""
    assert run.returncode == 2, run.stderr
    assert run.stdout == ""
    assert "Traceback" not in run.stderr, run.stderr
    assert run.stderr_lines[0].startswith("usage: lease-worker"), run.stderr
    errors = [line for line in run.stderr_lines if ": error: " in line]
    assert errors == [run.stderr_lines[-1]], run.stderr
    assert error in errors[0], (error, errors[0])


# -- help ------------------------------------------------------------------------------


def test_help_lists_the_run_command() -> None:
    run = lease_worker("--help")
    assert run.returncode == 0
    assert run.stderr == ""
    assert run.stdout.startswith("usage: lease-worker ")
    assert "run a worker application" in run.stdout


def test_run_help_names_every_option_and_the_environment() -> None:
    run = lease_worker("run", "--help")
    assert run.returncode == 0
    assert run.stderr == ""
    for option in OPTIONS:
        assert option in run.stdout, option
    assert "module:attribute" in run.stdout
    assert "LEASE_WORKER_" in run.stdout
    assert "SIGTERM" in run.stdout
    assert "{memory,sqs,smq}" in run.stdout and "{auto,console,json}" in run.stdout


def test_console_script_is_the_same_command() -> None:
    script = Path(sys.executable).parent / "lease-worker"
    if not script.exists():
        pytest.skip("the lease-worker script is not installed next to this interpreter")
    run = lease_worker("run", "--help", command=[str(script)])
    assert run.returncode == 0
    assert run.stdout == lease_worker("run", "--help").stdout


def test_version_prints_the_package_version_and_exits_0() -> None:
    run = lease_worker("--version")
    assert (run.returncode, run.stderr) == (0, "")
    assert run.stdout == f"lease-worker {worker.__version__}\n"
    # Installed (as every run of these tests is): the version is the distribution's, not the
    # placeholder of a checkout that was never installed.
    assert worker.__version__ == importlib.metadata.version("lease-worker")


def test_console_script_prints_the_same_version() -> None:
    script = Path(sys.executable).parent / "lease-worker"
    if not script.exists():
        pytest.skip("the lease-worker script is not installed next to this interpreter")
    run = lease_worker("--version", command=[str(script)])
    assert (run.returncode, run.stdout) == (0, f"lease-worker {worker.__version__}\n")


def test_no_command_is_a_usage_error() -> None:
    run = lease_worker()
    assert run.returncode == 2
    assert run.stdout == ""
    assert run.stderr_lines[0].startswith("usage: lease-worker")
    assert run.stderr_lines[-1] == (
        "lease-worker: error: the following arguments are required: COMMAND"
    )


# -- invalid settings: exit 2, one line naming the setting -------------------------------


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["--visibility-s", "0"], ["visibility_s=0", "1 to 43200"]),
        (["--visibility-s", "43201"], ["visibility_s=43201"]),
        (["--extension-s", "0"], ["extension_s=0"]),
        (["--renew-margin-s", "30"], ["renew_margin_s=30.0", "shorter"]),
        (["--renew-margin-s", "0"], ["renew_margin_s=0.0", "positive"]),
        (["--max-lease-s", "50000"], ["max_lease_s=50000.0", "12 h"]),
        (["--max-in-flight", "0"], ["max_in_flight=0", ">= 1"]),
        (["--grace-s", "-1"], ["grace_s=-1.0", ">= 0"]),
        (["--grace-s", "nan"], ["grace_s=nan"]),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, list) and value[0][0] == "-" else "",
)
def test_invalid_option_exits_2_with_one_line(args: list[str], fragments: list[str]) -> None:
    run = lease_worker("run", APP, *args)
    assert_one_error_line(run, 2, *fragments)
    assert run.stdout == ""


@pytest.mark.parametrize(
    ("variable", "value", "fragment"),
    [
        ("MAX_IN_FLIGHT", "0", "max_in_flight=0"),
        ("VISIBILITY_S", "0", "visibility_s=0"),
        ("EXTENSION_S", "99999", "extension_s=99999"),
        ("RENEW_MARGIN_S", "-1", "renew_margin_s=-1.0"),
        ("MAX_LEASE_S", "0", "max_lease_s=0.0"),
        ("GRACE_S", "-5", "grace_s=-5.0"),
    ],
)
def test_invalid_environment_setting_exits_2_with_one_line(
    variable: str, value: str, fragment: str
) -> None:
    run = lease_worker("run", APP, env=child_env(**{"LEASE_WORKER_" + variable: value}))
    assert_one_error_line(run, 2, fragment)


@pytest.mark.parametrize(
    ("spec", "fragments"),
    [
        ("nomodule:app", ["APP='nomodule:app'", "cannot import 'nomodule'"]),
        ("tests.apps.no_such_app:app", ["cannot import 'tests.apps.no_such_app'"]),
        ("tests.apps.shutdown_app", ["expected module:attribute"]),
        (":app", ["APP=':app'", "expected module:attribute"]),
        ("tests.apps.shutdown_app:", ["expected module:attribute"]),
        ("tests.apps.shutdown_app:NOT_A_WORKER", ["'NOT_A_WORKER'", "not a lease-worker Worker"]),
        ("tests.apps.shutdown_app:missing", ["'missing'", "not a lease-worker Worker"]),
        ("tests.apps.shutdown_app:empty", ["'empty'", "has no handlers"]),
    ],
)
def test_bad_app_exits_2_with_one_line(spec: str, fragments: list[str]) -> None:
    run = lease_worker("run", spec, "--log-format", "json")
    assert_one_error_line(run, 2, *fragments)


@pytest.mark.parametrize(
    ("args", "env", "error"),
    [
        (["--max-in-flight", "abc"], {}, "argument --max-in-flight: invalid int value: 'abc'"),
        (["--grace-s", "soon"], {}, "argument --grace-s: invalid float value: 'soon'"),
        (["--backend", "nope"], {}, "argument --backend: invalid choice: 'nope'"),
        (["--log-format", "xml"], {}, "argument --log-format: invalid choice: 'xml'"),
        (["--log-level", "loud"], {}, "argument --log-level: invalid choice: 'loud'"),
        ([], {"LEASE_WORKER_MAX_IN_FLIGHT": "abc"}, "LEASE_WORKER_MAX_IN_FLIGHT='abc': expected"),
        ([], {"LEASE_WORKER_VISIBILITY_S": "1.5"}, "LEASE_WORKER_VISIBILITY_S='1.5': expected"),
        ([], {"LEASE_WORKER_BACKEND": "nope"}, "LEASE_WORKER_BACKEND='nope': choose from"),
        ([], {"LEASE_WORKER_LOG_FORMAT": "xml"}, "LEASE_WORKER_LOG_FORMAT='xml': choose from"),
        ([], {"LEASE_WORKER_LOG_LEVEL": "loud"}, "LEASE_WORKER_LOG_LEVEL='loud': choose from"),
    ],
)
def test_value_argparse_refuses_is_a_usage_error(
    args: list[str], env: dict[str, str], error: str
) -> None:
    assert_usage_error(lease_worker("run", APP, *args, env=child_env(**env)), error)


# -- settings reach the worker: command line, then environment, then the app's config ------


def test_app_config_applies_when_nothing_is_set(tmp_path: Path) -> None:
    _, report = run_app(tmp_path, SHUTDOWN_APP_MAX_IN_FLIGHT="9", SHUTDOWN_APP_GRACE_S="12")
    assert report["config"] == {
        "max_in_flight": 9,
        "grace_s": 12.0,
        "visibility_s": 30,
        "extension_s": 30,
        "renew_margin_s": 10.0,
        "max_lease_s": 43200,
        "adaptive": False,
    }


def test_environment_settings_are_honoured(tmp_path: Path) -> None:
    run, report = run_app(
        tmp_path,
        LEASE_WORKER_BACKEND="memory",
        LEASE_WORKER_MAX_IN_FLIGHT="4",
        LEASE_WORKER_GRACE_S="7",
        LEASE_WORKER_VISIBILITY_S="20",
        LEASE_WORKER_EXTENSION_S="25",
        LEASE_WORKER_RENEW_MARGIN_S="5",
        LEASE_WORKER_MAX_LEASE_S="3600",
        LEASE_WORKER_ADAPTIVE="1",
        LEASE_WORKER_LOG_FORMAT="json",
    )
    assert report["config"] == {
        "max_in_flight": 4,
        "grace_s": 7.0,
        "visibility_s": 20,
        "extension_s": 25,
        "renew_margin_s": 5.0,
        "max_lease_s": 3600.0,
        "adaptive": True,
    }
    events = run.events()
    assert run.text_lines == []
    requested = next(e for e in events if e["event"] == "shutdown.requested")
    assert requested["grace_s"] == 7.0
    assert [e["event"] for e in events][-1] == "shutdown.complete"


def test_command_line_beats_environment(tmp_path: Path) -> None:
    _, report = run_app(
        tmp_path,
        "--max-in-flight",
        "3",
        "--grace-s",
        "2",
        "--visibility-s",
        "15",
        LEASE_WORKER_MAX_IN_FLIGHT="4",
        LEASE_WORKER_GRACE_S="7",
        LEASE_WORKER_VISIBILITY_S="20",
    )
    config = report["config"]
    assert (config["max_in_flight"], config["grace_s"], config["visibility_s"]) == (3, 2.0, 15)


@pytest.mark.parametrize(
    ("value", "adaptive"),
    [("1", True), ("true", True), ("Yes", True), ("on", True), ("0", False), ("false", False)],
)
def test_a_switch_from_the_environment_takes_the_usual_spellings(
    tmp_path: Path, value: str, adaptive: bool
) -> None:
    # Once any value but "1" silently meant off: LEASE_WORKER_ADAPTIVE=true ran without it.
    _, report = run_app(tmp_path, LEASE_WORKER_ADAPTIVE=value)
    assert report["config"]["adaptive"] is adaptive


def test_a_switch_from_the_environment_refuses_other_values() -> None:
    run = lease_worker("run", APP, env=child_env(LEASE_WORKER_ADAPTIVE="maybe"))
    assert_usage_error(run, "LEASE_WORKER_ADAPTIVE='maybe': use 1/0, true/false, yes/no or on/off")


def test_log_level_from_environment_filters_events(tmp_path: Path) -> None:
    run, _ = run_app(tmp_path, LEASE_WORKER_LOG_LEVEL="warning")
    # A clean start and stop logs nothing at warning or above but the one line saying that
    # the app's queue has no dead-letter queue.
    [line] = run.stderr.splitlines()
    assert json.loads(line)["event"] == "queue.config_warning"


def test_console_log_format(tmp_path: Path) -> None:
    run, _ = run_app(tmp_path, "--log-format", "console")
    assert run.events() == []
    assert any("worker.started" in line for line in run.text_lines), run.stderr
    assert "shutdown.complete" in run.text_lines[-1]


def test_memory_backend_creates_the_queues_the_app_does_not(tmp_path: Path) -> None:
    run, report = run_app(
        tmp_path, "--visibility-s", "45", "--log-format", "json", SHUTDOWN_APP_CREATE="0"
    )
    assert report["queue"] == {"visible": 0, "in_flight": 0, "delayed": 0}
    ready = next(e for e in run.events() if e["event"] == "queue.ready")
    assert ready["queue"] == "shutdown-test"
    assert ready["visibility_timeout_s"] == 45


def test_fatal_backend_error_exits_1_with_one_line(tmp_path: Path) -> None:
    # The app deletes its queue once the worker receives: the receiver meets QueueNotFound.
    run = lease_worker(
        "run",
        APP,
        "--log-format",
        "json",
        env=child_env(
            SHUTDOWN_APP_SELF_STOP="0",
            SHUTDOWN_APP_DELETE_QUEUE="1",
            SHUTDOWN_APP_REPORT=str(tmp_path / "report.json"),
        ),
    )
    assert_one_error_line(run, 1, "'shutdown-test' does not exist")


def test_sqs_backend_without_region_is_a_config_error() -> None:
    # No region anywhere: client creation fails before any network call. (This once died
    # with a TypeError: the CLI passed queue_urls= to an SqsSettings that had no such field.)
    run = lease_worker("run", APP, "--backend", "sqs")
    assert_one_error_line(run, 2, "region")


@pytest.mark.parametrize(
    ("queue_url", "fragment"),
    [("orders", "--queue-url 'orders': expected NAME=URL"), ("orders=", "expected NAME=URL")],
)
def test_sqs_backend_refuses_a_malformed_queue_url(queue_url: str, fragment: str) -> None:
    run = lease_worker(
        "run", APP, "--backend", "sqs", "--region", "us-east-1", "--queue-url", queue_url
    )
    assert_one_error_line(run, 2, fragment)


def test_adaptive_flag_alone_runs(tmp_path: Path) -> None:
    # Once refused: the defaults renew_margin_s=10 and adaptive_min_s=10 broke their own rule.
    _, report = run_app(tmp_path, "--adaptive")
    assert report["config"]["adaptive"] is True


@pytest.mark.parametrize("port", ["99999", "-1"])
def test_ops_port_out_of_range_exits_2(port: str) -> None:
    run = lease_worker("run", APP, "--ops-port", port)
    assert_one_error_line(run, 2, f"--ops-port={port}", "0 to 65535")


def test_ops_port_in_use_exits_2() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        run = lease_worker("run", APP, "--ops-port", port)
    assert_one_error_line(run, 2, f"127.0.0.1:{port}", "cannot listen")
