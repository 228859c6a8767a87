"""The wheel that `pip install` builds holds every package and data file of the source tree,
and its metadata says the license the way PEP 639 does, built without a warning.

Once, `packages = ["worker", "backends"]` shipped only those two: an installed lease-worker
had no worker.core, worker.runtime or worker.cli, which an editable install (the tests'
own) never showed. And `license = { text = "Apache-2.0" }` made setuptools print a
deprecation banner on every build (a TOML table for `project.license`, refused after
2027-02-18): `license = "Apache-2.0"` is the SPDX expression PEP 639 asks for.

The build is offline (no build isolation): pip checks that this environment's setuptools
meets `[build-system] requires` (`--check-build-dependencies`).
"""

from __future__ import annotations

import email.parser
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Build:
    wheel: Path
    output: str  # pip's and the build backend's output, verbose


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> Build:
    out = tmp_path_factory.mktemp("wheel")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--check-build-dependencies",
            "--disable-pip-version-check",
            "--verbose",  # the backend's own output: where setuptools prints its banners
            "--wheel-dir",
            str(out),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    [wheel] = out.glob("lease_worker-*.whl")
    return Build(wheel, done.stdout + done.stderr)


@pytest.mark.timeout(120)
def test_the_wheel_holds_every_package_and_data_file(build: Build) -> None:
    shipped = set(zipfile.ZipFile(build.wheel).namelist())
    for top in ("worker", "backends"):
        for init in (ROOT / top).rglob("__init__.py"):
            assert init.relative_to(ROOT).as_posix() in shipped
        for module in (ROOT / top).rglob("*.py"):
            assert module.relative_to(ROOT).as_posix() in shipped
    assert {"worker/py.typed", "backends/py.typed"} <= shipped
    for static in (ROOT / "worker" / "ops" / "static").glob("*"):
        assert static.relative_to(ROOT).as_posix() in shipped


@pytest.mark.timeout(120)
def test_the_license_is_an_spdx_expression_and_the_build_prints_no_deprecation(
    build: Build,
) -> None:
    archive = zipfile.ZipFile(build.wheel)
    [metadata_path] = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
    metadata = email.parser.HeaderParser().parsestr(archive.read(metadata_path).decode())
    assert metadata.get_all("License-Expression") == ["Apache-2.0"]
    assert metadata.get("License") is None  # the free-text field PEP 639 deprecates
    assert metadata.get_all("License-File") == ["LICENSE"]
    dist_info = metadata_path.rsplit("/", 1)[0]
    assert f"{dist_info}/licenses/LICENSE" in archive.namelist()
    warnings = [
        line
        for line in build.output.splitlines()
        if "deprecat" in line.lower() or "BuildBackendWarning" in line
    ]
    assert warnings == []
