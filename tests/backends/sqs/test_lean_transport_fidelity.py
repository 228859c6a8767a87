"""The lean transport (`backends.sqs.lean.LeanTransport` over `backends.sqs.lean_http`)
against aiobotocore's own client, on what a real endpoint can do that the other lean tests
leave out: a retry's `amz-sdk-request` after a 5xx with a Date, an HTTPS endpoint named
with a trailing dot (a fully qualified name, as Kubernetes deployments write it to skip the
resolver's search domains), an answer repeating a header, and an endpoint URL with a query
but no path.

Each test sends the same call through the aiobotocore client and the lean transport, to the
same server on 127.0.0.1, and holds the lean one to what aiobotocore did. The one stand-in
is the OS resolver (`socket.getaddrinfo`), so that a name with a trailing dot reaches the
loopback server: both clients resolve through it.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from aiobotocore.session import AioSession
from aiohttp import web
from multidict import CIMultiDict

from backends.sqs import SqsSettings
from backends.sqs.lean import LeanTransport
from tests.backends.sqs.test_lean_http import Server, answering
from tests.backends.sqs.test_lean_http import serving as scripted
from tests.certificates import self_signed
from tests.local_http import serving

pytestmark = pytest.mark.asyncio

RECEIVE = {"QueueUrl": "https://sqs.us-east-1.amazonaws.com/1/q", "WaitTimeSeconds": 0}
JSON = "application/x-amz-json-1.0"


@asynccontextmanager
async def clients(
    url: str, *, max_attempts: int = 1, ca_bundle: str | None = None
) -> AsyncIterator[tuple[Any, LeanTransport]]:
    """aiobotocore's SQS client for `url` and a lean transport opened over it."""
    settings = SqsSettings(
        region="us-east-1",
        endpoint_url=url,
        access_key_id="AKIDEXAMPLE",
        secret_access_key="secret",
        max_attempts=max_attempts,
    )
    session = AioSession()
    async with session.create_client(
        "sqs",
        region_name="us-east-1",
        endpoint_url=url,
        aws_access_key_id="AKIDEXAMPLE",
        aws_secret_access_key="secret",
        config=settings.client_config(),
        verify=ca_bundle,
    ) as client:
        lean = await LeanTransport.open(client, settings, session=session, ca_bundle=ca_bundle)
        try:
            yield client, lean
        finally:
            await lean.aclose()


def _without_date(answer: dict[str, Any]) -> dict[str, Any]:
    answer["ResponseMetadata"]["HTTPHeaders"].pop("date", None)
    return answer


# ------------------------------------------------------------------ ttl on a retry


async def test_a_retry_after_a_5xx_carries_the_ttl_of_its_date_as_botocores_does() -> None:
    """A 500 with a Date, then a 200: the second attempt's `amz-sdk-request` names the ttl
    botocore computes from that Date (Date + the 30 s read timeout; the skew between the
    Date and the local clock cancels out), then the attempt and the maximum. The answer's
    headers now come back with lower-cased names; `_set_ttl` reads `date`."""
    sent: list[str] = []

    async def five_hundred_then_ok(request: web.Request) -> web.Response:
        sent.append(request.headers["amz-sdk-request"])
        if len(sent) % 2 == 1:
            return web.Response(
                status=500,
                body=b'{"__type":"InternalError","message":"try again"}',
                headers={"Date": "Mon, 01 Jan 2024 00:00:00 GMT", "Content-Type": JSON},
            )
        return web.Response(body=b"{}", content_type=JSON)

    async with serving(five_hundred_then_ok) as url, clients(url, max_attempts=3) as both:
        client, lean = both
        botocore = await client.receive_message(**RECEIVE)
        answer = await lean.call("ReceiveMessage", RECEIVE)
    second = "ttl=20240101T000030Z; attempt=2; max=3"
    assert sent == ["attempt=1", second, "attempt=1", second]
    assert answer["ResponseMetadata"]["RetryAttempts"] == 1
    assert botocore["ResponseMetadata"]["RetryAttempts"] == 1


# ------------------------------------------------------- a fully qualified HTTPS name


async def test_an_https_endpoint_named_with_a_trailing_dot_is_verified_as_aiohttp_does(
    tmp_path: Path,
) -> None:
    cert, key = self_signed(tmp_path, "sqs.test")
    serving_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    serving_tls.load_cert_chain(cert, key)
    answer = (
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: application/x-amz-json-1.0"
        b"\r\nx-amzn-RequestId: r1\r\n\r\n{}"
    )
    resolve = socket.getaddrinfo

    def loopback(host: Any, *args: Any, **kwargs: Any) -> Any:
        return resolve("127.0.0.1" if host in ("sqs.test", "sqs.test.") else host, *args, **kwargs)

    server: Server
    async with scripted(answering(answer), tls=serving_tls) as server:
        port = int(server.url.rsplit(":", 1)[1].rstrip("/"))
        url = f"https://sqs.test.:{port}"
        with mock.patch("socket.getaddrinfo", side_effect=loopback):
            async with clients(url, ca_bundle=str(cert)) as (client, lean):
                botocore = await client.receive_message(**RECEIVE)
                assert botocore["ResponseMetadata"]["RequestId"] == "r1"
                answer_read = await lean.call("ReceiveMessage", RECEIVE)
    assert answer_read["ResponseMetadata"]["RequestId"] == "r1"
    assert len(server.requests) == 2
    # Both requests carried the host the signer signed (the dot kept, as botocore signs it).
    hosts = [
        next(line for line in request.split(b"\r\n") if line.lower().startswith(b"host:"))
        for request in server.requests
    ]
    assert hosts[1].lower() == f"host: sqs.test.:{port}".encode()


# --------------------------------------------------------------- a repeated header


async def test_a_repeated_answer_header_reads_as_aiobotocore_reads_it() -> None:
    async def twice(request: web.Request) -> web.Response:
        headers = CIMultiDict([("x-amzn-RequestId", "first"), ("x-amzn-RequestId", "second")])
        return web.Response(body=b"{}", headers=headers, content_type=JSON)

    async with serving(twice) as url, clients(url) as (client, lean):
        botocore = _without_date(await client.receive_message(**RECEIVE))
        answer = _without_date(await lean.call("ReceiveMessage", RECEIVE))
    assert botocore["ResponseMetadata"]["RequestId"] == "second"
    assert answer["ResponseMetadata"] == botocore["ResponseMetadata"]


# ------------------------------------------------------- an endpoint with a query only


async def test_an_endpoint_with_a_query_and_no_path_is_posted_to_as_botocore_posts() -> None:
    targets: list[str] = []

    async def record(request: web.Request) -> web.Response:
        targets.append(request.raw_path)
        return web.Response(body=b"{}", content_type=JSON)

    async with serving(record) as base, clients(f"{base}?x=1") as (client, lean):
        await client.receive_message(**RECEIVE)
        await lean.call("ReceiveMessage", RECEIVE)
    assert targets == ["/?x=1", "/?x=1"]
