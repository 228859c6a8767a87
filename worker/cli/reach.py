"""Is anything listening at `--endpoint-url`? Asked once, before the first call.

botocore retries a refused connection inside each call (standard mode, 5 attempts with
backoff) and the runtime abandons a start-up call after `call_timeout_s`, so an endpoint
where nothing listened read as "no answer in time", after a minute of retries. One TCP
connect says at once what is wrong: refused, a host that does not resolve, no answer.

- On a terminal (standard input and output both a TTY) a person is waiting: the first
  failure ends the command, status 1, in one line saying what failed and where.
- Otherwise (a pod, a service manager, a script) the service may be starting beside the
  worker: the connect is retried with a pause doubling from `receive_backoff_s` to
  `receive_backoff_max_s`, one `queue_service.retrying` warning per retry naming the reason
  and the pause, for as long as start-up retries a queue (`STARTUP_CALL_TIMEOUTS` call
  timeouts), then one line, status 1. SIGTERM or SIGINT ends the wait the same way.
- Only a direct connection is checked: through a proxy (`HTTPS_PROXY`, ...) the endpoint is
  the proxy's to reach, and start-up goes on as before.
"""

from __future__ import annotations

import functools
import signal
import socket
import sys
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import dataclass
from urllib.parse import urlsplit

import anyio
import structlog

from worker.config import WorkerConfig
from worker.errors import TransientBackendError
from worker.runtime.queues import STARTUP_CALL_TIMEOUTS

__all__ = ["Retry", "interactive", "reach"]

#: How long one connect may take before it counts as no answer.
CONNECT_TIMEOUT_S = 3.0


@dataclass(frozen=True, slots=True)
class Retry:
    """How long to keep trying, and the pauses between tries."""

    give_up_after_s: float
    first_pause_s: float
    longest_pause_s: float

    @classmethod
    def for_config(cls, config: WorkerConfig) -> Retry:
        """As long as start-up retries a queue, with the receive loop's pauses."""
        return cls(
            give_up_after_s=STARTUP_CALL_TIMEOUTS * config.call_timeout_s,
            first_pause_s=config.receive_backoff_s,
            longest_pause_s=config.receive_backoff_max_s,
        )


def interactive() -> bool:
    """True when a person runs the command: standard input and output are a terminal."""
    return sys.stdin.isatty() and sys.stdout.isatty()


async def reach(endpoint_url: str | None, *, retry: Retry | None = None) -> None:
    """Return once something accepts a connection at `endpoint_url` (None: nothing to
    check); raise `TransientBackendError` at the first failure, or with `retry`, once it
    gives up."""
    address = _direct_address(endpoint_url) if endpoint_url else None
    if endpoint_url is None or address is None:
        return
    attempts = _Attempts(endpoint_url, address, anyio.current_time())
    if await attempts.one():
        return
    if retry is None:
        raise attempts.failure()
    reached = False  # stays so when a signal cancels the retries
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(_cancel_on_signal, signals, tasks.cancel_scope)
            reached = await attempts.retry(retry)
            tasks.cancel_scope.cancel()
    if not reached:  # gave up, or a signal came
        raise attempts.failure()


async def _cancel_on_signal(signals: AsyncIterator[int], scope: anyio.CancelScope) -> None:
    async for _ in signals:
        scope.cancel()
        return


class _Attempts:
    """The connects made so far and why the last one failed."""

    def __init__(self, url: str, address: tuple[str, int], started: float) -> None:
        self.url = url
        self._address = address
        self._started = started
        self._count = 0
        self._reason = ""

    async def one(self) -> bool:
        """Connect once; True if it worked."""
        self._count += 1
        failure = await _connect_failure(*self._address)
        self._reason = failure or ""
        return failure is None

    async def retry(self, retry: Retry) -> bool:
        """Connect again after each pause until it works (True) or `retry` gives up."""
        log = structlog.get_logger("lease_worker.cli")
        pause = retry.first_pause_s
        while self._elapsed() + pause <= retry.give_up_after_s:
            log.warning(
                "queue_service.retrying",
                endpoint=self.url,
                reason=self._reason,
                attempt=self._count,
                retry_in_s=pause,
            )
            await anyio.sleep(pause)
            if await self.one():
                return True
            pause = min(pause * 2, retry.longest_pause_s)
        return False

    def failure(self) -> TransientBackendError:
        tried = f" after {self._count} attempts over {self._elapsed():.0f} s"
        return TransientBackendError(
            f"cannot reach the queue service at --endpoint-url {self.url}: {self._reason}"
            f"{tried if self._count > 1 else ''}; start the service there, or fix "
            "--endpoint-url",
            operation="connect",
            code="Unreachable",
        )

    def _elapsed(self) -> float:
        return anyio.current_time() - self._started


def _direct_address(url: str) -> tuple[str, int] | None:
    """(host, port) of `url`, or None when it goes through a proxy or is no http(s) URL."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    host = parts.hostname
    if parts.scheme not in ("http", "https") or not host:
        return None
    proxies = urllib.request.getproxies()
    if (parts.scheme in proxies or "all" in proxies) and not urllib.request.proxy_bypass(host):
        return None
    return host, port or (443 if parts.scheme == "https" else 80)


async def _connect_failure(host: str, port: int) -> str | None:
    """Why a TCP connection to host:port failed, in a few words; None if it was made."""
    connect = functools.partial(socket.create_connection, (host, port), timeout=CONNECT_TIMEOUT_S)
    try:
        connection = await anyio.to_thread.run_sync(connect, abandon_on_cancel=True)
    except ConnectionRefusedError:
        return "connection refused"
    except socket.gaierror:
        return f"host {host!r} not found"
    except TimeoutError:
        return f"no answer within {CONNECT_TIMEOUT_S:g} s"
    except OSError as error:
        return (error.strerror or str(error)).lower()
    connection.close()
    return None
