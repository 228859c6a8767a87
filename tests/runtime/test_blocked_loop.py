"""A blocked event loop is named in the log (issue 12, defect 15).

Real time, not looptime: a blocked loop is exactly what virtual time cannot show (the
virtual clock does not move while code blocks). Kept short: about 3 s.
"""

from __future__ import annotations

import time

import pytest
from structlog.testing import capture_logs

from worker import LeaseConfig, Message, Worker, WorkerConfig
from worker.testing import run_worker

pytestmark = pytest.mark.asyncio


async def test_a_loop_blocked_past_the_margin_logs_one_warning_naming_the_cause() -> None:
    """Defect 15: a loop blocked past renew_margin_s lost every lease with only a gauge to
    show it."""
    lease = LeaseConfig(visibility_s=2, extension_s=2, renew_margin_s=0.5)
    app = Worker(WorkerConfig(lease=lease, max_in_flight=1, wait_s=1))

    @app.handler("jobs")
    async def blocking(message: Message) -> None:
        time.sleep(3)  # noqa: ASYNC251 - the bug under test: blocking code in an async handler

    with capture_logs() as logs:
        async with run_worker(app) as harness:
            await harness.send("jobs", {"n": 1})
            await harness.wait_for_handled(1)
    [blocked] = [e for e in logs if e["event"] == "loop.blocked"]
    assert blocked["log_level"] == "warning"
    assert blocked["late_s"] > 0.5
    assert "blocking code in an async handler" in blocked["cause"]
