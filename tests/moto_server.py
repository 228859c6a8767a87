"""A moto server in a real subprocess, on loopback, for tests that talk to SQS over HTTP.

    with start_moto() as moto:
        client = make_client(endpoint_url=moto.endpoint_url)

`start_moto()` picks a free port on 127.0.0.1, starts `python -m moto.server` there, and
returns once the server answers HTTP (or raises after `startup_timeout_s`). `stop()` sends
SIGTERM, waits a bounded time, then kills. The server's state lives only in that process, so
a test that wants a crash or a restart can stop it and start another.

`start_moto(serialized=True)` runs this module instead (`python -m tests.moto_server`), which
puts one lock around moto's SQS backend before serving. Moto's SQS backend takes no lock, and
its threaded server runs requests at once, so two of its races show under concurrent clients
(both measured with plain boto3 threads against this server, moto 5.2.5):

- ReceiveMessage checks a message's visibility, then marks it received: two concurrent
  receives can both pass the check and both return the message (receive counts n and n+1).
  Seen once in 3,000 messages received by 3 threads, no deletes.
- DeleteMessage(Batch) rebuilds the queue's message list and assigns it: two concurrent
  deletes each keep the other's message, and the later assignment brings it back, to be
  delivered again when its visibility timeout ends although its delete answered success.
  Seen for 65 of 1,000 messages deleted in batches of 10 by 3 threads (0 in two other runs).

Real SQS does neither. A test that must attribute every duplicate to its own cause (the
crash test) runs moto serialized. The lock is let go while a long poll waits, as moto's own
wait does, so a long poll does not hold up other calls.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

__all__ = ["MOTO_ACCESS_KEY", "MOTO_REGION", "MOTO_SECRET_KEY", "MotoServer", "start_moto"]

#: Dummy credentials and region for clients of the moto server; never real ones.
MOTO_ACCESS_KEY = "testing"
MOTO_SECRET_KEY = "testing"
MOTO_REGION = "us-east-1"

_HOST = "127.0.0.1"
_PORT_ATTEMPTS = 3
_ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((_HOST, 0))
        port: int = sock.getsockname()[1]
        return port


class MotoServer:
    """A running `python -m moto.server` subprocess. Use `start_moto()` to make one."""

    def __init__(self, process: subprocess.Popen[bytes], port: int) -> None:
        self.process = process
        self.port = port
        self.endpoint_url = f"http://{_HOST}:{port}"

    @property
    def running(self) -> bool:
        return self.process.poll() is None

    def wait_ready(self, timeout_s: float) -> bool:
        """Poll until the server answers HTTP; False if it exits or the time runs out."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.running:
                return False
            if self._answers():
                return True
            time.sleep(0.05)
        return False

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.endpoint_url}/moto-api/", timeout=1.0):
                return True
        except urllib.error.HTTPError:
            return True  # any HTTP answer means the server is up
        except OSError:
            return False

    def stop(self, timeout_s: float = 5.0) -> None:
        """Terminate the server (SIGTERM, then SIGKILL after `timeout_s`). Idempotent."""
        if self.running:
            self.process.terminate()
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=timeout_s)

    def __enter__(self) -> MotoServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _spawn(port: int, *, serialized: bool) -> MotoServer:
    env = {**os.environ, "MOTO_PORT": str(port)}
    module = __name__ if serialized else "moto.server"
    process = subprocess.Popen(
        [sys.executable, "-m", module, "-H", _HOST, "-p", str(port)],
        cwd=_ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    return MotoServer(process, port)


def start_moto(
    *, port: int | None = None, startup_timeout_s: float = 30.0, serialized: bool = False
) -> MotoServer:
    """Start moto's server on 127.0.0.1 and return it once it answers.

    Without `port`, a free one is picked; if another process grabs it first, a new port is
    tried (a few times). `serialized`: one SQS call at a time (see the module docstring).
    """
    attempts = 1 if port is not None else _PORT_ATTEMPTS
    for _ in range(attempts):
        server = _spawn(port if port is not None else _free_port(), serialized=serialized)
        if server.wait_ready(startup_timeout_s):
            return server
        with contextlib.suppress(Exception):
            server.stop()
    raise RuntimeError(f"moto server did not start within {startup_timeout_s} s")


def serialize_sqs() -> None:
    """Put one lock around every public method of moto's SQS backend, in this process.

    The lock is reentrant (a batch call calls the single one). It is also the lock of the
    condition a long poll waits on, in place of the queue's own: the wait lets it go, and
    every finished call wakes the waiters to look for visible messages again.
    """
    from moto.sqs import models

    serial = threading.Condition(threading.RLock())

    def locked(method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def call(*args: Any, **kwargs: Any) -> Any:
            with serial:
                try:
                    return method(*args, **kwargs)
                finally:
                    serial.notify_all()

        return call

    for name, member in list(vars(models.SQSBackend).items()):
        if inspect.isfunction(member) and not name.startswith("_"):
            setattr(models.SQSBackend, name, locked(member))

    def wait_for_messages(queue: Any, timeout: int) -> None:
        with serial:
            serial.wait_for(lambda: queue.messages, timeout=timeout)

    # setattr: mypy refuses an assignment to a method.
    setattr(models.Queue, "wait_for_messages", wait_for_messages)  # noqa: B010


def quicken_sqs() -> None:
    """Take two costs proportional to the queue's length out of moto's SQS calls.

    Moto's SQS reads the clock through datetime arithmetic (about 15 us a reading) twice per
    message each time it lists the visible ones, which it does on every send and receive; and
    it checks each message it is about to deliver against the retention period by computing
    all the queue's attributes, counts of messages included. With 1,000 messages a
    ReceiveMessage of 10 took about 1.5 s of CPU, a SendMessageBatch about 0.3 s. The same
    clock is read here with `time.time()`, and the retention check reads the one attribute it
    needs; both decide as moto's own do.
    """
    from moto.core import utils
    from moto.sqs import models

    def unix_time(dt: Any = None) -> float:
        return time.time() if dt is None else utils.unix_time(dt)

    def unix_time_millis(dt: Any = None) -> float:
        return unix_time(dt) * 1000.0

    def is_message_valid_based_on_retention_period(
        backend: Any, queue_name: str, message: Any
    ) -> bool:
        retention_s = int(backend.get_queue(queue_name).message_retention_period)
        return bool(retention_s + message.sent_timestamp / 1000 > unix_time())

    # setattr: these names are not exported, and mypy refuses an assignment to a method.
    setattr(models, "unix_time", unix_time)  # noqa: B010
    setattr(models, "unix_time_millis", unix_time_millis)  # noqa: B010
    name = "is_message_valid_based_on_retention_period"
    setattr(models.SQSBackend, name, is_message_valid_based_on_retention_period)


if __name__ == "__main__":
    quicken_sqs()
    serialize_sqs()
    from moto.server import main

    main()
