"""Fixtures of the idempotency tests: the three stores, on real servers.

- `redis_server`: Debian's `redis-server` on a free loopback port, started once per session
  in a temporary directory with no persistence (no RDB, no AOF), stopped at the end.
- `own_redis`: one such server for one test, which may stop it (saving its data, so that
  nothing is lost: the outage alone is under test) and start it again.
- `moto_server`: one moto server per session (`tests.moto_server.start_moto`), whose
  DynamoDB the DynamoDB store talks to over HTTP on loopback.
- `store` (memory | redis | dynamodb): a fresh store per test, in its own namespace (a key
  prefix, a table), so tests never see each other's records.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from tests.moto_server import MOTO_ACCESS_KEY, MOTO_REGION, MOTO_SECRET_KEY, MotoServer
from worker.idempotency import DynamoDBStore, IdempotencyStore, MemoryStore, RedisStore
from worker.idempotency.dynamodb_store import create_table

_HOST = "127.0.0.1"
STORE_KINDS = ["memory", "redis", "dynamodb"]
#: An empty `save` turns RDB snapshots off; no append-only file either.
_NO_PERSISTENCE = ["--save", "", "--appendonly", "no"]


@dataclass
class RedisServer:
    port: int

    @property
    def url(self) -> str:
        return f"redis://{_HOST}:{self.port}/0"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((_HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def _answers_ping(port: int) -> bool:
    try:
        with socket.create_connection((_HOST, port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


class OwnRedis(RedisServer):
    """A redis-server that a test may stop (saving its data) and start again, as a
    restarted server is: calls fail at once meanwhile (the connection is refused)."""

    def __init__(self, directory: Path) -> None:
        super().__init__(free_port())
        self.directory = directory
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.fail("redis-server is not installed (scripts/_system.sh installs it)")
        port, directory = str(self.port), str(self.directory)
        self.process = subprocess.Popen(
            [binary, "--bind", _HOST, "--port", port, "--dir", directory, *_NO_PERSISTENCE],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while not _answers_ping(self.port):
            if self.process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"redis-server did not start on port {self.port}")
            time.sleep(0.02)

    def stop(self, *, save: bool = True) -> None:
        """SHUTDOWN SAVE (the data set is written to the directory and read at the next
        start), or a plain SIGTERM."""
        if self.process is None:
            return
        if save:
            with socket.create_connection((_HOST, self.port), timeout=5) as sock:
                sock.sendall(b"SHUTDOWN SAVE\r\n")
                sock.recv(64)  # the server closes the connection as it exits
        else:
            self.process.terminate()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=5)
        self.process = None


@contextlib.contextmanager
def running_redis(directory: Path) -> Iterator[OwnRedis]:
    server = OwnRedis(directory)
    server.start()
    try:
        yield server
    finally:
        server.stop(save=False)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with running_redis(tmp_path_factory.mktemp("redis")) as server:
        yield RedisServer(server.port)


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[OwnRedis]:
    with running_redis(tmp_path) as server:
        yield server


@contextlib.asynccontextmanager
async def dynamodb_client(endpoint_url: str, **config: Any) -> AsyncIterator[Any]:
    from aiobotocore.config import AioConfig
    from aiobotocore.session import get_session

    session = get_session()
    async with session.create_client(
        "dynamodb",
        region_name=MOTO_REGION,
        endpoint_url=endpoint_url,
        aws_access_key_id=MOTO_ACCESS_KEY,
        aws_secret_access_key=MOTO_SECRET_KEY,
        config=AioConfig(**config) if config else None,
    ) as client:
        yield client


@contextlib.asynccontextmanager
async def make_store(kind: str, request: pytest.FixtureRequest) -> AsyncIterator[IdempotencyStore]:
    """A fresh store of `kind` in its own namespace, closed at the end."""
    if kind == "memory":
        yield MemoryStore()
    elif kind == "redis":
        from redis.asyncio import Redis

        server: RedisServer = request.getfixturevalue("redis_server")
        store = RedisStore(Redis.from_url(server.url), prefix=f"test-{uuid.uuid4().hex}:")
        try:
            yield store
        finally:
            await store.aclose()
    else:
        moto: MotoServer = request.getfixturevalue("moto_server")
        async with dynamodb_client(moto.endpoint_url) as client:
            table = f"idempotency-{uuid.uuid4().hex[:12]}"
            await create_table(client, table)
            yield DynamoDBStore(client, table)


@pytest.fixture(params=STORE_KINDS)
def store_kind(request: pytest.FixtureRequest) -> str:
    kind: str = request.param
    return kind


@pytest_asyncio.fixture
async def store(store_kind: str, request: pytest.FixtureRequest) -> AsyncIterator[IdempotencyStore]:
    async with make_store(store_kind, request) as made:
        yield made
