"""The ops listener's connections: accepted by its own loop up to a cap, each timed by what
it is doing, its faults logged once per kind.

aiohttp's own server (`loop.create_server`) accepts every connection the kernel has, with no
cap, keeps a connection whose head never ends for as long as its keep-alive timer, and logs
each malformed request as an error with its traceback. On `EMFILE` asyncio's accept loop
(Python 3.11) logs the error and schedules a retry once per connection waiting in the
backlog: 123,000 lines with tracebacks in a minute, from 20,000 idle connections. Here:

- `Connections.serve` accepts from each listening socket while fewer than the cap are open,
  and stops accepting when the cap is reached: the rest wait in the kernel's backlog, which
  costs the worker no file descriptor. An accept error other than a client that already
  left (`EMFILE` from a worker out of descriptors, `ENOBUFS`, ...) is logged once per
  `log_every_s` and retried after a pause that doubles up to 2 s: never a spin.
- Each connection (`_Connection`, aiohttp's `RequestHandler` with a few hooks) awaits or
  reads a request's head (from its accept, or from the first byte after an answer), is in a
  request, or is idle between requests; a sweep every fraction of a second aborts one past
  its phase's deadline (`OpsLimits`). Aborted, not closed: a client that does not read would keep a
  closed transport's unsent answer, and the descriptor, forever.
- Client faults (a malformed or oversized head, a head or request out of time, a body too
  large or out of time, JSON nested too deep, a Host that is not loopback, the cap reached)
  are `ops.client_fault` lines at `info`, without traceback: the first of each kind at once,
  then at most one a `log_every_s` with the `count` since the last. A request the listener
  failed to answer (500) is an `ops.request_failed` error with its traceback, limited the
  same way per exception type.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import math
import socket
import time
from collections.abc import Callable, Sequence
from enum import Enum
from typing import Any, cast

import anyio
import structlog
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.typedefs import Handler, Middleware
from aiohttp.web_protocol import RequestHandler, RequestPayloadError

from worker.ops.limits import MAX_LINE_BYTES, OpsLimits

__all__ = ["Connections", "FaultLog", "Phase", "client_fault", "limits_middleware"]

#: Accept errors that mean only that the client left before its connection was taken.
_CLIENT_LEFT = frozenset(
    code
    for code in (
        getattr(errno, name, None)
        for name in ("ECONNABORTED", "EPROTO", "ECONNRESET", "EPERM", "EAGAIN", "EINTR")
    )
    if code is not None
)
#: The first pause after a failed accept, doubled after each further failure up to the max.
_ACCEPT_BACKOFF_S = 0.1
_ACCEPT_BACKOFF_MAX_S = 2.0
#: Different fault keys remembered; past it, every new one shares one key.
_KEYS_CAP = 64
#: aiohttp's records (a request it could not parse, at debug) go nowhere: each fault is
#: logged here, once per kind.
_AIOHTTP_LOGGER = logging.getLogger("lease_worker.ops.http")
_AIOHTTP_LOGGER.propagate = False
_AIOHTTP_LOGGER.addHandler(logging.NullHandler())


class FaultLog:
    """Log lines about what clients did, at most one per kind per `every_s`.

    The first fault of a kind is logged at once (`count=1`); those that follow within
    `every_s` are counted, and logged as one line (`count=N`, the last one's details) by the
    next fault after it or by `flush()`, which the listener's sweep calls.
    """

    def __init__(self, every_s: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._every_s = every_s
        self._clock = clock
        self._log = structlog.get_logger("lease_worker.ops")
        self._kinds: dict[tuple[str, str], _Kind] = {}

    def client(self, kind: str, *, peer: str | None = None, detail: str | None = None) -> None:
        """A client's fault: `ops.client_fault` at info, no traceback."""
        self._note(("client", kind), {"kind": kind, "detail": detail, "peer": peer})

    def accept_failed(self, error: OSError, retry_in_s: float) -> None:
        """The listener could not take a connection (out of descriptors, say)."""
        name = errno.errorcode.get(error.errno or 0, str(error.errno))
        self._note(("accept", name), {"error": name, "retry_in_s": retry_in_s})

    def request_failed(self, kind: str, error: BaseException | None) -> None:
        """The listener failed to answer a request: `ops.request_failed`, with traceback."""
        self._note(("failed", f"{kind} {type(error).__name__}"), {"kind": kind, "error": error})

    def flush(self) -> None:
        """Log the faults counted and not yet logged whose kind may log again."""
        now = self._clock()
        for key, entry in self._kinds.items():
            if entry.count and now >= entry.next_at:
                self._write(key[0], entry, now)

    def _note(self, key: tuple[str, str], fields: dict[str, Any]) -> None:
        entry = self._kinds.get(key)
        if entry is None:
            if len(self._kinds) >= _KEYS_CAP:  # kinds are few; never a log line per one
                key, fields = ("client", "other"), {"kind": "other", "detail": None, "peer": None}
                entry = self._kinds.setdefault(key, _Kind())
            else:
                entry = self._kinds[key] = _Kind()
        entry.count += 1
        entry.fields = fields
        now = self._clock()
        if now >= entry.next_at:
            self._write(key[0], entry, now)

    def _write(self, family: str, entry: _Kind, now: float) -> None:
        count, fields = entry.count, entry.fields
        entry.count, entry.next_at = 0, now + self._every_s
        if family == "client":
            self._log.info(
                "ops.client_fault",
                kind=fields["kind"],
                detail=fields["detail"],
                peer=fields["peer"],
                count=count,
            )
        elif family == "accept":
            self._log.warning(
                "ops.accept_failed",
                error=fields["error"],
                retry_in_s=fields["retry_in_s"],
                count=count,
            )
        else:
            self._log.error(
                "ops.request_failed", kind=fields["kind"], count=count, exc_info=fields["error"]
            )


class _Kind:
    __slots__ = ("count", "fields", "next_at")

    def __init__(self) -> None:
        #: Faults not yet logged; when the next line may be written; the last one's details.
        self.count = 0
        self.next_at = 0.0
        self.fields: dict[str, Any] = {}


class Phase(Enum):
    #: Kept alive after an answer, no byte of the next request yet: closed after
    #: `idle_timeout_s`.
    IDLE = "idle"
    #: A request's head is awaited or arriving: it must be complete `header_timeout_s` after
    #: the connection was accepted (its first request) or after its first byte (the next).
    HEAD = "head"
    #: A request is read, handled and answered within `request_timeout_s`.
    REQUEST = "request"


#: What a connection past its deadline did wrong, by phase (an idle one did nothing).
_LATE = {Phase.HEAD: "header_timeout", Phase.REQUEST: "request_timeout"}


class _Connection(RequestHandler):
    """aiohttp's `RequestHandler`, telling `Connections` what it is doing."""

    __slots__ = (
        "_connections",
        "_muted",
        "deadline",
        "lost",
        "opened_at",
        "peer",
        "phase",
        "socket_transport",
    )

    def __init__(self, manager: web.Server, connections: Connections, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._connections = connections
        self._muted = False
        self.phase = Phase.HEAD
        self.deadline = 0.0
        #: When it was counted in (at the cap, the oldest with no request goes first).
        self.opened_at = math.inf
        self.peer: str | None = None
        self.lost = False
        #: Kept here: aiohttp forgets its transport when it closes it, and a closed
        #: transport whose client does not read keeps its descriptor until aborted.
        self.socket_transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        peer = transport.get_extra_info("peername")
        self.peer = str(peer[0]) if isinstance(peer, tuple) and peer else None
        # uvloop's transports are not asyncio.Transport subclasses, but have its methods.
        self.socket_transport = cast(asyncio.Transport, transport)
        self._connections.opened(self)
        super().connection_made(transport)

    def connection_lost(self, exc: BaseException | None) -> None:
        self.lost = True
        try:
            super().connection_lost(exc)
        finally:
            self._connections.closed(self)

    def data_received(self, data: bytes) -> None:
        if data and self.phase is Phase.IDLE:
            self._connections.enter(self, Phase.HEAD)
        super().data_received(data)

    async def finish_response(
        self, request: web.BaseRequest, resp: web.StreamResponse, start_time: float | None
    ) -> tuple[web.StreamResponse, bool]:
        try:
            return await super().finish_response(request, resp, start_time)
        finally:
            self._connections.enter(self, Phase.IDLE)

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        faults = self._connections.faults
        if isinstance(exc, HttpProcessingError) or 400 <= status < 500:
            faults.client("bad_request", detail=type(exc).__name__, peer=self.peer)
        else:
            faults.request_failed("handler_timeout" if status == 504 else "error", exc)
        self._muted = True  # aiohttp's own record of it, with its traceback: not again
        try:
            return super().handle_error(request, status, exc, message)
        finally:
            self._muted = False

    def log_exception(self, *args: Any, **kw: Any) -> None:
        if not self._muted:
            error = kw.get("exc_info")
            self._connections.faults.request_failed(
                "unhandled", error if isinstance(error, BaseException) else None
            )

    def fault(self, kind: str) -> None:
        self._connections.faults.client(kind, peer=self.peer)


def client_fault(request: web.BaseRequest, kind: str) -> None:
    """Log a client's fault in a request to the ops listener, once per kind (`FaultLog`)."""
    protocol = request.protocol
    if isinstance(protocol, _Connection):
        protocol.fault(kind)


class Connections:
    """The ops listener's open connections: the cap, each phase's deadline, the accept
    loops and the sweep."""

    def __init__(self, limits: OpsLimits, *, cap: int, faults: FaultLog) -> None:
        self.limits = limits
        self.cap = cap
        self.faults = faults
        self._server: web.Server | None = None
        self._open: dict[_Connection, None] = {}
        self._room = asyncio.Event()
        self._room.set()
        self._timeouts = {
            Phase.IDLE: limits.idle_timeout_s,
            Phase.HEAD: limits.header_timeout_s,
            Phase.REQUEST: limits.request_timeout_s,
        }
        self._tick_s = min(0.5, max(0.02, min(self._timeouts.values()) / 4))
        self._evict_after_s = min(1.0, limits.header_timeout_s)
        self._kwargs: dict[str, Any] = {
            # aiohttp's own timer closes only connections with no request under way, never
            # before the deadlines here would have.
            "keepalive_timeout": limits.idle_timeout_s + limits.header_timeout_s,
            "max_line_size": MAX_LINE_BYTES,
            "max_field_size": MAX_LINE_BYTES,
            # A body left unread (after a 408 or 413) is not waited for: the connection closes.
            "lingering_time": 0.0,
            "access_log": None,
            "logger": _AIOHTTP_LOGGER,
        }

    def __len__(self) -> int:
        return len(self._open)

    def _protocol(self) -> _Connection:
        assert self._server is not None
        return _Connection(self._server, self, loop=asyncio.get_running_loop(), **self._kwargs)

    def opened(self, connection: _Connection) -> None:
        """Count `connection` in (once, and never after it was lost)."""
        if connection in self._open or connection.lost:
            return
        self._open[connection] = None
        connection.opened_at = asyncio.get_running_loop().time()
        # Its first request is due at once: a client that connects and waits (one of a
        # flood of idle connections) holds a place for the head's time, not the idle time.
        self.enter(connection, Phase.HEAD)
        if len(self._open) >= self.cap:
            self._room.clear()

    def closed(self, connection: _Connection) -> None:
        self._open.pop(connection, None)
        if len(self._open) < self.cap:
            self._room.set()

    def enter(self, connection: _Connection, phase: Phase) -> None:
        connection.phase = phase
        connection.deadline = asyncio.get_running_loop().time() + self._timeouts[phase]

    def _make_room(self) -> bool:
        """At the cap: abort the connection open longest (at least `_evict_after_s`) with no
        request under way (kept alive between requests, or its head not yet in), so that a
        newcomer (the kubelet's probe) is not kept in the backlog for ever by clients that
        hold every place politely; False if none may go. The age bound keeps a flood of
        connections from turning this into a loop of accepts and aborts: at most `cap`
        evictions per `_evict_after_s`."""
        oldest_allowed = asyncio.get_running_loop().time() - self._evict_after_s
        waiting = [
            c
            for c in self._open
            if c.phase is not Phase.REQUEST
            and c.opened_at <= oldest_allowed
            and c.deadline != math.inf
            and not c.lost
        ]
        if not waiting:
            return False
        oldest = min(waiting, key=lambda connection: connection.opened_at)
        oldest.fault("evicted_at_cap")
        _abort(oldest)
        return True

    async def serve(self, server: web.Server, sockets: Sequence[socket.socket]) -> None:
        """Accept from `sockets` into `server` (aiohttp's), and sweep, until cancelled."""
        self._server = server
        async with anyio.create_task_group() as tasks:
            for sock in sockets:
                tasks.start_soon(self._accept, sock)
            tasks.start_soon(self._sweep)

    async def _accept(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        failures = 0
        while True:
            while len(self._open) >= self.cap:
                if not self._make_room():
                    self.faults.client("too_many_connections", detail=f"cap {self.cap}")
                self._room.clear()
                # Set when one closes (an aborted one: at the loop's next turn); looked at
                # again each tick, for a connection that has since gone idle.
                with anyio.move_on_after(self._tick_s):
                    await self._room.wait()
            try:
                connection, _ = await loop.sock_accept(sock)
            except OSError as error:
                if error.errno in _CLIENT_LEFT:
                    continue
                failures += 1
                pause = min(_ACCEPT_BACKOFF_MAX_S, _ACCEPT_BACKOFF_S * 2 ** min(failures - 1, 8))
                self.faults.accept_failed(error, pause)
                await anyio.sleep(pause)
                continue
            failures = 0
            try:
                _, protocol = await loop.connect_accepted_socket(self._protocol, connection)
                # Counted now, before the next accept: uvloop calls connection_made later.
                self.opened(protocol)
            except OSError:  # gone already
                connection.close()
            except Exception as error:  # never a reason for the listener, or the worker, to stop
                connection.close()
                self.faults.request_failed("accept", error)

    async def _sweep(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await anyio.sleep(self._tick_s)
            now = loop.time()
            try:
                for connection in [c for c in self._open if c.deadline <= now]:
                    late = _LATE.get(connection.phase)
                    if late is not None:
                        connection.fault(late)
                    _abort(connection)
                self.faults.flush()
            except Exception as error:  # the sweep goes on: the next turn tries again
                self.faults.request_failed("sweep", error)

    def abort_all(self) -> None:
        """Abort every connection still open (after the listener's graceful close)."""
        for connection in list(self._open):
            _abort(connection)


def _abort(connection: _Connection) -> None:
    connection.deadline = math.inf  # once: its connection_lost comes at the loop's next turn
    transport = connection.socket_transport
    if transport is not None:
        transport.abort()
    elif not connection.lost:  # accepted, its connection_made still to come (uvloop)
        connection.force_close()


def limits_middleware(connections: Connections) -> Middleware:
    """A request's head is in: its deadline is the request's, and its body (if any) is read
    here, within `body_timeout_s` (else 408) and `max_body_bytes` (else 413)."""
    body_timeout_s = connections.limits.body_timeout_s

    @web.middleware
    async def bounded(request: web.Request, handler: Handler) -> web.StreamResponse:
        protocol = request.protocol
        if isinstance(protocol, _Connection):
            connections.enter(protocol, Phase.REQUEST)
        if request.body_exists:
            try:
                async with asyncio.timeout(body_timeout_s):
                    await request.read()
            except TimeoutError:
                client_fault(request, "body_timeout")
                answer = web.Response(status=408, text="the body did not arrive in time")
                answer.force_close()
                return answer
            except web.HTTPRequestEntityTooLarge:
                client_fault(request, "body_too_large")
                raise
            except (ConnectionError, RequestPayloadError):  # the client left, or sent garbage
                client_fault(request, "body_incomplete")
                answer = web.Response(status=400, text="the body is incomplete or malformed")
                answer.force_close()
                return answer
        return await handler(request)

    return bounded
