"""Every benchmark at smoke size, so that none of them rots. Figures are not checked."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: The report's own bound; the test's timeout is above it, so that this one fails first. A
#: guard against a hang, not a figure: about a minute on an idle 2-core machine, and more
#: than 150 s beside the rest of the suite on a loaded one.
REPORT_S = 300


@pytest.mark.process  # the report starts worker and server processes
@pytest.mark.timeout(REPORT_S + 30)
def test_bench_report_runs_at_smoke_size(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    done = subprocess.run(
        [sys.executable, "-m", "bench.report", "--smoke", "--out", str(docs / "benchmarks.md")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=REPORT_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    text = (docs / "benchmarks.md").read_text()
    for heading in (
        "## Issue 33's goals at a glance",
        "## 1. Engine throughput",
        "## 2. Lease scale",
        "## 3. Side by side over the SQS protocol",
        "## 4. Scale-out",
        "## 5. Cost of long handlers",
        "## 6. SMQ: renewal cost",
        "## 7. Profile",
        "## 8. Side by side over a network",
    ):
        assert heading in text
    assert "| asyncio |" in text  # the engine's row on asyncio's loop
    assert "| lease-worker, lean path, uvloop |" in text
    for image in ("throughput.png", "side_by_side.png", "scale_out.png", "long_handlers.png"):
        assert (docs / "bench" / image).stat().st_size > 1000, image
    profile = (docs / "profile.md").read_text()
    assert "## Share of own time by layer" in profile
    assert "| runtime |" in profile and "| botocore |" in profile
    # py-spy's flame graphs, or the page says why there are none.
    for flame in ("flame_engine.svg", "flame_sqs.svg"):
        drawn = (docs / "bench" / flame).exists()
        assert drawn or "No flame graph" in profile, flame
