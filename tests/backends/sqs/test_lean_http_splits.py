"""`backends.sqs.lean_http`'s answer reader on generated answers (hypothesis), each cut into
pieces at generated points and sent over a real TCP connection on 127.0.0.1 a piece at a
time: the connection reads every piece before the next is sent (the sender waits until
the kernel has delivered it and the reader's socket holds nothing unread), so the reads
are exactly the pieces. The answer must be read the same whatever the cuts (heads ending
at a read's end, CRLFs cut in two, chunk sizes and trailers across reads), never be whole
before its last byte, and leave the connection reusable exactly when it should.

The answers: interim 100s before a final answer of a generated status, header fields
(token names, values with tabs, spaces, visible ASCII and obs-text, repeats) and body,
delimited by Content-Length (with leading zeros at times), by chunks (sizes in either
case, with leading zeros, extensions, trailers) or by the close.
"""

from __future__ import annotations

import asyncio
import fcntl
import socket
import string
import struct
import termios
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from backends.sqs import lean_http
from tests import hypothesis_bounds

pytestmark = pytest.mark.asyncio

bounded = hypothesis_bounds.bounded(60, 2000)

_TOKEN = string.ascii_letters + string.digits + "!#$%&'*+-.^_`|~"
#: Field names the generated fields leave to the framing.
_FRAMING = {"content-length", "transfer-encoding", "connection"}
_names = st.text(_TOKEN, min_size=1, max_size=10).filter(lambda n: n.lower() not in _FRAMING)
_value_chars = st.sampled_from(
    ["\t"] + [chr(c) for c in range(0x20, 0x7F)] + [chr(c) for c in range(0x80, 0x100)]
)
_values = st.text(_value_chars, max_size=16)
_padding = st.sampled_from(["", " ", "\t", "  "])


@dataclass(frozen=True)
class Case:
    data: bytes
    answer: lean_http.Answer
    reusable: bool
    #: Offsets in `data` where a read ends (besides its end).
    cuts: tuple[int, ...]


@st.composite
def _cases(draw: st.DrawFn) -> Case:
    parts: list[bytes] = []
    #: Offsets between the answer's parts: where a cut is likeliest to find a fault.
    seams: list[int] = []

    def add(part: bytes) -> None:
        parts.append(part)
        seams.append(sum(map(len, parts)))

    for _ in range(draw(st.integers(0, 2))):
        add(b"HTTP/1.1 100 Continue\r\n")
        add(b"\r\n")
    status = draw(st.sampled_from([200, 201, 400, 403, 500, 503]))
    add(b"HTTP/1.1 %d" % status)
    add(draw(st.sampled_from([b"", b" ", b" OK", b" Whatever It Says"])))
    headers: dict[str, str] = {}

    def field(name: str, value: str) -> None:
        add(f"\r\n{name}:{draw(_padding)}{value}{draw(_padding)}".encode("latin-1"))
        headers[name.lower()] = value  # a repeated name reads as its last value

    for name, value in draw(st.lists(st.tuples(_names, _values), max_size=4)):
        field(name, value.strip(" \t"))
    if draw(st.booleans()) and headers:  # a repeated name, in another case
        repeated = next(iter(headers))
        field(repeated.upper(), draw(_values).strip(" \t"))
    body = draw(st.binary(max_size=600))
    framing = draw(st.sampled_from(["length", "chunked", "close"]))
    if framing == "length":
        zeros = "0" * draw(st.integers(0, 3))
        field("Content-Length", zeros + str(len(body)))
    elif framing == "chunked":
        field("Transfer-Encoding", "chunked")
    add(b"\r\n\r\n")
    if framing == "chunked":
        cuts = draw(st.lists(st.integers(1, len(body)), max_size=5)) if body else []
        ends = sorted({*cuts, len(body)} - {0})
        for start, end in zip([0, *ends], ends, strict=False):
            size = f"{end - start:x}"
            size = draw(st.sampled_from(["", "0", "00"])) + draw(
                st.sampled_from([size, size.upper()])
            )
            add(size.encode() + draw(st.sampled_from([b"", b";x", b";x=y", b" ;a=b"])))
            add(b"\r\n")
            add(body[start:end])
            add(b"\r\n")
        add(draw(st.sampled_from([b"0", b"000"])) + b"\r\n")
        for name, value in draw(st.lists(st.tuples(_names, _values), max_size=2)):
            add(f"{name}: {value}\r\n".encode("latin-1"))  # trailers: read, not kept
        add(b"\r\n")
    else:
        add(body)
    data = b"".join(parts)
    near = st.sampled_from(seams).flatmap(
        lambda seam: st.integers(max(seam - 2, 1), min(seam + 2, len(data)))
    )
    cuts = draw(st.lists(st.one_of(near, st.integers(1, len(data))), max_size=8))
    return Case(data, (status, headers, body), framing != "close", (*sorted(set(cuts)),))


def _queued(sock: int, request: int) -> int:
    """Bytes in a socket's queue: FIONREAD, unread; TIOCOUTQ, sent and not yet acked."""
    queued: int = struct.unpack("i", fcntl.ioctl(sock, request, b"\0\0\0\0"))[0]
    return queued


@asynccontextmanager
async def _connected() -> AsyncIterator[tuple[lean_http._Connection, int, socket.socket]]:
    """A `_Connection` on one end of a TCP connection on 127.0.0.1 (the loop's transport
    reads that end); the other end, to write to, and the reader's fd."""
    loop = asyncio.get_running_loop()
    with socket.create_server(("127.0.0.1", 0)) as listener:
        near = socket.create_connection(listener.getsockname())
        far, _ = listener.accept()
    fd = near.fileno()
    transport, connection = await loop.create_connection(
        lambda: lean_http._Connection(loop, 5.0), sock=near
    )
    try:
        yield connection, fd, far
    finally:
        transport.abort()
        far.close()


async def _read_by_the_reader(fd: int, far: socket.socket) -> None:
    """Until what was sent is delivered and read: the loop's read of it has run."""
    for _ in range(10_000):
        if not _queued(far.fileno(), termios.TIOCOUTQ) and not _queued(fd, termios.FIONREAD):
            return
        await asyncio.sleep(0)  # a turn of the loop, for its read
    raise AssertionError("the reader did not read what was sent")


@bounded
@given(case=_cases())
async def test_an_answer_cut_anywhere_reads_the_same(case: Case) -> None:
    async with _connected() as (connection, fd, far):
        answer = connection.send(b"POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n", b"")
        start = 0
        for end in sorted({*case.cuts, len(case.data)}):
            assert not answer.done()  # nothing is whole before its last byte
            far.sendall(case.data[start:end])
            await _read_by_the_reader(fd, far)
            start = end
        if not case.reusable:  # read to the close
            assert not answer.done()
            far.shutdown(socket.SHUT_WR)
            await asyncio.wait_for(asyncio.shield(answer), 5)
        assert answer.done()
        assert answer.result() == case.answer
        assert connection.reusable is case.reusable
