"""The import-linter contracts in pyproject.toml hold, and they catch a forbidden import.

The second test copies the packages, adds one import that breaks a layer, and checks that
`lint-imports` fails naming it: a contract that could not fail would prove nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_contracts_hold() -> None:
    done = _lint(ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "0 broken" in done.stdout


@pytest.mark.parametrize(
    ("module", "added", "contract"),
    [
        ("worker/core/schedule.py", "import worker.runtime.metrics", "worker's layers"),
        ("worker/core/histogram.py", "import asyncio", "the core is pure"),
        ("worker/runtime/slots.py", "import backends.memory", "only the composition roots"),
        ("backends/memory/queue.py", "import worker.runtime.metrics", "backends import only"),
        ("backends/serve/sqs/members.py", "import backends.sqs.wire", "the front ends"),
        ("backends/sqs/wire.py", "import backends.memory.config", "one backend never"),
    ],
)
def test_a_forbidden_import_breaks_its_contract(
    tmp_path: Path, module: str, added: str, contract: str
) -> None:
    for package in ("worker", "backends"):
        shutil.copytree(ROOT / package, tmp_path / package)
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / module
    target.write_text(target.read_text() + f"\n{added}  # the forbidden import\n")
    done = _lint(tmp_path)
    assert done.returncode == 1, done.stdout[-3000:]
    broken = [line for line in done.stdout.splitlines() if line.endswith("BROKEN")]
    assert len(broken) >= 1 and any(contract in line for line in broken), done.stdout
