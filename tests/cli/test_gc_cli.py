"""`lease-worker run --gc-threshold`: the collector a running worker gets, and its checks."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from tests.cli import gc_app
from worker.cli.main import main
from worker.runtime.garbage import DEFAULT_FIRST_THRESHOLD, collect_less


@pytest.fixture
def collector() -> Iterator[None]:
    """Puts CPython's collector back as it was (thresholds, nothing frozen)."""
    before = gc.get_threshold()
    gc_app.seen.clear()
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


@pytest.mark.parametrize(
    ("argv", "first"),
    [
        ([], DEFAULT_FIRST_THRESHOLD),
        (["--gc-threshold", "20000"], 20_000),
        (["--gc-threshold", "0"], None),
    ],
)
def test_a_running_worker_gets_the_threshold(
    collector: None, argv: list[str], first: int | None, capsys: pytest.CaptureFixture[str]
) -> None:
    python_default = gc.get_threshold()
    status = main(["run", "tests.cli.gc_app:app", "--log-level", "error", *argv])
    assert status == 1  # the background task ended the worker once it had looked
    expected = python_default if first is None else (first, *python_default[1:])
    assert gc_app.seen == [expected]


def test_a_negative_threshold_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "tests.cli.gc_app:app", "--gc-threshold", "-1"]) == 2
    assert capsys.readouterr().err == "lease-worker: error: --gc-threshold=-1: must be >= 0\n"


def test_the_environment_sets_it(
    collector: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LEASE_WORKER_GC_THRESHOLD", "30000")
    python_default = gc.get_threshold()
    assert main(["run", "tests.cli.gc_app:app", "--log-level", "error"]) == 1
    assert gc_app.seen == [(30_000, *python_default[1:])]
