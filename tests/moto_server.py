"""A moto server in a real subprocess, on loopback, for tests that talk to SQS over HTTP.

    with start_moto() as moto:
        client = make_client(endpoint_url=moto.endpoint_url)

`start_moto()` picks a free port on 127.0.0.1, starts `python -m moto.server` there, and
returns once the server answers HTTP (or raises after `startup_timeout_s`). `stop()` sends
SIGTERM, waits a bounded time, then kills. The server's state lives only in that process, so
a test that wants a crash or a restart can stop it and start another.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from types import TracebackType

__all__ = ["MOTO_ACCESS_KEY", "MOTO_REGION", "MOTO_SECRET_KEY", "MotoServer", "start_moto"]

#: Dummy credentials and region for clients of the moto server; never real ones.
MOTO_ACCESS_KEY = "testing"
MOTO_SECRET_KEY = "testing"
MOTO_REGION = "us-east-1"

_HOST = "127.0.0.1"
_PORT_ATTEMPTS = 3


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


def _spawn(port: int) -> MotoServer:
    env = {**os.environ, "MOTO_PORT": str(port)}
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", _HOST, "-p", str(port)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    return MotoServer(process, port)


def start_moto(*, port: int | None = None, startup_timeout_s: float = 30.0) -> MotoServer:
    """Start moto's server on 127.0.0.1 and return it once it answers.

    Without `port`, a free one is picked; if another process grabs it first, a new port is
    tried (a few times).
    """
    attempts = 1 if port is not None else _PORT_ATTEMPTS
    for _ in range(attempts):
        server = _spawn(port if port is not None else _free_port())
        if server.wait_ready(startup_timeout_s):
            return server
        with contextlib.suppress(Exception):
            server.stop()
    raise RuntimeError(f"moto server did not start within {startup_timeout_s} s")
