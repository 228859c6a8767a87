"""Fixtures of the contract suite: `backend` (memory | moto | endpoint) and `make_queue`.

- `memory`: `backends.memory.MemoryBackend()` on the loop clock, with looptime switched on for
  the test, so every sleep and long poll is fast-forwarded. Skipped while the module is absent.
- `moto`: `SqsBackend` against one moto server per session (`tests.moto_server`), dummy
  credentials set explicitly, region us-east-1; every test makes its own uniquely named queues.
- `endpoint`: `SqsBackend` against our own SQS endpoint (`backends.serve.sqs.endpoint`) over the
  in-memory engine, served from a background thread for the whole session, in real time.
  Both with the default SQS client (`DEFAULT_SQS_CLIENT`: the lean path, so the hot calls,
  receive, delete, extend and send, go through `backends.sqs.lean` and speak SQS's JSON
  protocol without botocore's serialiser and parser).
- `moto-botocore`, `endpoint-botocore`: the same two with the opt-out,
  `SqsSettings(client="botocore")`, every call through aiobotocore. `scripts/test`'s uvloop
  pass leaves these out (`-k "not botocore"`): the loop is what it checks, and the default
  client is the one that runs on it. Our endpoint's query protocol is not reached from
  here: botocore has spoken JSON to SQS since 1.31.81 and no longer ships the query model
  (the endpoint's own tests speak the query protocol).
- `@pytest.mark.moto_gap("reason")` marks a rule that real SQS keeps and moto does not: on the
  moto params the test becomes `xfail(strict=True)`; on memory and endpoint it stays strict.
"""

from __future__ import annotations

import importlib
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import pytest_asyncio

from backends.serve.sqs.endpoint import SqsEndpoint, sqs_endpoint_in_thread
from backends.sqs import SqsBackend, SqsSettings
from backends.sqs.settings import DEFAULT_SQS_CLIENT
from tests.contract import ContractBackend, MakeQueue
from tests.moto_server import (
    MOTO_ACCESS_KEY,
    MOTO_REGION,
    MOTO_SECRET_KEY,
)
from worker.types import QueueSpec, RedrivePolicy


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "moto_gap(reason): moto differs from SQS here; strict xfail on moto only"
    )


@pytest.fixture(scope="session")
def sqs_endpoint() -> Iterator[SqsEndpoint]:
    with sqs_endpoint_in_thread() as endpoint:
        yield endpoint


def _memory_backend_class() -> Any:
    try:
        module = importlib.import_module("backends.memory")
    except ModuleNotFoundError as exc:
        if exc.name != "backends.memory":
            raise
        pytest.skip("backends/memory.py is not in the tree yet")
    return module.MemoryBackend


@pytest.fixture(params=["memory", "moto", "endpoint", "moto-botocore", "endpoint-botocore"])
def backend_kind(request: pytest.FixtureRequest) -> str:
    kind: str = request.param
    if kind == "memory":
        _memory_backend_class()
        request.applymarker(pytest.mark.looptime)
    elif kind.startswith("moto"):
        gap = request.node.get_closest_marker("moto_gap")
        if gap is not None:
            reason = f"moto differs from SQS: {gap.args[0] if gap.args else ''}"
            request.applymarker(pytest.mark.xfail(strict=True, reason=reason))
    return kind


@pytest_asyncio.fixture
async def backend(
    backend_kind: str, request: pytest.FixtureRequest
) -> AsyncIterator[ContractBackend]:
    if backend_kind == "memory":
        memory: ContractBackend = _memory_backend_class()()
        try:
            yield memory
        finally:
            await memory.aclose()
        return
    server, _, client = backend_kind.partition("-")
    if server == "moto":
        endpoint_url = request.getfixturevalue("moto_server").endpoint_url
    else:
        endpoint_url = request.getfixturevalue("sqs_endpoint").url
    settings = SqsSettings(
        region=MOTO_REGION,
        endpoint_url=endpoint_url,
        access_key_id=MOTO_ACCESS_KEY,
        secret_access_key=MOTO_SECRET_KEY,
        max_attempts=2,
        connect_timeout_s=2.0,
        read_timeout_s=25.0,
        client="botocore" if client == "botocore" else DEFAULT_SQS_CLIENT,
    )
    sqs = await SqsBackend.connect(settings)
    try:
        yield sqs
    finally:
        await sqs.aclose()


@pytest.fixture
def make_queue(backend: ContractBackend) -> MakeQueue:
    """`await make_queue(fifo=False, **create_queue_options)` -> a fresh queue's name."""

    async def make(
        *,
        fifo: bool = False,
        visibility_timeout_s: int = 30,
        redrive: RedrivePolicy | None = None,
        content_based_deduplication: bool = False,
    ) -> str:
        name = f"contract-{uuid.uuid4().hex[:16]}" + (".fifo" if fifo else "")
        await backend.create_queue(
            QueueSpec(
                name,
                visibility_timeout_s=visibility_timeout_s,
                redrive=redrive,
                content_based_deduplication=content_based_deduplication,
            )
        )
        return name

    return make
