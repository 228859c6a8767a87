"""The wheel that `pip install` builds holds every package and data file of the source tree.

Once, `packages = ["worker", "backends"]` shipped only those two: an installed lease-worker
had no worker.core, worker.runtime or worker.cli, which an editable install (the tests'
own) never showed.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.timeout(120)
def test_the_wheel_holds_every_package_and_data_file(tmp_path: Path) -> None:
    build = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--quiet",
            "--wheel-dir",
            str(tmp_path),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert build.returncode == 0, build.stderr[-2000:]
    [wheel] = tmp_path.glob("lease_worker-*.whl")
    shipped = set(zipfile.ZipFile(wheel).namelist())
    for top in ("worker", "backends"):
        for init in (ROOT / top).rglob("__init__.py"):
            assert init.relative_to(ROOT).as_posix() in shipped
        for module in (ROOT / top).rglob("*.py"):
            assert module.relative_to(ROOT).as_posix() in shipped
    assert {"worker/py.typed", "backends/py.typed"} <= shipped
    for static in (ROOT / "worker" / "ops" / "static").glob("*"):
        assert static.relative_to(ROOT).as_posix() in shipped
