"""`backends.sqs.lean_http`'s reading of an answer's head, as two measured defects showed
it must go:
- An answer whose lines end in a bare LF (RFC 9112 2.2 lets a recipient read it; this client
  refuses it, as it refuses a bare LF within a line) or that folds a field value over two
  lines (obs-fold, RFC 9112 5.2) is refused at once, with the reason in the error, never
  held until the read timeout (30 s by default): the reader used to look for the head's end
  as CRLF CRLF only, and wait for it.
- A head of 64 KiB (the most a head may be) that comes one byte per read costs little CPU:
  the reader used to search the whole head for its end again at every read (1,274 ms for
  this one, quadratic in the head's size).
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from backends.sqs import lean_http
from tests.backends.sqs.test_lean_http import Server, pool, post, serving

pytestmark = pytest.mark.asyncio

#: The SQS settings' default read timeout: the time a held answer would cost.
READ_TIMEOUT_S = 30.0
#: What "at once" allows, on a loaded machine.
AT_ONCE_S = 1.0


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (b"HTTP/1.1 200 OK\nContent-Length: 2\nX: y\n\n{}", "bare LF"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX: y\r\n\n{}", "bare LF"),
        (b"HTTP/1.1 200 OK\nContent-Length: 2\nX: y\n\r\n{}", "bare LF"),
        (b"HTTP/1.1 200 OK\r\nX: a\r\n b\r\nContent-Length: 2\r\n\r\n{}", "obs-fold"),
        (b"HTTP/1.1 200 OK\nX: a\n\tb\nContent-Length: 2\n\n{}", "bare LF"),
    ],
    ids=["bare-lf", "bare-lf-ending-the-head", "bare-lf-lines-crlf-end", "obs-fold", "both"],
)
async def test_bare_lf_and_obs_fold_are_refused_at_once(answer: bytes, reason: str) -> None:
    async def then_waits(r: asyncio.StreamReader, w: asyncio.StreamWriter, server: Server) -> None:
        await server.request(r)
        w.write(answer)
        await w.drain()
        await server.request(r)  # no more, and no close: waits for the client's

    async with serving(then_waits) as server:
        http = pool(server.url, read_timeout_s=READ_TIMEOUT_S)
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(lean_http.ProtocolError, match=reason):
            # Bounded, so that a reader that holds the answer fails here, not in 30 s.
            await asyncio.wait_for(post(http), 2 * AT_ONCE_S)
        assert loop.time() - started < AT_ONCE_S
        await asyncio.wait_for(server.client_closed.wait(), 5)
        assert http.open_connections == 0
        await http.aclose()
    assert server.connections == 1


_REFUSED_AT_ONCE = [
    b"HTTP/1.1 200 OK\nContent-Length: 2\n\n{}",
    b"HTTP/1.1 200 OK\r\nX: a\nContent-Length: 2\r\n\r\n{}",
    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\n{}",
    b"HTTP/1.1 200 OK\r\nX: a\r\n b\r\nContent-Length: 2\r\n\r\n{}",
    b"HTTP/1.1 200 OK\r\nX: a\r\n\tb\r\nContent-Length: 2\r\n\r\n{}",
]


@pytest.mark.parametrize(
    "answer",
    _REFUSED_AT_ONCE,
    ids=["bare-lf", "bare-lf-in-a-field", "bare-lf-ending", "fold", "fold-tab"],
)
async def test_bare_lf_and_obs_fold_are_refused_however_the_answer_is_cut(answer: bytes) -> None:
    """In two reads cut at every point (a CRLF, or a LF and the space after it, split
    between them): refused once both are in, whatever came in the first."""
    for cut in range(1, len(answer)):
        async with _connection() as connection:
            got = connection.send(b"POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n", b"")
            connection.data_received(answer[:cut])
            if not got.done():
                connection.data_received(answer[cut:])
            assert got.done(), cut
            assert isinstance(got.exception(), lean_http.ProtocolError), cut


@asynccontextmanager
async def _connection() -> AsyncIterator[lean_http._Connection]:
    """A `_Connection` on one end of a TCP connection on 127.0.0.1 (the other end reads
    nothing back: the test hands the connection its reads itself)."""
    loop = asyncio.get_running_loop()
    with socket.create_server(("127.0.0.1", 0)) as listener:
        near = socket.create_connection(listener.getsockname())
        far, _ = listener.accept()
    transport, connection = await loop.create_connection(
        lambda: lean_http._Connection(loop, READ_TIMEOUT_S), sock=near
    )
    try:
        yield connection
    finally:
        transport.abort()
        far.close()


def _head(fields: list[bytes]) -> bytes:
    """A head of 64 KiB less 64 bytes: the fields, padded by the last one's value."""
    start = b"HTTP/1.1 200 OK\r\n" + b"".join(fields)
    end = b"Content-Length: 2\r\n\r\n"
    padding = 64 * 1024 - 64 - len(start) - len(end) - len(b"x-pad: \r\n")
    return start + b"x-pad: " + b"p" * padding + b"\r\n" + end


@pytest.mark.parametrize(
    "head",
    [
        _head([b"x-field-%04d: %s\r\n" % (i, b"v" * 80) for i in range(600)]),
        _head([]),
    ],
    ids=["many-fields", "one-long-field"],
)
async def test_a_64_kib_head_one_byte_per_read_costs_little_cpu(head: bytes) -> None:
    """Each byte is handed over as one read (the connection's `data_received`, as the event
    loop calls it); the CPU of all of them together is measured, and must stay under 50 ms
    (the first reader's was 1,274 ms)."""
    assert len(head) == 64 * 1024 - 64
    reads = [head[i : i + 1] for i in range(len(head))] + [b"{}"]
    async with _connection() as connection:
        answer = connection.send(b"POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n", b"")
        started = time.thread_time()
        for read in reads:
            connection.data_received(read)
        cpu_s = time.thread_time() - started
        assert answer.done()
        status, headers, body = answer.result()
    assert (status, body) == (200, b"{}")
    assert headers["content-length"] == "2"
    assert len(headers["x-pad"]) > 4 * 1024
    assert cpu_s < 0.050, f"{cpu_s * 1000:.0f} ms of CPU"
