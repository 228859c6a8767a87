"""`backends.sqs.lean_http.HttpPool` against scripted servers on 127.0.0.1 (asyncio streams,
a script per test): keep-alive and the pool's limit, every way an answer's body is
delimited, answers split anyhow, the limits, a peer that closes, stalls or talks out of
turn, a cancelled call, TLS, and what is refused before anything is sent. Each test reads
what the server saw (connections, requests) as well as what the client got."""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from botocore.exceptions import (
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    HTTPClientError,
    ReadTimeoutError,
    SSLError,
)

from backends.sqs import lean_http
from backends.sqs.lean import transport_error
from backends.sqs.lean_http import HttpPool
from tests.certificates import self_signed

pytestmark = pytest.mark.asyncio

Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter, "Server"], Awaitable[None]]


@dataclass
class Server:
    url: str = ""
    connections: int = 0
    requests: list[bytes] = field(default_factory=list)
    #: Set when a connection the client opened has been closed by the client.
    client_closed: asyncio.Event = field(default_factory=asyncio.Event)

    async def request(self, reader: asyncio.StreamReader) -> bytes | None:
        """One whole request (head and Content-Length body), or None at the client's EOF."""
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            self.client_closed.set()
            return None
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        request = head + await reader.readexactly(length)
        self.requests.append(request)
        return request


@asynccontextmanager
async def serving(script: Script, tls: ssl.SSLContext | None = None) -> AsyncIterator[Server]:
    server = Server()

    async def connected(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        server.connections += 1
        try:
            await script(reader, writer, server)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    listener = await asyncio.start_server(connected, "127.0.0.1", 0, ssl=tls)
    port = listener.sockets[0].getsockname()[1]
    server.url = f"{'https' if tls else 'http'}://127.0.0.1:{port}/"
    try:
        yield server
    finally:
        listener.close()


def pool(url: str, **options: object) -> HttpPool:
    settings: dict[str, object] = {
        "limit": 4,
        "connect_timeout_s": 5.0,
        "read_timeout_s": 5.0,
        "keepalive_s": 12.0,
    }
    settings.update(options)
    return HttpPool(url, **settings)  # type: ignore[arg-type]


def answering(*answers: bytes) -> Script:
    """Answer the server's Nth request with the Nth of `answers` (the last one over and
    over), whichever connection it came on."""

    async def script(r: asyncio.StreamReader, w: asyncio.StreamWriter, server: Server) -> None:
        while await server.request(r) is not None:
            w.write(answers[min(len(server.requests), len(answers)) - 1])
            await w.drain()

    return script


OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nx-amzn-RequestId: r1\r\n\r\n{}"


async def post(http: HttpPool, body: bytes = b'{"a":1}') -> lean_http.Answer:
    return await http.post("127.0.0.1", {"X-Amz-Target": "AmazonSQS.ReceiveMessage"}, body)


async def test_calls_share_one_kept_alive_connection() -> None:
    async with serving(answering(OK)) as server:
        http = pool(server.url)
        answers = [await post(http, f"{{{i}}}".encode()) for i in range(5)]
        await http.aclose()
    assert answers == [(200, {"content-length": "2", "x-amzn-requestid": "r1"}, b"{}")] * 5
    assert server.connections == 1
    assert [request.rsplit(b"\r\n\r\n", 1)[1] for request in server.requests] == [
        b"{0}",
        b"{1}",
        b"{2}",
        b"{3}",
        b"{4}",
    ]
    head = server.requests[0].split(b"\r\n")
    assert head[:3] == [b"POST / HTTP/1.1", b"Host: 127.0.0.1", b"Content-Length: 3"]
    assert b"X-Amz-Target: AmazonSQS.ReceiveMessage" in head


async def test_the_pool_opens_at_most_its_limit_and_queues_the_rest() -> None:
    release = asyncio.Event()
    held = 0
    most = 0

    async def slow(r: asyncio.StreamReader, w: asyncio.StreamWriter, server: Server) -> None:
        nonlocal held, most
        while await server.request(r) is not None:
            held += 1
            most = max(most, held)
            if held == 3:
                release.set()
            await release.wait()
            held -= 1
            w.write(OK)
            await w.drain()

    async with serving(slow) as server:
        http = pool(server.url, limit=3)
        answers = await asyncio.gather(*(post(http) for _ in range(8)))
        await http.aclose()
    assert [status for status, _, _ in answers] == [200] * 8
    assert server.connections == 3
    assert most == 3


@pytest.mark.parametrize(
    ("answer", "body", "reused"),
    [
        (OK, b"{}", True),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"3;ext=1\r\nabc\r\n0A\r\n0123456789\r\n0\r\nx-trailer: t\r\n\r\n",
            b"abc0123456789",
            True,
        ),
        (b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\nx", b"x", False),
        (b"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nx", b"x", False),
        (b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 1\r\n\r\nx", b"x", True),
        (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx", b"x", True),
        (b"HTTP/1.1 204 No Content\r\n\r\n", b"", True),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", b"", True),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 001\r\n\r\nx", b"x", True),
        # More digits than int() converts (4300), all but one leading zeros.
        (b"HTTP/1.1 200 OK\r\nContent-Length: " + b"0" * 4400 + b"1\r\n\r\nx", b"x", True),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 99\r\n\r\n"
            b"1\r\nx\r\n0\r\n\r\n",
            b"x",
            False,
        ),
        # OWS after a value is no part of it: llhttp alone would read the body to the close.
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\t\r\n\r\n1\r\nx\r\n0\r\n\r\n",
            b"x",
            True,
        ),
    ],
    ids=[
        "length",
        "chunked",
        "connection-close",
        "http-1.0",
        "http-1.0-keep-alive",
        "interim-100",
        "204",
        "empty",
        "leading-zeros",
        "4400-leading-zeros",
        "chunked-and-length",
        "chunked-then-a-tab",
    ],
)
async def test_every_way_a_body_is_delimited(answer: bytes, body: bytes, reused: bool) -> None:
    async with serving(answering(answer)) as server:
        http = pool(server.url)
        first = await post(http)
        second = await post(http)
        await http.aclose()
    assert first[2] == second[2] == body
    assert server.connections == (1 if reused else 2)


async def test_a_body_read_to_the_close_is_whole_and_the_connection_not_reused() -> None:
    async def to_close(r: asyncio.StreamReader, w: asyncio.StreamWriter, server: Server) -> None:
        await server.request(r)
        w.write(b"HTTP/1.1 200 OK\r\n\r\npart one,")
        await w.drain()
        w.write(b" part two")
        await w.drain()

    async with serving(to_close) as server:
        http = pool(server.url)
        answers = [await post(http), await post(http)]
        await http.aclose()
    assert [body for _, _, body in answers] == [b"part one, part two"] * 2
    assert server.connections == 2


async def test_an_answer_split_into_single_bytes_reads_the_same() -> None:
    answer = (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/x-amz-json-1.0\r\n"
        b'Content-Length: 11\r\n\r\n{"a": "\xc3\xa9"}'
    )

    async def trickle(r: asyncio.StreamReader, w: asyncio.StreamWriter, server: Server) -> None:
        while await server.request(r) is not None:
            for byte in answer:
                w.write(bytes([byte]))
                await w.drain()

    async with serving(trickle) as server:
        http = pool(server.url)
        answers = [await post(http), await post(http)]
        await http.aclose()
    assert (
        answers
        == [
            (
                200,
                {"content-type": "application/x-amz-json-1.0", "content-length": "11"},
                b'{"a": "\xc3\xa9"}',
            )
        ]
        * 2
    )
    assert server.connections == 1


async def test_a_large_body_in_many_reads_is_exact() -> None:
    body = bytes(range(256)) * 8192  # 2 MiB
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    async with serving(answering(answer)) as server:
        http = pool(server.url)
        got = await http.post("127.0.0.1", {}, body)  # and a large request
        await http.aclose()
    assert got[2] == body
    assert server.requests[0].endswith(body)


async def test_header_names_are_lower_cased_and_a_repeat_gives_its_last_value() -> None:
    """As aiobotocore's headers read (its ResponseMetadata's HTTPHeaders, the RequestId and
    the Date a retry's ttl comes from)."""
    answer = (
        b"HTTP/1.1 400 Bad Request\r\nX-Amz-Thing: a\r\nx-amz-thing: b\r\n"
        b"Server: caf\xe9\r\nX-Tabs:\ta\tb\t\r\nContent-Length: 0\r\n\r\n"
    )
    async with serving(answering(answer)) as server:
        http = pool(server.url)
        status, headers, body = await post(http)
        await http.aclose()
    assert (status, body) == (400, b"")
    assert headers == {
        "x-amz-thing": "b",
        "server": "café",
        "x-tabs": "a\tb",
        "content-length": "0",
    }


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/2 200 OK\r\nContent-Length: 0\r\n\r\n",
        b"ICY 200 OK\r\n\r\n",
        b"HTTP/1.1 2000 OK\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 099 OK\r\nContent-Length: 2\r\n\r\n{}",
        b"HTTP/1.1 000 OK\r\nContent-Length: 2\r\n\r\n{}",
        b"HTTP/1.1 200 OK\r\nBad Header\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nName : v\r\n\r\n",
        # A field name is a token; a line is ended by CRLF only, and has no CR or LF within.
        b"HTTP/1.1 200 OK\r\nContent\x00Length: 9\r\nContent-Length: 1\r\n\r\nx",
        b"HTTP/1.1 200 OK\r\nContent-Length\x0b: 9\r\nContent-Length: 1\r\n\r\nx",
        b"HTTP/1.1 200 OK\r\nX(y): z\r\nContent-Length: 1\r\n\r\nx",
        b"HTTP/1.1 200 OK\r\nCaf\xe9: z\r\nContent-Length: 1\r\n\r\nx",
        b"HTTP/1.1 200 OK\r\nX: a\nContent-Length: 9\r\nContent-Length: 1\r\n\r\nx",
        b"HTTP/1.1 200 OK\r\nX: a\rContent-Length: 9\r\nContent-Length: 1\r\n\r\nx",
        b"HTTP/1.1 200 OK\nContent-Length: 9\r\nContent-Length: 1\r\n\r\nx",
        b"HTTP/1.1 200 OK\r\nX: a\x00b\r\nContent-Length: 1\r\n\r\nx",
        b"HTTP/1.1 200 OK\r\nContent-Length: 1, 2\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxy",
        b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nxy\r\n",
        # int(size, 16) reads these; a chunk size is hexadecimal digits only.
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0x1\r\nx\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0X1\r\nx\r\n0\r\n\r\n",
        b"HTTP/1.1 101 Switching Protocols\r\n\r\n",
        # Transfer codings it cannot undo (and never asked for: no TE header is sent).
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n2\r\n\x1f\x8b\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nConnection: close\r\n\r\n\x1f\x8b",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nX: " + b"v" * (65 * 1024) + b"\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (lean_http.MAX_BODY + 1),
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n" % (lean_http.MAX_BODY + 1),
        # Latin-1 superscripts are digits to str.isdigit, not to int().
        b"HTTP/1.1 2\xb20 OK\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: \xb9\r\n\r\nx",
        # More digits than int() converts (4300).
        b"HTTP/1.1 200 OK\r\nContent-Length: " + b"9" * 4401 + b"\r\n\r\nx",
        # What llhttp reads and this client's policy refuses.
        b"HTTP/2.0 200 OK\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/0.9 200 OK\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 200 O\x01K\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 200 O\x7fK\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1;" + b"e" * 9000 + b"\r\nx\r\n",
    ],
    ids=[
        "http-2",
        "not-http",
        "status",
        "status-099",
        "status-000",
        "no-colon",
        "space-before-colon",
        "name-with-nul",
        "name-with-vt",
        "name-with-separator",
        "name-with-obs-text",
        "bare-lf-in-a-field",
        "bare-cr-in-a-field",
        "bare-lf-in-the-status-line",
        "nul-in-a-value",
        "two-lengths",
        "two-length-lines",
        "negative-length",
        "chunk-size",
        "chunk-end",
        "chunk-size-0x",
        "chunk-size-0X",
        "101",
        "gzip-chunked",
        "gzip",
        "chunked-twice",
        "head-too-large",
        "body-too-large",
        "chunk-too-large",
        "superscript-status",
        "superscript-length",
        "length-of-4401-digits",
        "http-2.0",
        "http-0.9",
        "control-in-the-reason",
        "del-in-the-reason",
        "chunked-on-two-lines",
        "chunk-line-too-long",
    ],
)
async def test_what_is_not_http_1_is_a_protocol_error_and_the_connection_goes(
    answer: bytes,
) -> None:
    async with serving(answering(answer, OK)) as server:
        http = pool(server.url)
        with pytest.raises(lean_http.ProtocolError):
            await post(http)
        assert (await post(http))[0] == 200
        await http.aclose()
    assert server.connections == 2
    error = transport_error(lean_http.ProtocolError("x"), server.url)
    assert isinstance(error, ConnectionClosedError)


@pytest.mark.parametrize(
    ("start", "line"),
    [
        (b"", b"HTTP/1.1 100 Continue\r\n\r\n"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n", b"x-t: v\r\n"),
    ],
    ids=["interim-answers", "trailers"],
)
async def test_interim_answers_and_trailers_count_toward_the_heads_limit(
    start: bytes, line: bytes
) -> None:
    """Each is small, but a peer sending them without end (each within the read timeout)
    would hold a call forever: past 64 KiB of them, the answer is a ProtocolError."""
    endless = start + line * (70 * 1024 // len(line))

    async def flood(r: asyncio.StreamReader, w: asyncio.StreamWriter, server: Server) -> None:
        await server.request(r)
        w.write(endless)
        await w.drain()
        await server.request(r)  # no more, and no end: waits for the client's close

    async with serving(flood) as server:
        http = pool(server.url, read_timeout_s=1.0)
        with pytest.raises(lean_http.ProtocolError):
            await post(http)
        await asyncio.wait_for(server.client_closed.wait(), 5)
        await http.aclose()
    assert server.connections == 1


async def test_a_peer_that_closes_mid_answer_is_closed() -> None:
    async def cut(r: asyncio.StreamReader, w: asyncio.StreamWriter, server: Server) -> None:
        await server.request(r)
        w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n12345")
        await w.drain()

    async with serving(cut) as server:
        http = pool(server.url)
        with pytest.raises(lean_http.Closed) as raised:
            await post(http)
        await http.aclose()
    assert type(raised.value) is lean_http.Closed
    assert server.connections == 1


async def test_a_body_read_to_the_close_is_cut_not_whole_when_the_peer_resets() -> None:
    """Such a body ends at the peer's close (FIN); a reset (RST) may have dropped what the
    peer had not sent yet, so what came before it is not the whole answer."""

    async def reset(r: asyncio.StreamReader, w: asyncio.StreamWriter, server: Server) -> None:
        await server.request(r)
        w.write(b"HTTP/1.1 200 OK\r\n\r\npart one,")
        await w.drain()
        linger = struct.pack("ii", 1, 0)  # closed with linger 0: an RST, not a FIN
        w.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
        w.transport.abort()

    async with serving(reset) as server:
        http = pool(server.url)
        with pytest.raises(lean_http.Closed) as raised:
            await post(http)
        await http.aclose()
    assert type(raised.value) is lean_http.Closed
    assert http.open_connections == 0


async def test_a_stalled_answer_times_out_but_a_slow_one_does_not() -> None:
    """The read timeout is the time between reads: an answer trickling in a byte every
    0.025 s for longer than the timeout (0.5 s) is read whole; one that stops is given up
    (not sooner than the timeout, less uvloop's clock of ms and the timer's 1 ms slack)."""

    async def slow_then_stalled(
        r: asyncio.StreamReader, w: asyncio.StreamWriter, server: Server
    ) -> None:
        await server.request(r)
        for byte in b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc":
            w.write(bytes([byte]))
            await w.drain()
            await asyncio.sleep(0.025)  # the trickle is the behaviour under test
        await server.request(r)
        w.write(b"HTTP/1.1 200 OK\r\n")
        await w.drain()
        await server.request(r)  # never answered: waits for the client's close

    async with serving(slow_then_stalled) as server:
        http = pool(server.url, read_timeout_s=0.5)
        loop = asyncio.get_running_loop()
        started = loop.time()
        assert (await post(http))[2] == b"abc"
        assert loop.time() - started > 0.5  # longer than the timeout, in all
        started = loop.time()
        with pytest.raises(lean_http.ReadTimeout):
            await post(http)
        assert 0.495 <= loop.time() - started < 3.5
        await asyncio.wait_for(server.client_closed.wait(), 5)
        await http.aclose()
    assert server.connections == 1
    assert isinstance(transport_error(lean_http.ReadTimeout("x"), server.url), ReadTimeoutError)


async def test_a_cancelled_call_closes_its_connection() -> None:
    """The rest of a cancelled call's answer must never be read as the next call's."""
    headed = asyncio.Event()

    async def late(r: asyncio.StreamReader, w: asyncio.StreamWriter, server: Server) -> None:
        if server.connections == 1:
            await server.request(r)
            w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nst")
            await w.drain()
            headed.set()
            await server.request(r)  # the client's close, not another request
            w.write(b"ale")
            return
        await answering(OK)(r, w, server)

    async with serving(late) as server:
        http = pool(server.url)
        call = asyncio.ensure_future(post(http))
        await headed.wait()
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        await asyncio.wait_for(server.client_closed.wait(), 5)
        assert await post(http) == (200, {"content-length": "2", "x-amzn-requestid": "r1"}, b"{}")
        await http.aclose()
    assert server.connections == 2


async def test_a_connection_the_peer_half_closed_while_idle_is_not_reused() -> None:
    async def half_closes(r: asyncio.StreamReader, w: asyncio.StreamWriter, server: Server) -> None:
        if server.connections > 1:
            await answering(OK)(r, w, server)
            return
        await server.request(r)
        w.write(OK)
        await w.drain()
        w.write_eof()  # says no more, and reads on
        await server.request(r)  # the client's close, not another request

    async with serving(half_closes) as server:
        http = pool(server.url)
        assert (await post(http))[0] == 200
        await asyncio.wait_for(server.client_closed.wait(), 5)  # the client saw the FIN
        assert (await post(http))[0] == 200
        await http.aclose()
    assert server.connections == 2
    assert len(server.requests) == 2


async def test_bytes_while_idle_retire_the_connection() -> None:
    async def chatty(r: asyncio.StreamReader, w: asyncio.StreamWriter, server: Server) -> None:
        await server.request(r)
        w.write(OK + b"HTTP/1.1 200 OK\r\n")  # an answer nobody asked for
        await w.drain()
        await server.request(r)

    async with serving(chatty) as server:
        http = pool(server.url)
        assert (await post(http))[0] == 200
        await asyncio.wait_for(server.client_closed.wait(), 5)
        await http.aclose()
    assert server.connections == 1


async def test_an_idle_connection_past_its_keep_alive_is_not_reused() -> None:
    async with serving(answering(OK)) as server:
        http = pool(server.url, keepalive_s=0.0)
        for _ in range(3):
            await post(http)
        assert http.open_connections == 1
        await http.aclose()
    assert server.connections == 3


async def test_a_header_with_cr_or_lf_is_refused_unsent() -> None:
    async with serving(answering(OK)) as server:
        http = pool(server.url)
        for value in ("a\r\nInjected: yes", "a\nb", "a\rb"):
            with pytest.raises(lean_http.RefusedRequest):
                await http.post("127.0.0.1", {"X-Amz-Target": value}, b"")
        for host in ("127.0.0.1\r\nX: y", "127.0.0.1\nX: y", "127.0.0.1\rX: y"):
            with pytest.raises(lean_http.RefusedRequest):
                await http.post(host, {}, b"")
        await http.aclose()
    assert server.connections == 0
    error = transport_error(lean_http.RefusedRequest("x"), server.url)
    assert isinstance(error, HTTPClientError)


async def test_closing_the_pool_ends_a_call_under_way_and_refuses_later_ones() -> None:
    asked = asyncio.Event()

    async def never(r: asyncio.StreamReader, w: asyncio.StreamWriter, server: Server) -> None:
        await server.request(r)
        asked.set()
        await server.request(r)

    async with serving(never) as server:
        http = pool(server.url)
        call = asyncio.ensure_future(post(http))
        await asked.wait()
        await http.aclose()
        with pytest.raises(lean_http.Closed):
            await call
        with pytest.raises(lean_http.RefusedRequest):
            await post(http)
    assert http.open_connections == 0


async def test_closing_the_pool_ends_a_call_still_connecting(tmp_path: Path) -> None:
    """A call whose TLS handshake is under way gets Closed when the pool closes, not a
    connect timeout later; its socket is closed."""
    cert, _ = self_signed(tmp_path)
    accepted = asyncio.Event()
    ended = asyncio.Event()

    async def mute(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        accepted.set()
        await r.read()  # the ClientHello, never answered, then the client's close
        ended.set()
        w.close()

    listener = await asyncio.start_server(mute, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    context = ssl.create_default_context(cafile=str(cert))
    http = pool(f"https://127.0.0.1:{port}/", ssl_context=context, connect_timeout_s=10.0)
    call = asyncio.ensure_future(post(http))
    await accepted.wait()
    await http.aclose()
    with pytest.raises(lean_http.Closed):
        await asyncio.wait_for(call, 2.0)  # not the 10 s of the connect timeout
    await asyncio.wait_for(ended.wait(), 2.0)
    listener.close()
    assert http.open_connections == 0


async def test_a_refused_connect_is_connect_failed() -> None:
    async with serving(answering(OK)) as server:
        url = server.url
    http = pool(url)  # the listener is gone: nothing listens on the port
    with pytest.raises(lean_http.ConnectFailed):
        await post(http)
    await http.aclose()
    assert isinstance(transport_error(lean_http.ConnectFailed("x"), url), EndpointConnectionError)


async def test_a_connect_that_hangs_is_given_up_at_the_connect_timeout() -> None:
    """A listener that never accepts, its backlog (0) full: the next SYN goes unanswered."""
    with socket.socket() as listener, socket.socket() as first:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        first.connect(listener.getsockname())
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/"
        http = pool(url, connect_timeout_s=0.3)
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(lean_http.ConnectTimeout):
            await post(http)
        assert 0.25 <= loop.time() - started < 3.0  # uvloop's clock reads in ms
        await http.aclose()
    assert isinstance(transport_error(lean_http.ConnectTimeout("x"), url), ConnectTimeoutError)


async def test_tls_verifies_the_server_against_the_context(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    serving_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    serving_tls.load_cert_chain(cert, key)
    async with serving(answering(OK), tls=serving_tls) as server:
        trusting = pool(server.url, ssl_context=ssl.create_default_context(cafile=str(cert)))
        answers = [await post(trusting), await post(trusting)]
        await trusting.aclose()
        stranger = pool(server.url, ssl_context=ssl.create_default_context())
        with pytest.raises(lean_http.TlsFailed):
            await post(stranger)
        await stranger.aclose()
    assert [status for status, _, _ in answers] == [200, 200]
    assert isinstance(transport_error(lean_http.TlsFailed("x"), server.url), SSLError)


async def test_a_url_it_cannot_serve_is_refused_at_once() -> None:
    with pytest.raises(ValueError, match="http"):
        pool("ftp://127.0.0.1/")
    with pytest.raises(ValueError, match="SSL context"):
        pool("https://127.0.0.1/")
    with pytest.raises(ValueError, match="limit"):
        pool("http://127.0.0.1/", limit=0)  # every call would wait for a slot forever
