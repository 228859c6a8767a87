"""Loading APP beside a user's own `worker.py` and `backends/` (`worker.cli.loader`), in
process: which files clash, the errors and the one warning.

The user's directory is a copy of `tests/apps/clash`, whose `worker.py` and `backends/` end
the process if anything imports them.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

import backends
import worker
from worker.app import Worker
from worker.cli.loader import Clash, find_clashes, load_app
from worker.cli.processes import INDEX_VARIABLE
from worker.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
CLASH_APP = ROOT / "tests" / "apps" / "clash"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A copy of the user's directory, the current directory; what load_app adds to
    sys.path and sys.modules is undone afterwards."""
    project = tmp_path / "project"
    shutil.copytree(CLASH_APP, project)
    monkeypatch.chdir(project)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delenv(INDEX_VARIABLE, raising=False)
    yield project
    for name, module in list(sys.modules.items()):
        if str(getattr(module, "__file__", None) or "").startswith(str(tmp_path)):
            del sys.modules[name]


def _error(spec: str) -> str:
    with pytest.raises(ConfigError) as raised:
        load_app(spec)
    return str(raised.value)


def test_a_users_worker_module_and_backends_package_clash(project: Path) -> None:
    assert find_clashes(project) == [
        Clash("worker", project / "worker.py", is_package=False),
        Clash("backends", project / "backends", is_package=True),
    ]


def test_lease_workers_own_checkout_is_no_clash() -> None:
    assert find_clashes(ROOT) == []


def test_a_link_to_lease_workers_own_package_is_no_clash(tmp_path: Path) -> None:
    (tmp_path / "worker").symlink_to(ROOT / "worker", target_is_directory=True)
    assert find_clashes(tmp_path) == []


def test_a_folder_with_no_python_in_it_is_no_clash(tmp_path: Path) -> None:
    (tmp_path / "worker").mkdir()
    (tmp_path / "worker" / "Dockerfile").write_text("FROM python:3.11\n")
    assert find_clashes(tmp_path) == []
    (tmp_path / "worker" / "tasks.py").write_text("")
    assert find_clashes(tmp_path) == [Clash("worker", tmp_path / "worker", is_package=True)]


@pytest.mark.parametrize(
    ("spec", "hidden", "rename_to"),
    [
        ("worker:app", "./worker.py", "tasks.py"),
        ("backends:app", "./backends/", "app_backends/"),
        ("backends.jobs:app", "./backends/", "app_backends/"),
    ],
)
def test_an_app_under_one_of_lease_workers_names_is_an_error(
    project: Path, spec: str, hidden: str, rename_to: str
) -> None:
    package = spec.partition(".")[0].partition(":")[0]
    assert _error(spec) == (
        f"APP={spec!r}: {hidden} has the same name as lease-worker's own package {package!r} "
        f"and cannot be imported under that name; rename it, e.g. to {rename_to}"
    )


def test_the_rename_suggested_is_a_name_not_in_use(project: Path) -> None:
    (project / "app.py").rename(project / "main.py")
    assert _error("worker:app").endswith("rename it, e.g. to app.py")


def test_an_app_beside_clashing_files_loads_ours_and_warns_once(project: Path) -> None:
    with capture_logs() as logs:
        app = load_app("app:app")
    assert isinstance(app, Worker) and app.name == "clash-app"
    assert sys.modules["worker"] is worker and sys.modules["backends"] is backends
    assert logs == [
        {
            "event": "app.name_clash",
            "log_level": "warning",
            "files": ["./worker.py", "./backends/"],
            "detail": "lease-worker's own packages hide ./worker.py and ./backends/: "
            "`import worker` and `import backends` give lease-worker's, never these; rename "
            "them, e.g. ./worker.py to tasks.py, ./backends/ to app_backends/",
        }
    ]


def test_a_child_of_processes_does_not_repeat_the_warning(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(INDEX_VARIABLE, "1")
    with capture_logs() as logs:
        load_app("app:app")
    assert logs == []


def test_an_import_of_the_hidden_file_says_why(project: Path) -> None:
    (project / "uses_helper.py").write_text("from worker import helper\n")
    with capture_logs():
        error = _error("uses_helper:app")
    assert error.startswith("APP='uses_helper:app': cannot import 'worker': ./worker.py has ")
    assert error.endswith("rename it, e.g. to tasks.py")


def test_an_import_under_a_hidden_folder_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "worker").mkdir()
    (tmp_path / "worker" / "tasks.py").write_text("")
    (tmp_path / "uses_tasks.py").write_text("import worker.tasks\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    with capture_logs():
        error = _error("uses_tasks:app")
    assert error == (
        "APP='uses_tasks:app': cannot import 'worker.tasks': ./worker/ has the same name as "
        "lease-worker's own package 'worker' and cannot be imported under that name; rename "
        "it, e.g. to app/"
    )
    sys.modules.pop("uses_tasks", None)


def test_other_import_errors_keep_their_traceback(project: Path) -> None:
    (project / "broken.py").write_text("from json import no_such_name\n")
    with capture_logs(), pytest.raises(ImportError, match="no_such_name"):
        load_app("broken:app")
