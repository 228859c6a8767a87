"""A loopback HTTP proxy in front of moto's server that injects faults, for the fault tests.

    async with FaultProxy.running(moto.port) as proxy:
        settings = SqsSettings(endpoint_url=proxy.endpoint_url, ...)
        proxy.inject(Fault.throttling(ops={"ChangeMessageVisibilityBatch"}))
        ...
        proxy.heal()

Rules:
- It listens on 127.0.0.1 at a free port and serves one request per client connection: it
  reads the request (head and `Content-Length` body), forwards it to the upstream on a new
  connection with `Connection: close`, and relays the answer (moto's own answers say
  `Connection: close` too, so the client does not reuse the connection).
- The operation is read from `X-Amz-Target` (`AmazonSQS.ReceiveMessage`): botocore speaks
  SQS's JSON protocol (`application/x-amz-json-1.0`). A fault may apply to some operations
  only; a request is judged by the fault in force when it arrives.
- Faults, one at a time:
  - `reset`: the connection is closed with an RST as soon as its request is read; injecting
    it also resets every connection open at that moment (a long poll in flight, say).
  - `blackhole`: the request is read and never answered; the connection is held until the
    client gives up (its read timeout) or the proxy stops. Healing does not answer requests
    already swallowed, as a server that lost them would not.
  - `latency`: the request is forwarded `delay_s` late (a slow network): the call succeeds,
    but the service sees it, and the client its answer, that much later.
  - `status`: an AWS JSON error answer (`__type`, `message`, and the `x-amzn-query-error`
    header SQS adds for its query-compatible codes), e.g. 400 `RequestThrottled`,
    500 `InternalError`, 503 `ServiceUnavailable`, which botocore parses as a `ClientError`.
- Every request is recorded (operation, the fault it met, when), and `wait_for` waits on
  those records, so a test can drive its fault windows from what the client really sent.
"""

from __future__ import annotations

import json
import socket
import struct
import uuid
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from enum import Enum
from http import HTTPStatus

import anyio
from anyio.abc import SocketAttribute, SocketStream
from anyio.streams.buffered import BufferedByteReceiveStream

__all__ = ["Fault", "FaultKind", "FaultProxy", "Request"]

_HOST = "127.0.0.1"
_MAX_HEAD = 64 * 1024
_TARGET_PREFIX = "AmazonSQS."


class FaultKind(Enum):
    RESET = "reset"
    BLACKHOLE = "blackhole"
    LATENCY = "latency"
    STATUS = "status"


@dataclass(frozen=True, slots=True, kw_only=True)
class Fault:
    """What the proxy does to the requests it applies to, instead of forwarding them."""

    kind: FaultKind
    #: For `STATUS`: the HTTP status and the AWS error code of the answer.
    status: int = 0
    code: str = ""
    #: For `LATENCY`: how long each request waits before it is forwarded.
    delay_s: float = 0.0
    #: Operations hit (`ChangeMessageVisibilityBatch`, ...); None: every operation.
    ops: frozenset[str] | None = None

    def applies_to(self, operation: str | None) -> bool:
        return self.ops is None or operation in self.ops

    @classmethod
    def reset(cls, *, ops: Iterable[str] | None = None) -> Fault:
        return cls(kind=FaultKind.RESET, ops=_ops(ops))

    @classmethod
    def blackhole(cls, *, ops: Iterable[str] | None = None) -> Fault:
        return cls(kind=FaultKind.BLACKHOLE, ops=_ops(ops))

    @classmethod
    def latency(cls, delay_s: float, *, ops: Iterable[str] | None = None) -> Fault:
        return cls(kind=FaultKind.LATENCY, delay_s=delay_s, ops=_ops(ops))

    @classmethod
    def answer(cls, status: int, code: str, *, ops: Iterable[str] | None = None) -> Fault:
        return cls(kind=FaultKind.STATUS, status=status, code=code, ops=_ops(ops))

    @classmethod
    def throttling(cls, *, ops: Iterable[str] | None = None) -> Fault:
        return cls.answer(400, "RequestThrottled", ops=ops)

    @classmethod
    def internal_error(cls, *, ops: Iterable[str] | None = None) -> Fault:
        return cls.answer(500, "InternalError", ops=ops)

    @classmethod
    def unavailable(cls, *, ops: Iterable[str] | None = None) -> Fault:
        return cls.answer(503, "ServiceUnavailable", ops=ops)


def _ops(ops: Iterable[str] | None) -> frozenset[str] | None:
    return None if ops is None else frozenset(ops)


@dataclass(frozen=True, slots=True)
class Request:
    """One request the proxy read: its operation, the fault it met (None: forwarded), when."""

    operation: str
    fault: FaultKind | None
    at: float


@dataclass(eq=False)
class _Connection:
    stream: SocketStream
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    operation: str | None = None
    reset: bool = False


class FaultProxy:
    """The proxy; make one with `FaultProxy.running(upstream_port)`."""

    def __init__(self, port: int, upstream_port: int, upstream_host: str = _HOST) -> None:
        self.port = port
        self.endpoint_url = f"http://{_HOST}:{port}"
        self._upstream = (upstream_host, upstream_port)
        self.fault: Fault | None = None
        self.requests: list[Request] = []
        self._open: set[_Connection] = set()
        self._changed = anyio.Event()

    @classmethod
    @asynccontextmanager
    async def running(
        cls, upstream_port: int, upstream_host: str = _HOST
    ) -> AsyncIterator[FaultProxy]:
        """Listen on a free loopback port until the block ends; then drop every connection."""
        listener = await anyio.create_tcp_listener(local_host=_HOST, local_port=0)
        port = listener.extra(SocketAttribute.local_port)
        proxy = cls(port, upstream_port, upstream_host)
        async with listener, anyio.create_task_group() as tasks:
            tasks.start_soon(listener.serve, proxy._handle)
            try:
                yield proxy
            finally:
                tasks.cancel_scope.cancel()

    # -- what tests use -------------------------------------------------------------------

    def inject(self, fault: Fault) -> None:
        """Apply `fault` to every request from now on (until `heal`)."""
        self.fault = fault
        if fault.kind is FaultKind.RESET:
            for connection in list(self._open):
                if fault.applies_to(connection.operation):
                    connection.reset = True
                    connection.scope.cancel()

    def heal(self) -> None:
        """Forward every request from now on."""
        self.fault = None

    def count(self, operation: str | None = None, *, faulted: bool | None = None) -> int:
        """Requests read so far, of `operation` (None: any), faulted or not (None: both)."""
        return sum(
            1
            for request in self.requests
            if (operation is None or request.operation == operation)
            and (faulted is None or (request.fault is not None) == faulted)
        )

    async def wait_for(
        self, operation: str | None = None, *, faulted: bool | None = None, count: int = 1
    ) -> None:
        """Wait until `count(operation, faulted=faulted)` reaches `count`; bound it yourself."""
        while self.count(operation, faulted=faulted) < count:
            await self._changed.wait()

    # -- serving ----------------------------------------------------------------------------

    async def _handle(self, stream: SocketStream) -> None:
        connection = _Connection(stream)
        self._open.add(connection)
        try:
            with connection.scope:
                await self._serve(connection)
        except (anyio.EndOfStream, anyio.IncompleteRead, anyio.DelimiterNotFound):
            pass  # the client went away, or sent something that is not a request
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass
        finally:
            self._open.discard(connection)
            with anyio.CancelScope(shield=True):
                if connection.reset:
                    _abort(stream)
                await stream.aclose()

    async def _serve(self, connection: _Connection) -> None:
        client = connection.stream
        buffered = BufferedByteReceiveStream(client)
        head = await buffered.receive_until(b"\r\n\r\n", _MAX_HEAD)
        headers = _headers(head)
        length = int(headers.get("content-length", "0"))
        body = await buffered.receive_exactly(length) if length else b""
        operation = headers.get("x-amz-target", "").removeprefix(_TARGET_PREFIX) or "?"
        connection.operation = operation
        fault = self.fault if self.fault and self.fault.applies_to(operation) else None
        self._record(Request(operation, fault.kind if fault else None, anyio.current_time()))
        if fault is None:
            await self._forward(head, body, client)
        elif fault.kind is FaultKind.LATENCY:
            await anyio.sleep(fault.delay_s)
            await self._forward(head, body, client)
        elif fault.kind is FaultKind.RESET:
            connection.reset = True
        elif fault.kind is FaultKind.BLACKHOLE:
            while True:  # until the client closes the connection: EndOfStream
                await buffered.receive()
        else:
            await client.send(_error_answer(fault.status, fault.code))

    def _record(self, request: Request) -> None:
        self.requests.append(request)
        self._changed.set()
        self._changed = anyio.Event()

    async def _forward(self, head: bytes, body: bytes, client: SocketStream) -> None:
        async with await anyio.connect_tcp(*self._upstream) as upstream:
            await upstream.send(_with_connection_close(head) + body)
            while True:
                try:
                    chunk = await upstream.receive()
                except anyio.EndOfStream:
                    return
                await client.send(chunk)


def _headers(head: bytes) -> dict[str, str]:
    lines = head.decode("latin-1").split("\r\n")[1:]
    pairs = (line.split(":", 1) for line in lines if ":" in line)
    return {name.strip().lower(): value.strip() for name, value in pairs}


def _with_connection_close(head: bytes) -> bytes:
    lines = head.decode("latin-1").split("\r\n")
    kept = [line for line in lines if line and not line.lower().startswith("connection:")]
    return ("\r\n".join([*kept, "Connection: close"]) + "\r\n\r\n").encode("latin-1")


def _error_answer(status: int, code: str) -> bytes:
    """An SQS error in the AWS JSON protocol, as botocore parses it."""
    body = json.dumps(
        {"__type": f"com.amazonaws.sqs#{code}", "message": f"injected by the fault proxy: {code}"}
    ).encode()
    side = "Sender" if status < 500 else "Receiver"
    head = (
        f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n"
        "Content-Type: application/x-amz-json-1.0\r\n"
        f"x-amzn-RequestId: {uuid.uuid4()}\r\n"
        f"x-amzn-query-error: {code};{side}\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode("latin-1") + body


def _abort(stream: SocketStream) -> None:
    """Make the coming close send an RST instead of a FIN."""
    raw = stream.extra(SocketAttribute.raw_socket, None)
    if raw is not None:
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
