"""Every benchmark at smoke size, so that none of them rots. Figures are not checked."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: The report's own bound; the test's timeout is above it, so that this one fails first.
REPORT_S = 150


@pytest.mark.process  # the report starts worker and server processes
@pytest.mark.timeout(REPORT_S + 30)
def test_bench_report_runs_at_smoke_size(tmp_path: Path) -> None:
    out = tmp_path / "docs" / "benchmarks.md"
    done = subprocess.run(
        [sys.executable, "-m", "bench.report", "--smoke", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=REPORT_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    text = out.read_text()
    for heading in (
        "## 1. Engine throughput",
        "## 2. Lease scale",
        "## 3. Side by side over the SQS protocol",
        "## 4. Cost of long handlers",
    ):
        assert heading in text
    assert "| lease-worker, no-op async handler |" in text
    assert (tmp_path / "docs" / "bench" / "long_handlers.png").stat().st_size > 1000
    assert (tmp_path / "docs" / "bench" / "throughput.png").stat().st_size > 1000
