"""The side-by-side benchmark's machinery at a tiny size. Figures are not checked.

The whole section, peers included, runs in tests/test_bench_smoke.py (`bench.report --smoke`);
here: lease-worker and the floor drain a queue through a fresh endpoint with requests counted,
a contender that dies is a row saying why, and CPU is read across a process tree.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from bench import _harness, side_by_side
from bench.peers import contenders as peers
from bench.peers.contenders import Contender

pytestmark = pytest.mark.process

MESSAGES = 60


def _ours(name: str) -> Contender:
    return next(c for c in peers.contenders() if c.name == name)


@pytest.mark.parametrize("name", ["lease-worker", "bare aiobotocore loop", peers.FLOOR])
def test_drains_the_queue_and_counts_its_requests(name: str) -> None:
    row = side_by_side.measure(_ours(name), MESSAGES)
    assert row.failure is None
    assert row.wall_s > 0
    assert row.worker_cpu_s >= 0 and row.server_cpu_s >= 0
    # Deleted in batches of at most 10, whatever the timing.
    assert row.requests["DeleteMessageBatch"] >= MESSAGES // 10
    assert row.requests["ReceiveMessage"] >= MESSAGES // 10


def test_a_contender_that_dies_is_a_row_saying_why(tmp_path: Path) -> None:
    broken = Contender(
        "broken",
        "exits at once",
        (sys.executable, "-c", "import sys; sys.exit('no queue for me')"),
    )
    got = side_by_side.attempt(broken, MESSAGES)
    assert isinstance(got, str)
    assert "status 1" in got and "no queue for me" in got
    row = side_by_side.Row(broken, "?", MESSAGES, failure=got)
    assert "**not measured**" in side_by_side.table([row])[-1]
    assert "not measured" in side_by_side.summary([row])
    side_by_side.plot([row], tmp_path / "side_by_side.png")
    assert (tmp_path / "side_by_side.png").stat().st_size > 1000


def test_cpu_is_read_across_the_process_tree(tmp_path: Path) -> None:
    # The parent only waits; its child burns about 0.3 s of CPU, then sleeps.
    child = tmp_path / "child.py"
    child.write_text(
        "import time\n"
        "end = time.process_time() + 0.3\n"
        "while time.process_time() < end:\n"
        "    pass\n"
        "time.sleep(30)\n"
    )
    parent = (
        "import subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, {str(child)!r}])\n"
        "print('done', flush=True)\n"
        "time.sleep(30)\n"
    )
    with _harness.started([sys.executable, "-c", parent], env={}) as process:
        assert process.done.wait(10)
        for _ in range(100):
            if _harness.cpu_s(process.pid) >= 0.25:
                break
            time.sleep(0.1)
        assert _harness.cpu_s(process.pid) >= 0.25
    assert process.exited() is not None
