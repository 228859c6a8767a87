"""A backstop behind pytest-timeout, for hangs its SIGALRM cannot end.

pytest-timeout (`timeout` in pyproject.toml, `@pytest.mark.timeout(N)` per test) ends a test
by raising from a SIGALRM handler. That fails a test blocked in an `await`, a sleep or a
loop of its own; but when the event loop is busy running callbacks (one that keeps
scheduling another), the exception is raised inside a callback, and asyncio's `Handle._run`
catches it and only logs it, so the test runs on; a SIGINT only cancels the main task. A
callback loop in the runtime once kept a run going 38 minutes that way.

So each timed test also arms faulthandler's watchdog, a C thread that needs no Python code
to run: `BACKSTOP_S` after the timeout it writes every thread's stack to the terminal and
ends the whole run. A hang that pytest-timeout can end is ended by it first, and the run
goes on.

`LEASE_WORKER_TEST_LOOP=uvloop` runs every pytest-asyncio test on a uvloop event loop (through
pytest-asyncio's `pytest_asyncio_loop_factories` hook), e.g. the contract and fault suites:
`LEASE_WORKER_TEST_LOOP=uvloop pytest tests/contract tests/backends/sqs/test_faults.py`.
Unset or `asyncio`: pytest-asyncio's default loop.
"""

from __future__ import annotations

import asyncio
import faulthandler
import logging
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
import structlog

from tests.aws_calls import AwsCallsPlugin
from tests.moto_server import MotoServer, start_moto

#: Seconds after a test's timeout before the whole run is ended.
BACKSTOP_S = 15.0
#: The environment variable that picks the tests' event loop: asyncio (default) or uvloop.
TEST_LOOP_VARIABLE = "LEASE_WORKER_TEST_LOOP"

_stderr_fd: int | None = None


def pytest_configure(config: pytest.Config) -> None:
    global _stderr_fd
    # A copy of the terminal's stderr: while a test runs, fd 2 goes to pytest's capture,
    # which is lost when the process exits.
    _stderr_fd = os.dup(sys.__stderr__.fileno() if sys.__stderr__ else 2)
    # Every AWS call the project makes, checked against deploy/iam at the end (tests/aws_calls.py).
    config.pluginmanager.register(AwsCallsPlugin(config), "aws_calls")


def pytest_unconfigure(config: pytest.Config) -> None:
    global _stderr_fd
    if _stderr_fd is not None:
        os.close(_stderr_fd)
        _stderr_fd = None


@pytest.hookimpl(optionalhook=True)  # pytest-timeout's hooks
def pytest_timeout_set_timer(item: pytest.Item, settings: Any) -> None:
    if _stderr_fd is not None:
        faulthandler.dump_traceback_later(settings.timeout + BACKSTOP_S, file=_stderr_fd, exit=True)
    # None: pytest-timeout's own timer is set as well.


@pytest.hookimpl(optionalhook=True)
def pytest_timeout_cancel_timer(item: pytest.Item) -> None:
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    """Logging is process-wide state, and tests change it (the CLI's `configure_logging`,
    an in-process `main([...])`): put it back for the tests that follow, which would
    otherwise find, say, DEBUG filtered out."""
    config = structlog.get_config()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    wire = {name: logging.getLogger(name).level for name in ("botocore", "aiobotocore")}
    yield
    structlog.reset_defaults()
    structlog.configure(**config)
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, wire_level in wire.items():
        logging.getLogger(name).setLevel(wire_level)
    logging.captureWarnings(False)


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoServer]:
    """One moto server for the whole run (the contract suite, the SQS backend's FIFO tests,
    the idempotency stores' DynamoDB): each test makes its own uniquely named resources."""
    with start_moto() as server:
        yield server


def _uvloop_factories() -> Mapping[str, Callable[[], asyncio.AbstractEventLoop]] | None:
    loop = os.environ.get(TEST_LOOP_VARIABLE, "asyncio")
    if loop == "asyncio":
        return None
    if loop != "uvloop":
        raise pytest.UsageError(f"{TEST_LOOP_VARIABLE}={loop!r}: choose asyncio or uvloop")
    import uvloop

    return {"uvloop": uvloop.new_event_loop}


_LOOP_FACTORIES = _uvloop_factories()
if _LOOP_FACTORIES is not None:
    # Defined only when asked for: an implementation of the hook must name a loop.

    @pytest.hookimpl(optionalhook=True)
    def pytest_asyncio_loop_factories(
        config: pytest.Config, item: pytest.Item
    ) -> Mapping[str, Callable[[], asyncio.AbstractEventLoop]] | None:
        return _LOOP_FACTORIES
