"""The lean path goes through the proxy the environment names (HTTP_PROXY, HTTPS_PROXY,
NO_PROXY), as botocore does for every other call: a review found it went direct, so where
the only way out is an egress proxy every receive and renewal would have failed.

A recording HTTP proxy on 127.0.0.1 answers in SQS's JSON shape; the endpoint's host does
not exist, so nothing but the proxy could have answered."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from aiohttp import web

from backends.sqs import SqsBackend, SqsSettings
from tests.local_http import serving
from worker.errors import TransientBackendError

pytestmark = pytest.mark.asyncio

ENDPOINT = "http://sqs.invalid"
QUEUE_URL = f"{ENDPOINT}/000000000000/jobs"


@pytest_asyncio.fixture
async def proxy() -> AsyncIterator[tuple[str, list[str]]]:
    """(its URL, the X-Amz-Target of each request it saw)."""
    seen: list[str] = []

    async def answer(request: web.Request) -> web.Response:
        seen.append(request.headers.get("X-Amz-Target", ""))
        return web.json_response({}, content_type="application/x-amz-json-1.0")

    async with serving(answer) as url:
        yield url, seen


async def _receive(backend: SqsBackend) -> int:
    return len(await backend.receive("jobs", max_messages=10, wait_s=1))


def _settings() -> SqsSettings:
    return SqsSettings(
        region="us-east-1",
        endpoint_url=ENDPOINT,
        access_key_id="x",
        secret_access_key="x",
        queue_urls={"jobs": QUEUE_URL},
        client="lean",
        max_attempts=1,
    )


async def test_the_lean_path_goes_through_the_environments_proxy(
    proxy: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, seen = proxy
    monkeypatch.setenv("HTTP_PROXY", url)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    backend = await SqsBackend.connect(_settings())
    try:
        assert await _receive(backend) == 0
    finally:
        await backend.aclose()
    assert seen == ["AmazonSQS.ReceiveMessage"]


async def test_no_proxy_is_honoured(
    proxy: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, seen = proxy
    monkeypatch.setenv("HTTP_PROXY", url)
    monkeypatch.setenv("NO_PROXY", "sqs.invalid")
    backend = await SqsBackend.connect(_settings())
    try:
        # Straight to a host that does not exist.
        with pytest.raises(TransientBackendError, match=r"sqs\.invalid"):
            await _receive(backend)
    finally:
        await backend.aclose()
    assert seen == []
