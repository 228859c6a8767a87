"""`lease-worker run --gc-threshold`: the collector a running worker process gets, and its
checks. Real processes: `run` configures logging for the whole process."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from worker.cli.main import main
from worker.runtime.garbage import DEFAULT_FIRST_THRESHOLD, collect_less

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def collector() -> Iterator[None]:
    """Puts this process's collector back as it was (thresholds, nothing frozen)."""
    before = gc.get_threshold()
    try:
        yield
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()


def test_collect_less_freezes_and_raises_the_first_threshold(collector: None) -> None:
    gc.unfreeze()
    before = gc.get_threshold()
    assert collect_less(12_345) == before
    assert gc.get_threshold() == (12_345, before[1], before[2])
    assert gc.get_freeze_count() > 1_000  # the modules and objects start-up made
    with pytest.raises(ValueError, match="must be >= 1"):
        collect_less(0)


def _thresholds_seen(*argv: str, env: dict[str, str] | None = None) -> list[int]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("LEASE_WORKER_")}
    environment.update(env or {})
    done = subprocess.run(
        [sys.executable, "-m", "worker", "run", "tests.cli.gc_app:app", *argv],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 1, done.stderr[-2000:]  # the background task ended it
    [line] = [line for line in done.stdout.splitlines() if line.startswith("gc-threshold")]
    return [int(value) for value in line.split()[1:]]


@pytest.mark.process
def test_a_running_worker_gets_the_threshold() -> None:
    fresh = subprocess.run(
        [sys.executable, "-c", "import gc; print(*gc.get_threshold())"],
        capture_output=True,
        text=True,
        check=True,
    )
    python_default = [int(value) for value in fresh.stdout.split()]  # CPython's own
    assert _thresholds_seen() == [DEFAULT_FIRST_THRESHOLD, *python_default[1:]]
    assert _thresholds_seen("--gc-threshold", "20000") == [20_000, *python_default[1:]]
    assert _thresholds_seen("--gc-threshold", "0") == python_default
    seen = _thresholds_seen(env={"LEASE_WORKER_GC_THRESHOLD": "30000"})
    assert seen == [30_000, *python_default[1:]]


def test_a_negative_threshold_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "tests.cli.gc_app:app", "--gc-threshold", "-1"]) == 2
    assert capsys.readouterr().err == "lease-worker: error: --gc-threshold=-1: must be >= 0\n"
