"""Settings are checked against the backend's own limits when the worker is made."""

from __future__ import annotations

import pytest

from backends.memory import MemoryBackend
from worker import ConfigError, Message, Worker, WorkerConfig
from worker.runtime.supervisor import Supervisor


def _app(wait_s: int) -> Worker:
    app = Worker(WorkerConfig(wait_s=wait_s))

    @app.handler("jobs")
    async def job(message: Message) -> None:
        return None

    return app


def test_a_wait_over_the_backend_s_longest_poll_is_refused_with_its_limit() -> None:
    with pytest.raises(ConfigError, match=r"wait_s=30.*20"):
        Supervisor(_app(30), MemoryBackend())


def test_a_wait_within_the_limit_is_accepted() -> None:
    assert Supervisor(_app(20), MemoryBackend()).app.config.wait_s == 20
