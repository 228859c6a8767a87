# mypy: disable-error-code="import-not-found"
# The tutorial shows this file from here on (docs/tutorial/testing.md): the reader keeps it
# beside app.py, where `from app import app` resolves; mypy, run from the repository root, cannot.
# --8<-- [start:file]
# test_app.py
import asyncio

import pytest
from app import app

from worker import Outcome
from worker.testing import run_worker


@pytest.mark.asyncio
@pytest.mark.looptime  # virtual time: sleeps and lease renewals take no real time
async def test_every_order_ships_once() -> None:
    async with run_worker(app) as harness:  # the in-memory engine, queue "orders" created
        handled = await harness.wait_for_handled(5)  # send_orders sends five at start
    ids = sorted(h.message.body["id"] for h in handled)
    assert ids == [1, 2, 3, 4, 5]
    assert all(h.outcome is Outcome.SUCCEEDED for h in handled)


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_an_hour_long_order_keeps_its_lease() -> None:
    loop = asyncio.get_running_loop()
    async with run_worker(app) as harness:
        await harness.wait_for_handled(5)
        started = loop.time()
        await harness.send("orders", {"id": 42, "work_s": 3600})
        # Waits end after an hour of the loop's clock unless told otherwise.
        [*_, handled] = await harness.wait_for_handled(6, timeout_s=2 * 3600)
        hour = loop.time() - started
    assert handled.outcome is Outcome.SUCCEEDED
    assert 3600 <= hour < 3601  # an hour of the loop's time, in a fraction of a second
    renewals = harness.metrics.registry.get_sample_value(
        "lease_worker_lease_renewals_total", {"queue": "orders"}
    )
    assert renewals is not None and renewals >= 3600 / 6  # renewed all along, never lost


# --8<-- [end:file]
