"""`backends.sqs.lean_http.HttpPool` over TLS (a self-signed certificate the client trusts)
against scripted servers on 127.0.0.1: a peer that closes without close_notify, an answer
that stalls, a handshake never answered."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import pytest

from backends.sqs import lean_http
from tests.backends.sqs.test_lean_http import Server, pool, post, serving
from tests.certificates import self_signed

pytestmark = pytest.mark.asyncio


@pytest.fixture
def contexts(tmp_path: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """The server's context and a client's that trusts it."""
    cert, key = self_signed(tmp_path)
    serving_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    serving_tls.load_cert_chain(cert, key)
    return serving_tls, ssl.create_default_context(cafile=str(cert))


@pytest.mark.parametrize(
    ("answer", "body"),
    [
        (b"HTTP/1.1 200 OK\r\n\r\nto the close", b"to the close"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 20\r\n\r\nto the close", None),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nto th", None),
    ],
    ids=["read-to-the-close", "length-cut", "chunks-cut"],
)
async def test_a_close_without_close_notify(
    contexts: tuple[ssl.SSLContext, ssl.SSLContext], answer: bytes, body: bytes | None
) -> None:
    """The server's TLS transport is aborted: its socket closes with no close_notify.
    asyncio's SSL protocol reports that as the end of the stream, uvloop's as a close with
    no error: either way a body read to the close is whole at it (as http.client, which
    suppresses ragged EOFs, and aiohttp read it), and one of a known length is cut."""

    async def ragged(r: asyncio.StreamReader, w: asyncio.StreamWriter, server: Server) -> None:
        await server.request(r)
        w.write(answer)
        await w.drain()
        w.transport.abort()

    serving_tls, trusting = contexts
    async with serving(ragged, tls=serving_tls) as server:
        http = pool(server.url, ssl_context=trusting)
        if body is None:
            with pytest.raises(lean_http.Closed) as raised:
                await post(http)
            assert type(raised.value) is lean_http.Closed
        else:
            assert await post(http) == (200, {}, body)
        await http.aclose()
    assert http.open_connections == 0


async def test_a_stalled_answer_times_out_and_its_connection_is_closed(
    contexts: tuple[ssl.SSLContext, ssl.SSLContext],
) -> None:
    async def stalled(r: asyncio.StreamReader, w: asyncio.StreamWriter, server: Server) -> None:
        await server.request(r)
        w.write(b"HTTP/1.1 200 OK\r\n")
        await w.drain()
        await server.request(r)  # never answered: waits for the client's close

    serving_tls, trusting = contexts
    async with serving(stalled, tls=serving_tls) as server:
        http = pool(server.url, ssl_context=trusting, read_timeout_s=0.3)
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(lean_http.ReadTimeout):
            await post(http)
        assert 0.295 <= loop.time() - started < 3.0  # the timer's 1 ms slack; uvloop's ms clock
        await asyncio.wait_for(server.client_closed.wait(), 5)
        assert http.open_connections == 0
        await http.aclose()


async def test_a_handshake_never_answered_is_a_connect_timeout(
    contexts: tuple[ssl.SSLContext, ssl.SSLContext],
) -> None:
    ended = asyncio.Event()

    async def mute(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await r.read()  # the ClientHello, never answered, then the client's close
        ended.set()
        w.close()

    _, trusting = contexts
    listener = await asyncio.start_server(mute, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    http = pool(f"https://127.0.0.1:{port}/", ssl_context=trusting, connect_timeout_s=0.3)
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        with pytest.raises(lean_http.ConnectTimeout):
            await post(http)
        assert 0.25 <= loop.time() - started < 3.0  # uvloop's clock reads in ms
        await asyncio.wait_for(ended.wait(), 5)
        assert http.open_connections == 0
        await http.aclose()
    finally:
        listener.close()
