"""Issue 12, defect 13: the worker's time is the event loop's clock, and the API says so.

`Supervisor(clock=...)` was accepted and not honoured (the lease keeper's, the settler's and
the drain's timers all ran on the loop's clock), and a worker over an engine on a
`ManualClock` crashed in its receive loop on every call (the clock cannot sleep), while the
README said `ManualClock` drives the engine under a worker.
"""

from __future__ import annotations

import pytest

from backends.memory import MemoryBackend
from worker import ConfigError, ManualClock, Message, Supervisor, Worker
from worker.testing import run_worker

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]


def _app() -> Worker:
    app = Worker()

    @app.handler("jobs")
    async def job(message: Message) -> None:
        return None

    return app


async def test_the_supervisor_takes_no_clock_it_would_not_honour() -> None:
    with pytest.raises(TypeError, match="clock"):
        Supervisor(_app(), MemoryBackend(), clock=ManualClock())  # type: ignore[call-arg]


async def test_run_worker_refuses_an_engine_on_a_manual_clock() -> None:
    backend = MemoryBackend(clock=ManualClock())
    with pytest.raises(ConfigError, match="ManualClock"):
        async with run_worker(_app(), backend=backend):
            pass
