"""The import-linter contracts in pyproject.toml hold, and they catch a forbidden import.

The mutation tests copy the packages, add one import (or one module) that the design
forbids, and check that `lint-imports` fails naming the contract that forbids it: a contract
that could not fail would prove nothing. Every hole issue 32 found in the earlier contracts
is one case here.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
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


def _copy(tmp_path: Path) -> None:
    for package in ("worker", "backends"):
        shutil.copytree(ROOT / package, tmp_path / package)
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")


def _broken(done: subprocess.CompletedProcess[str]) -> list[str]:
    """The names of the broken contracts (lint-imports folds a long name over lines)."""
    text = " ".join(done.stdout.split("Broken contracts")[0].split())
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    names = [" ".join(c["name"].split()) for c in contracts["contracts"]]
    return [name for name in names if f"{name} BROKEN" in text]


@pytest.mark.parametrize(
    ("module", "added", "contract"),
    [
        ("worker/core/schedule.py", "import worker.runtime.metrics", "worker's layers"),
        ("worker/core/histogram.py", "import asyncio", "the core is pure"),
        ("worker/runtime/slots.py", "import backends.memory", "only the composition roots"),
        ("backends/memory/queue.py", "import worker.runtime.metrics", "backends import only"),
        ("backends/serve/sqs/members.py", "import backends.sqs.wire", "the front ends"),
        ("backends/sqs/wire.py", "import backends.memory.config", "one backend never"),
        # The holes issue 32 found: each was kept by the contracts before.
        ("backends/memory/engine.py", "import worker.sending.producer", "backends import only"),
        ("worker/ops/health.py", "import backends.memory", "only the composition roots"),
        ("worker/idempotency/guard.py", "import backends.sqs", "only the composition roots"),
        ("worker/core/lease.py", "import time", "the core is pure"),
        ("worker/core/lease.py", "import logging", "the core is pure"),
        ("worker/core/lease.py", "import threading", "the core is pure"),
        ("worker/core/schedule.py", "import os", "the core is pure"),
        ("worker/core/schedule.py", "import random", "the core is pure"),
        ("worker/envelope/codecs.py", "import worker.app", "worker's layers"),
        ("worker/types.py", "import worker.jsonlib", "worker's layers"),
        ("worker/message.py", "import worker.registry", "worker's layers"),
        ("worker/signature.py", "import worker.middleware", "worker's layers"),
        # The two sides apart: the runtime runs a plain AppSpec, and neither side imports
        # the other.
        ("worker/runtime/queues.py", "import worker.app", "the runtime runs an AppSpec"),
        ("worker/runtime/handlers.py", "import worker.sending.producer", "worker's layers"),
        ("worker/sending/producer.py", "import worker.registry", "the sending side imports"),
        ("worker/sending/outgoing.py", "import worker.runtime.slots", "the sending side imports"),
        ("worker/ops/status.py", "import worker.app", "the runtime runs an AppSpec"),
        ("worker/app.py", "import worker.integrations.spark", "nothing in worker or backends"),
        ("backends/memory/queue.py", "import worker.integrations", "nothing in worker or backends"),
        ("worker/idempotency/store.py", "import worker.runtime.slots", "only worker's facade"),
        ("backends/serve/sqs/errors.py", "import backends.serve.sqs.admin", "no import cycles"),
    ],
)
def test_a_forbidden_import_breaks_its_contract(
    tmp_path: Path, module: str, added: str, contract: str
) -> None:
    _copy(tmp_path)
    target = tmp_path / module
    target.write_text(target.read_text() + f"\n{added}  # the forbidden import\n")
    done = _lint(tmp_path)
    assert done.returncode == 1, done.stdout[-3000:]
    broken = _broken(done)
    assert any(name.startswith(contract) for name in broken), (broken, done.stdout[-3000:])


@pytest.mark.parametrize("new", ["worker/stray.py", "worker/stray/__init__.py"])
def test_a_module_in_no_layer_breaks_the_layers(tmp_path: Path, new: str) -> None:
    """The layers are exhaustive: a new module of worker must be given a layer."""
    _copy(tmp_path)
    (tmp_path / new).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / new).write_text('"""A module nobody placed."""\n')
    done = _lint(tmp_path)
    assert done.returncode != 0, done.stdout[-3000:]
    assert "stray" in done.stdout + done.stderr


def test_the_top_level_holds_the_contract_and_the_declarations_only() -> None:
    top = sorted(path.name for path in (ROOT / "worker").glob("*.py"))
    assert len(top) <= 14, top
    assert not {"producer.py", "tracing.py", "payloads.py", "testing.py"} & set(top)


def test_no_test_module_is_named_after_a_review_round() -> None:
    history = re.compile(r"test_(review|hardening|defects|.*_defects|regressions?)\b")
    named = [p.relative_to(ROOT) for p in (ROOT / "tests").rglob("test_*.py")]
    assert [p for p in named if history.match(p.stem)] == []
