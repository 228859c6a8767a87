"""A real `lease-worker run` with one undecodable body and no dead-letter queue (issue 28, 1).

Under the old default (release at visibility 0) the body came back as fast as the engine
answered: 3,604 receives in 192 s. A few seconds of a real process tell the two apart (the
default's third receive is 3-5 s after the second); the minute of the issue's measurement is
`POISON_RUN_S=60 lease-worker run tests.apps.poison_app:app --backend memory`, by hand.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.json_log import JsonLog

ROOT = Path(__file__).resolve().parents[2]
RUN_S = 6
WARNING = (
    "queue 'poison' has no dead-letter queue: a message that always fails is received again "
    "and again until the retention period ends (error policy 'default': backing off to once "
    "every 450-900 s); give the queue a RedrivePolicy (a dead-letter queue and maxReceiveCount)"
)


@pytest.mark.process
@pytest.mark.timeout(60)
def test_a_poison_message_is_received_a_few_times_and_the_start_warns_once() -> None:
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "worker", "run", "tests.apps.poison_app:app"),
            *("--backend", "memory", "--log-format", "json"),
        ],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "POISON_RUN_S": str(RUN_S)},
    )
    log = JsonLog(proc, 30.0)
    try:
        log.next(lambda event: event.get("event") == "shutdown.complete", "the shutdown")
        assert proc.wait(timeout=30) == 0
        log.drain()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    receives = [e for e in log.events if e.get("event") == "handler.undecodable_body"]
    # 0 s, at once, then 3-5 s later: 3 within RUN_S (the old default: over a hundred).
    assert 2 <= len(receives) <= 4, f"{len(receives)} receives in {RUN_S} s"
    warnings = [e for e in log.events if e.get("level", e.get("log_level")) == "warning"]
    assert [e.get("warning") for e in warnings] == [WARNING]
