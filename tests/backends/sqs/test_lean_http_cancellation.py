"""`backends.sqs.lean_http.HttpPool` with a call cancelled at each of its awaits: waiting
for a slot, connecting (a TLS handshake under way), waiting for its answer. After each,
the pool (a limit of one) serves the next call: the slot came back, no connection is held
for the cancelled call, and a socket it had is closed (the server sees the close)."""

from __future__ import annotations

import asyncio
import socket
import ssl
from pathlib import Path

import pytest

from tests.backends.sqs.test_lean_http import (
    OK,
    Server,
    answering,
    pool,
    post,
    serving,
)
from tests.certificates import self_signed

pytestmark = pytest.mark.asyncio

ANSWER = (200, {"content-length": "2", "x-amzn-requestid": "r1"}, b"{}")


async def test_a_call_cancelled_waiting_for_a_slot_gives_its_place_up() -> None:
    asked = asyncio.Event()
    release = asyncio.Event()

    async def held(r: asyncio.StreamReader, w: asyncio.StreamWriter, server: Server) -> None:
        while await server.request(r) is not None:
            if len(server.requests) == 1:
                asked.set()
                await release.wait()
            w.write(OK)
            await w.drain()

    async with serving(held) as server:
        http = pool(server.url, limit=1)
        first = asyncio.ensure_future(post(http))
        await asked.wait()
        waiting = asyncio.ensure_future(post(http))
        await asyncio.sleep(0)  # one turn: `waiting` runs up to the slot it waits for
        assert not waiting.done()
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        release.set()
        assert await first == ANSWER
        assert await asyncio.wait_for(post(http), 5) == ANSWER
        await http.aclose()
    assert server.connections == 1
    assert len(server.requests) == 2


async def test_a_call_cancelled_while_connecting_closes_its_socket(tmp_path: Path) -> None:
    """The first connection is accepted by hand and its TLS handshake never answered; the
    call is cancelled during it. Then a TLS server takes the listener over: the next call
    connects and is answered."""
    cert, key = self_signed(tmp_path)
    serving_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    serving_tls.load_cert_chain(cert, key)
    loop = asyncio.get_running_loop()
    server = Server()
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.setblocking(False)
        port = listener.getsockname()[1]
        context = ssl.create_default_context(cafile=str(cert))
        http = pool(f"https://127.0.0.1:{port}/", limit=1, ssl_context=context)
        call = asyncio.ensure_future(post(http))
        first, _ = await loop.sock_accept(listener)
        with first:
            assert await loop.sock_recv(first, 65536)  # the ClientHello: a handshake under way
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            assert await asyncio.wait_for(loop.sock_recv(first, 65536), 5) == b""  # closed
        assert http.open_connections == 0

        async def connected(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            try:
                await answering(OK)(r, w, server)
            finally:
                w.close()

        tls_server = await asyncio.start_server(connected, sock=listener, ssl=serving_tls)
        try:
            assert await asyncio.wait_for(post(http), 5) == ANSWER
            await http.aclose()
        finally:
            tls_server.close()
    assert len(server.requests) == 1


async def test_a_call_cancelled_waiting_for_its_answer_closes_its_connection() -> None:
    asked = asyncio.Event()

    async def silent_once(r: asyncio.StreamReader, w: asyncio.StreamWriter, server: Server) -> None:
        if server.connections == 1:
            await server.request(r)
            asked.set()
            await server.request(r)  # the client's close, not another request
            return
        await answering(OK)(r, w, server)

    async with serving(silent_once) as server:
        http = pool(server.url, limit=1)
        call = asyncio.ensure_future(post(http))
        await asked.wait()
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        await asyncio.wait_for(server.client_closed.wait(), 5)
        assert http.open_connections == 0
        assert await asyncio.wait_for(post(http), 5) == ANSWER
        assert http.open_connections == 1
        await http.aclose()
    assert server.connections == 2
