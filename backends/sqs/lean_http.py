"""`HttpPool`: the lean path's HTTP/1.1 client, keep-alive connections to one origin.

The lean path spent more CPU in aiohttp than in everything else of a call together: a
receive and a delete of 10 messages cost 440 µs of client CPU through an aiohttp session
and 240 µs through a bare asyncio protocol, the same signed requests to the same server
(serve-sqs on loopback). aiohttp is general (redirects, cookies, a stream reader, tracing
hooks, a timer per read); a worker's calls are not: one method, one origin, bodies of
known length. So this module speaks just that much HTTP/1.1 on asyncio's transports (and
uvloop's). Rules it keeps:
- One origin (scheme, host, port) per pool; `post(headers, body)` writes one
  `POST <path> HTTP/1.1` with `Host` (the value given, which the signer signed) and
  `Content-Length`, then the headers as given (UTF-8, as aiohttp writes them; a value with
  CR or LF is refused, never sent).
- At most `limit` connections open at once; a call beyond them waits its turn (FIFO).
  An idle connection is reused newest first; one idle for `keepalive_s` or more, or that
  the peer has closed, is closed rather than reused.
- An answer is a status line `HTTP/1.x`, headers (names tokens, lower-cased; values and
  the reason with no control but tabs, lines ended by CRLF only; a repeated name's last
  value given, as aiobotocore's headers give it, though the framing sees every value, so
  two different lengths are refused, not picked; decoded as Latin-1, as
  http.client decodes them) and a body by `Content-Length`, the chunked transfer coding
  (any other transfer coding is a `ProtocolError`), or, with neither, everything up to
  the close. Interim 1xx answers are skipped; 204 and 304 have no body. At most 64 KiB
  of head, 64 KiB of interim answers' heads and trailers together, and `MAX_BODY` of
  body: more, or anything that is not HTTP/1.x, is a `ProtocolError` and the connection
  is closed. A line ended by a bare LF (RFC 9112 2.2 lets a recipient read it; this client
  refuses it) or a value folded over lines (obs-fold) is refused as soon as it comes, not
  held for the CRLF CRLF it would never send; each byte of a head is searched once,
  however the head is cut into reads.
- A body read to the close ends at the peer's close (a FIN; over TLS, what the loop
  reports as the end: asyncio's and uvloop's SSL protocols report a close without
  close_notify alike), never at a reset or an error, which cut it.
- A connection is reused only after a whole answer that allows it (HTTP/1.1 without
  `Connection: close`, HTTP/1.0 with `keep-alive`) and with no byte after it, and not
  once the peer has closed it. A byte or a close the loop has yet to read when the next
  request goes cannot be told from that request's answer (HTTP/1.1's race, aiohttp's
  too): a peer closing after each answer without `Connection: close` fails every other
  call with `Closed` when calls follow each other with no turn of the loop between.
- Time: the TCP connect and the TLS handshake within `connect_timeout_s`, else
  `ConnectTimeout`; once a request is written, its answer must make progress at least
  every `read_timeout_s` (the time between reads, as aiohttp's `sock_read`), else
  `ReadTimeout`. One timer per connection, re-armed lazily, not one per request.
- A call cancelled, or failed, before its whole answer is read closes its connection:
  the rest of that answer must never be read as the next call's.
- Errors are this module's `HttpError`s (connect failed, connect timeout, TLS, read
  timeout, closed, protocol); `backends.sqs.lean.transport_error` maps them to botocore's
  exceptions as it maps aiohttp's. No text of a request or an answer goes into them.
- TLS with the given `ssl.SSLContext` (botocore's CA bundle, verified; SNI is the host).
- No proxies: `backends.sqs.lean.LeanTransport` keeps aiohttp for a proxied endpoint.
"""

from __future__ import annotations

import asyncio
import re
import ssl
from collections.abc import Callable, Mapping
from typing import cast
from urllib.parse import urlsplit

import anyio

__all__ = [
    "MAX_BODY",
    "Closed",
    "ConnectFailed",
    "ConnectTimeout",
    "HttpError",
    "HttpPool",
    "ProtocolError",
    "ReadTimeout",
    "RefusedRequest",
    "TlsFailed",
]

#: The largest answer body read (10 SQS messages of 1 MiB with attributes fit many times).
MAX_BODY = 64 * 1024 * 1024
_MAX_HEAD = 64 * 1024
_LENGTH_DIGITS = len(str(MAX_BODY))
#: A chunk-size line or a trailer line longer than this is not HTTP/1.1 from SQS.
_MAX_LINE = 8 * 1024
_HEX_DIGITS = b"0123456789abcdefABCDEF"
#: An answer's head (RFC 9112 2.1, 4, 5): a status line (its reason may be empty, or absent
#: with its space), then fields whose names are tokens; the reason and the values are
#: tabs, spaces, visible ASCII and obs-text: no CR or LF but the CRLF ending each line, no
#: other control. One pass checks it all; the head is then split with no more checks.
#: (Possessive: nothing a repetition takes could end it, so nothing is given back.)
_HEAD_FORM = re.compile(
    r"HTTP/1\.[01] [0-9]{3}(?: [\t -~\x80-\xff]*+)?+"
    r"(?:\r\n[-!#$%&'*+.^_`|~0-9A-Za-z]++:[\t -~\x80-\xff]*+)*+"
)
_BARE_LF = "an answer with a line ended by a bare LF, not CRLF"
_FOLDED = "an answer with a field value folded over lines (obs-fold)"
#: asyncio runs a timer up to its clock resolution early; a timeout is not cut that short.
_TIMER_SLACK_S = 0.001


class HttpError(Exception):
    """A call that got no whole answer (or was not sent): its texts name no data."""


class RefusedRequest(HttpError):
    """Not sent: a header value with CR or LF, or the pool is closed."""


class ConnectFailed(HttpError):
    """No connection: the name did not resolve, or the connect was refused or failed."""


class ConnectTimeout(HttpError):
    """No connection within the connect timeout (TCP and TLS handshake together)."""


class TlsFailed(HttpError):
    """The TLS handshake failed (a certificate not trusted, a protocol mismatch)."""


class ReadTimeout(HttpError):
    """The answer made no progress for the read timeout."""


class Closed(HttpError):
    """The peer closed or reset the connection before the whole answer."""


class ProtocolError(Closed):
    """What came back is not an HTTP/1.x answer within this module's limits."""


Answer = tuple[int, dict[str, str], bytes]

# Where a connection's reading of its answer is.
_HEAD, _LENGTH, _CHUNK_SIZE, _CHUNK_DATA, _CHUNK_END, _TRAILERS, _TO_CLOSE = range(7)


class _Connection(asyncio.Protocol):
    """One HTTP/1.1 connection: writes a request, reads its answer, one at a time."""

    def __init__(self, loop: asyncio.AbstractEventLoop, read_timeout_s: float) -> None:
        self._loop = loop
        self._read_timeout_s = read_timeout_s
        self.transport: asyncio.Transport | None = None
        #: False once it must not carry another request (closed, broken, told to close).
        self.reusable = True
        self.idle_since = 0.0
        self._waiter: asyncio.Future[Answer] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._last_read = 0.0
        self._buffer = bytearray()
        self._state = _HEAD
        self._status = 0
        self._headers: dict[str, str] = {}
        self._keep_alive = True
        self._body = bytearray()
        self._remaining = 0
        #: Bytes of interim answers' heads and of trailers in the answer under way.
        self._extra_head = 0
        #: How much of the buffer's head has been looked at (each byte is, once).
        self._seen = 0

    # -- asyncio's side --------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (uvloop's is not a subclass of asyncio.Transport).
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        if self._waiter is None:
            # Bytes nobody asked for: whatever they are, this connection is done.
            self.close()
            return
        self._last_read = self._loop.time()
        self._buffer += data
        try:
            self._read()
        except HttpError as exc:
            self._fail(exc)

    def eof_received(self) -> bool:
        self._ended()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.reusable = False
        self._cancel_timer()
        if exc is None:
            self._ended()
        else:  # a reset, not a close: it ends no body, not even one read to the close
            self._fail(Closed(f"the connection was lost ({type(exc).__name__})"))

    # -- the pool's side ---------------------------------------------------------------

    def send(self, request: bytes, body: bytes) -> asyncio.Future[Answer]:
        """Write a request; the future is its answer (or the HttpError that ended it)."""
        transport = self.transport
        if transport is None or transport.is_closing() or not self.reusable:
            raise Closed("the connection closed before the request was sent")
        waiter: asyncio.Future[Answer] = self._loop.create_future()
        self._waiter = waiter
        self._last_read = now = self._loop.time()
        if self._timer is None:
            self._timer = self._loop.call_at(now + self._read_timeout_s, self._on_timer)
        if len(body) < 65536:
            transport.write(request + body)
        else:  # not copied into one buffer with the head
            transport.write(request)
            transport.write(body)
        return waiter

    def close(self) -> None:
        """Close now, dropping whatever is unread (a waiting call gets `Closed`)."""
        self._cancel_timer()
        if self.transport is not None:
            self.transport.abort()
        self._fail(Closed("the connection was closed"))

    def close_idle(self) -> None:
        """Close an idle connection politely (what is written is flushed first)."""
        self.reusable = False
        self._cancel_timer()
        if self.transport is not None:
            self.transport.close()

    # -- time ----------------------------------------------------------------------------

    def _on_timer(self) -> None:
        self._timer = None
        if self._waiter is None:
            return  # idle: disarmed until the next request
        due = self._last_read + self._read_timeout_s
        if self._loop.time() + _TIMER_SLACK_S >= due:
            self._fail(ReadTimeout(f"no answer for {self._read_timeout_s:g} s"))  # aborts
        else:
            self._timer = self._loop.call_at(due, self._on_timer)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # -- the answer ----------------------------------------------------------------------

    def _fail(self, exc: HttpError) -> None:
        self.reusable = False
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)
        if self.transport is not None and not self.transport.is_closing():
            self.transport.abort()

    def _ended(self) -> None:
        """The peer will send no more: an answer read to the close is whole; any other
        answer under way is cut."""
        self.reusable = False
        if self._waiter is None:
            return
        if self._state == _TO_CLOSE:
            self._body += self._buffer
            self._buffer.clear()
            self._finish(bytes(self._body))
        else:
            self._fail(Closed("the connection closed before the whole answer"))

    def _finish(self, body: bytes) -> None:
        waiter, self._waiter = self._waiter, None
        answer = (self._status, self._headers, body)
        if self._buffer or not self._keep_alive:
            self.reusable = False
        self._state = _HEAD
        self._headers = {}
        self._body = bytearray()
        self._extra_head = 0
        if waiter is not None and not waiter.done():
            waiter.set_result(answer)

    def _read(self) -> None:
        buffer = self._buffer
        while self._waiter is not None:
            state = self._state
            if state == _HEAD:
                # Only from the bytes that came since the last look (a CRLF CRLF may
                # straddle them): a head a byte per read costs linear time, not quadratic.
                seen = self._seen
                end = buffer.find(b"\r\n\r\n", seen - 3 if seen > 3 else 0)
                if end < 0:
                    self._no_head_end(buffer)
                    return
                if end > _MAX_HEAD:
                    raise ProtocolError("an answer's head over 64 KiB")
                head = buffer[:end].decode("latin-1")
                del buffer[: end + 4]
                self._seen = 0
                self._start(head)
            elif state == _LENGTH:
                length = self._remaining
                if len(buffer) < length:
                    return
                if len(buffer) == length:  # the common case: nothing after the body
                    body = bytes(buffer)
                    buffer.clear()
                else:
                    body = bytes(buffer[:length])
                    del buffer[:length]
                self._finish(body)
            elif state == _CHUNK_SIZE:
                line = self._line(buffer)
                if line is None:
                    return
                size_text = line.split(b";", 1)[0].strip(b" \t")
                # Hexadecimal digits only: int(text, 16) also reads a 0x prefix.
                if not size_text or size_text.strip(_HEX_DIGITS):
                    raise ProtocolError("a chunk size that is not hexadecimal")
                size = int(size_text, 16)
                if len(self._body) + size > MAX_BODY:
                    raise ProtocolError(f"an answer's body over {MAX_BODY} bytes")
                self._remaining = size
                self._state = _CHUNK_DATA if size else _TRAILERS
            elif state == _CHUNK_DATA:
                if not buffer:
                    return
                taken = buffer[: self._remaining]
                del buffer[: len(taken)]
                self._body += taken
                self._remaining -= len(taken)
                if not self._remaining:
                    self._state = _CHUNK_END
            elif state == _CHUNK_END:
                if len(buffer) < 2:
                    return
                if buffer[:2] != b"\r\n":
                    raise ProtocolError("a chunk not ended by CRLF")
                del buffer[:2]
                self._state = _CHUNK_SIZE
            elif state == _TRAILERS:
                line = self._line(buffer)
                if line is None:
                    return
                self._count_extra_head(len(line) + 2)
                if not line:
                    self._finish(bytes(self._body))
            else:  # _TO_CLOSE: the body is what comes until the peer closes
                if len(self._body) + len(buffer) > MAX_BODY:
                    raise ProtocolError(f"an answer's body over {MAX_BODY} bytes")
                self._body += buffer
                buffer.clear()
                return

    def _no_head_end(self, buffer: bytearray) -> None:
        """The head at the buffer's start has not ended yet. It never will if a line of
        it ends in a bare LF, or a value folds over lines (obs-fold): refused as soon as
        it comes, with the bytes that came since the last look. (A head that has ended
        is checked whole by `_start`.)"""
        seen = self._seen
        # From the byte before the new ones: a CRLF, or a LF and what follows it, may
        # straddle two reads.
        since = seen - 1 if seen else 0
        if buffer.find(b"\n", since) >= 0:
            if buffer.count(b"\n", seen) != buffer.count(b"\r\n", since):
                raise ProtocolError(_BARE_LF)
            if buffer.find(b"\n ", since) >= 0 or buffer.find(b"\n\t", since) >= 0:
                raise ProtocolError(_FOLDED)
        if len(buffer) > _MAX_HEAD:
            raise ProtocolError("an answer's head over 64 KiB")
        self._seen = len(buffer)

    @staticmethod
    def _line(buffer: bytearray) -> bytes | None:
        end = buffer.find(b"\r\n")
        if end < 0:
            if len(buffer) > _MAX_LINE:
                raise ProtocolError("a line of a chunked body over 8 KiB")
            return None
        if end > _MAX_LINE:
            raise ProtocolError("a line of a chunked body over 8 KiB")
        line = bytes(buffer[:end])
        del buffer[: end + 2]
        return line

    def _count_extra_head(self, size: int) -> None:
        """Interim answers and trailers are small, but a peer could send them without end
        (each within the read timeout): they count toward a head's limit."""
        self._extra_head += size
        if self._extra_head > _MAX_HEAD:
            raise ProtocolError("an answer's interim heads and trailers over 64 KiB")

    def _start(self, head: str) -> None:
        """Read an answer's head (decoded as Latin-1); choose how its body is delimited."""
        if _HEAD_FORM.fullmatch(head) is None:
            raise ProtocolError(_malformed(head))
        lines = head.split("\r\n")
        version = head[:8]
        status = int(head[9:12])
        headers: dict[str, str] = {}
        #: A repeated name's last value, as aiobotocore's headers read it (None: no repeat).
        last: dict[str, str] | None = None
        for line in lines[1:]:
            name, _, value = line.partition(":")
            name = name.lower()
            value = value.strip(" \t")
            seen = headers.get(name)
            if seen is None:
                headers[name] = value
            else:  # joined for the framing below (two lengths are refused, not picked)
                headers[name] = f"{seen}, {value}"
                if last is None:
                    last = {}
                last[name] = value
        if status < 200:
            if status < 100:  # a status code is 100 to 999 (RFC 9110 15)
                raise ProtocolError("an answer that is not HTTP/1.x")
            if status == 101:
                raise ProtocolError("an answer switching protocols")
            self._count_extra_head(len(head) + 4)
            return  # an interim answer: the real one follows
        self._status = status
        self._headers = headers if last is None else {**headers, **last}
        tokens = {t.strip().lower() for t in headers.get("connection", "").split(",")}
        self._keep_alive = (
            "close" not in tokens if version == "HTTP/1.1" else "keep-alive" in tokens
        )
        coding = headers.get("transfer-encoding")
        length = headers.get("content-length")
        if status in (204, 304):
            self._finish(b"")
        elif coding is not None:
            # Chunked alone: no request asks for another coding (no TE is sent), and a body
            # in one (gzip, chunked) would be handed over still encoded.
            if coding.lower() != "chunked":
                raise ProtocolError("a transfer coding other than chunked")
            self._state = _CHUNK_SIZE
            if length is not None:
                self._keep_alive = False  # both: the length is ignored (RFC 9112 6.1)
        elif length is not None:
            values = {v.strip() for v in length.split(",")}
            if len(values) != 1 or not (value := values.pop()).isdecimal():
                raise ProtocolError("a Content-Length that is not one number")
            if len(value) > _LENGTH_DIGITS:
                # Leading zeros (allowed), or a length over MAX_BODY, perhaps one of more
                # digits than int() reads (4300).
                value = value.lstrip("0") or "0"
                if len(value) > _LENGTH_DIGITS:
                    raise ProtocolError(f"an answer's body over {MAX_BODY} bytes")
            self._remaining = int(value)
            if self._remaining > MAX_BODY:
                raise ProtocolError(f"an answer's body over {MAX_BODY} bytes")
            self._state = _LENGTH
        else:
            self._state = _TO_CLOSE
            self._keep_alive = False


def _malformed(head: str) -> str:
    """Why a head does not match `_HEAD_FORM`, in words that name no byte of it."""
    if head.count("\n") != head.count("\r\n"):
        return _BARE_LF
    if "\n " in head or "\n\t" in head:
        return _FOLDED
    return "an answer's head that is not HTTP/1.x"


class HttpPool:
    """Keep-alive HTTP/1.1 connections to the origin of one URL; `post` to its path."""

    def __init__(
        self,
        url: str,
        *,
        limit: int,
        connect_timeout_s: float,
        read_timeout_s: float,
        keepalive_s: float,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        if parts.scheme == "https" and ssl_context is None:
            raise ValueError("an https URL needs an SSL context")
        if limit < 1:
            raise ValueError(f"a pool's limit is 1 or more, not {limit}")
        self._host = parts.hostname
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self._ssl = ssl_context if parts.scheme == "https" else None
        path = parts.path or "/"
        self._target = path + (f"?{parts.query}" if parts.query else "")
        self._slots = asyncio.Semaphore(limit)
        self._connect_timeout_s = connect_timeout_s
        self._read_timeout_s = read_timeout_s
        self._keepalive_s = keepalive_s
        self._idle: list[_Connection] = []
        self._open: set[_Connection] = set()
        #: The connects under way (their timeouts' scopes), for `aclose` to cancel.
        self._connecting: set[anyio.CancelScope] = set()
        self._closed = False

    @property
    def open_connections(self) -> int:
        return len(self._open)

    async def post(self, host: str, headers: Mapping[str, str], body: bytes) -> Answer:
        """POST `body` with `headers` (`host`: the Host header's value); the answer as
        (status, headers with lower-cased names, body), or an HttpError."""
        fields = "".join([f"{name}: {value}\r\n" for name, value in headers.items()])
        lines = len(headers)
        if (
            fields.count("\n") != lines
            or fields.count("\r") != lines
            or "\r" in host
            or "\n" in host
        ):
            raise RefusedRequest("a header value with CR or LF")
        request = (
            f"POST {self._target} HTTP/1.1\r\nHost: {host}\r\n"
            f"Content-Length: {len(body)}\r\n{fields}\r\n"
        ).encode()
        async with self._slots:
            connection = self._reuse() or await self._connect()
            try:
                answer = await connection.send(request, body)
            except BaseException:
                connection.close()
                self._open.discard(connection)
                raise
            if connection.reusable and not self._closed:
                connection.idle_since = asyncio.get_running_loop().time()
                self._idle.append(connection)
            else:
                self._drop(connection)
            return answer

    def _reuse(self) -> _Connection | None:
        if self._closed:
            raise RefusedRequest("the HTTP pool is closed")
        idle = self._idle
        if not idle:
            return None
        oldest = asyncio.get_running_loop().time() - self._keepalive_s
        # The oldest first: they are the ones to have outlived the keep-alive.
        while idle and (idle[0].idle_since <= oldest or not idle[0].reusable):
            self._drop(idle.pop(0))
        while idle:
            connection = idle.pop()
            if connection.reusable:
                return connection
            self._drop(connection)
        return None

    def _drop(self, connection: _Connection) -> None:
        connection.close_idle()
        self._open.discard(connection)

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        make: Callable[[], _Connection] = lambda: _Connection(loop, self._read_timeout_s)  # noqa: E731
        connection: _Connection | None = None
        try:
            with anyio.fail_after(self._connect_timeout_s) as scope:
                self._connecting.add(scope)
                try:
                    _, connection = await loop.create_connection(
                        make,
                        self._host,
                        self._port,
                        ssl=self._ssl,
                        # A fully qualified name's final dot is no part of the name a
                        # certificate holds (aiohttp strips it too); Host keeps it, as signed.
                        server_hostname=self._host.rstrip(".") if self._ssl is not None else None,
                    )
                finally:
                    self._connecting.discard(scope)
        except TimeoutError as exc:
            if self._closed:
                raise Closed("the HTTP pool was closed") from exc
            raise ConnectTimeout(f"no connection within {self._connect_timeout_s:g} s") from exc
        except ssl.SSLError as exc:
            raise TlsFailed(f"TLS handshake failed ({type(exc).__name__})") from exc
        except OSError as exc:
            raise ConnectFailed(f"cannot connect ({type(exc).__name__})") from exc
        # None: `aclose` cancelled the connect (its scope took the cancellation).
        if connection is None or self._closed:
            if connection is not None:
                connection.close()
            raise Closed("the HTTP pool was closed")
        self._open.add(connection)
        return connection

    async def aclose(self) -> None:
        """Close every connection; a call under way (connecting, or waiting for its
        answer) gets `Closed`, a later one is refused."""
        self._closed = True
        for scope in self._connecting:
            scope.cancel()
        self._idle.clear()
        for connection in list(self._open):
            connection.close_idle()
            connection._fail(Closed("the HTTP pool was closed"))
        self._open.clear()
