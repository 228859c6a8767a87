"""Helpers for testing handlers: run a worker on the in-memory engine inside a test.

::

    async def test_orders() -> None:
        async with run_worker(app) as harness:
            await harness.send("orders", {"id": 1})
            [record] = await harness.wait_for_handled(1)
            assert record.outcome is Outcome.SUCCEEDED

Run such tests with the event loop's clock fast-forwarded (pytest's `looptime` plugin,
`@pytest.mark.looptime`): a handler that sleeps for an hour then takes no real time, and
every lease renewal in between happens on schedule. The worker's time is the event loop's
clock, always: `run_worker` (and `Supervisor`) take no clock, and refuse an in-memory
engine on a `ManualClock`, whose time would stand still under a running worker.
`ManualClock` drives the pure parts by hand: the engine on its own (`MemoryEngine(clock)`,
no worker), the lease schedule.

Synchronous handlers run in threads, which no clock can fast-forward. While one runs,
looptime waits for it in real time instead of racing from timer to timer (it sees the
thread through the loop's `run_in_executor`): the loop's clock moves no faster than the
real one, so a renewal that falls due while the thread runs happens on time, and a
handler's `time.sleep(2)` costs 2 real seconds. Keep synchronous handlers short in tests,
or block them on a `threading.Event` that the test sets; bound waits with `fail_after`.

`FaultyBackend` wraps any backend (the in-memory one, on either dialect) to give planned
calls the other fates a call can meet: `late` (it lands, its answer comes `by_s` later),
`lose` (it lands, no answer ever comes), `refuse` (an error, nothing sent); `stall` freezes
the event loop as a SIGSTOP or a long GC pause would (under looptime the loop's clock jumps
with no callback running in between). Every call and its `Fate` is in `calls`::

    backend = FaultyBackend(MemoryBackend())
    backend.late("extend", by_s=40)  # the first extension lands; its answer comes 40 s on
    async with run_worker(app, backend=backend) as harness:
        ...
    assert [call.fate for call in backend.calls if call.operation == "extend"][0] is Fate.LATE
"""

from worker.clock import ManualClock
from worker.testing.faults import Fate, FaultyBackend
from worker.testing.harness import Handled, HandledMessage, WorkerHarness, run_worker

__all__ = (
    "Fate",
    "FaultyBackend",
    "Handled",
    "HandledMessage",
    "ManualClock",
    "WorkerHarness",
    "run_worker",
)
