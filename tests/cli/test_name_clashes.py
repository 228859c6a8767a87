"""A user's own `worker.py` and `backends/` beside their app, with real processes.

The user's directory is a copy of `tests/apps/clash`: `app.py` sends itself one message and
stops once it has handled it; `worker.py` and `backends/` end the process if anything imports
them. Every run is bounded by `TIMEOUT_S`.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.cli.test_cli import APP, ROOT, Run, assert_one_error_line, child_env

CLASH_APP = ROOT / "tests" / "apps" / "clash"
TIMEOUT_S = 30
pytestmark = pytest.mark.process

WARNING = (
    "lease-worker's own packages hide ./worker.py and ./backends/: `import worker` and "
    "`import backends` give lease-worker's, never these; rename them, e.g. ./worker.py to "
    "tasks.py, ./backends/ to app_backends/"
)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return Path(shutil.copytree(CLASH_APP, tmp_path / "project"))


def _script() -> str:
    script = Path(sys.executable).parent / "lease-worker"
    if not script.exists():
        pytest.skip("the lease-worker script is not installed next to this interpreter")
    return str(script)


def lease_worker(cwd: Path, *args: str) -> Run:
    """The `lease-worker` command as a user runs it, from `cwd`."""
    try:
        done = subprocess.run(
            [_script(), *args],
            cwd=cwd,
            env=child_env(),
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as expired:
        stderr = expired.stderr.decode() if isinstance(expired.stderr, bytes) else ""
        pytest.fail(f"still running after {TIMEOUT_S} s; its last lines: {stderr[-1500:]}")
    return Run(done.returncode, done.stdout, done.stderr)


def named(run: Run, name: str) -> list[dict[str, Any]]:
    return [event for event in run.events() if event["event"] == name]


def assert_ran_with_one_warning(run: Run) -> None:
    assert run.returncode == 0, run.stderr
    assert run.text_lines == [], run.stderr  # nothing but log events: no SystemExit text
    [warning] = named(run, "app.name_clash")
    assert warning["level"] == "warning"
    assert warning["files"] == ["./worker.py", "./backends/"]
    assert warning["detail"] == WARNING


def test_an_app_beside_a_worker_py_and_backends_runs_with_one_warning(project: Path) -> None:
    run = lease_worker(project, "run", "app:app", "--log-format", "json")
    assert_ran_with_one_warning(run)
    [handled] = named(run, "clash_app.handled")
    assert handled["process_index"] is None
    assert named(run, "shutdown.complete") != []


def test_processes_children_import_lease_worker_not_the_users_worker_py(project: Path) -> None:
    # The parent once started its children with `python -m worker`, which puts the current
    # directory first on sys.path: the user's worker.py ran instead of lease-worker.
    run = lease_worker(project, "run", "app:app", "--processes", "2", "--log-format", "json")
    assert_ran_with_one_warning(run)  # the parent's; the children do not repeat it
    handled = named(run, "clash_app.handled")
    assert sorted(event["process_index"] for event in handled) == ["0", "1"]
    assert named(run, "process.died") == []
    assert sorted(event["status"] for event in named(run, "process.exited")) == [0, 0]


@pytest.mark.parametrize("processes", ["1", "2"])
def test_app_in_the_users_worker_py_is_one_line_error(project: Path, processes: str) -> None:
    run = lease_worker(project, "run", "worker:app", "--processes", processes)
    line = assert_one_error_line(run, 2)
    assert line == (
        "lease-worker: error: APP='worker:app': ./worker.py has the same name as "
        "lease-worker's own package 'worker' and cannot be imported under that name; rename "
        "it, e.g. to tasks.py"
    )


def test_app_in_the_users_backends_is_one_line_error(project: Path) -> None:
    (project / "backends" / "jobs.py").write_text("app = None\n")
    run = lease_worker(project, "run", "backends.jobs:app")
    assert_one_error_line(
        run,
        2,
        "APP='backends.jobs:app': ./backends/ has the same name as lease-worker's own "
        "package 'backends'",
        "rename it, e.g. to app_backends/",
    )


def test_no_warning_in_lease_workers_own_checkout(tmp_path: Path) -> None:
    # Here ./worker/ and ./backends/ are lease-worker's packages themselves.
    report = tmp_path / "report.json"
    env = child_env(SHUTDOWN_APP_REPORT=str(report))
    done = subprocess.run(
        [sys.executable, "-m", "worker", "run", APP, "--log-format", "json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    run = Run(done.returncode, done.stdout, done.stderr)
    assert run.returncode == 0, run.stderr
    assert named(run, "worker.started") != []
    assert named(run, "app.name_clash") == []
    assert json.loads(report.read_text())["queue"] is not None
