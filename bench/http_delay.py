"""An HTTP/1.1 proxy that holds chosen answers: the call lands at once, its answer comes late.

    python -m bench.http_delay --listen PORT --to HOST:PORT \
        --hold ChangeMessageVisibility,ChangeMessageVisibilityBatch:1.5 [--hold OPS:S:TIMES]

bench/latency.py delays every chunk both ways; this proxy reads whole requests and answers
instead, so that it can tell one call from another and delay only the answers asked for
(bench/lease_chaos.py: an extension whose answer is late, a receive answered while the
worker is stopping).

Its rules:
- Each client connection gets one upstream connection of its own, opened at its first
  request and kept while the client keeps its own (keep-alive end to end); requests on it
  are handled one at a time, in order (no pipelining: HTTP clients do not pipeline).
- A request is read whole (head and body, by Content-Length or chunked) and forwarded at
  once, unchanged; the answer is read whole from upstream, then held for the delay of the
  first `Hold` that matches the call and still has uses, then written back unchanged.
- A call is named from the request alone (`operation`): SQS's JSON protocol by
  `X-Amz-Target`, its query protocol by `Action=` in the form body, SMQ's REST by method and
  path (`PUT /queues/<q>/messages` is ChangeMessageVisibility).
- Every call is recorded as an `Exchange` (when forwarded, answered, written back; status;
  the answer's body) in `HttpDelayProxy.exchanges`, readable from another thread.
- A client that goes away while its answer is held is noted (`client_gone`); the answer is
  dropped with its connection.
- Only what the proxy is given to listen on is bound (bench/lease_chaos.py: 127.0.0.1).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import signal
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass

__all__ = ["Exchange", "Hold", "HttpDelayProxy", "operation", "running"]

_HEAD_LIMIT = 64 * 1024
#: A message id in an SQS answer: the JSON protocol's field, or the query protocol's element.
_MESSAGE_IDS = re.compile(rb'"MessageId"\s*:\s*"([^"]+)"|<MessageId>([^<]+)</MessageId>')
_SMQ_MESSAGE_CALLS = {
    "PUT": "ChangeMessageVisibility",
    "GET": "ReceiveMessage",
    "POST": "SendMessage",
    "DELETE": "DeleteMessage",
}


@dataclass
class Hold:
    """Hold the answers of `operations` for `delay_s`: the first `times` of them, or all."""

    operations: frozenset[str]
    delay_s: float
    times: int | None = None
    used: int = 0

    def take(self, name: str) -> bool:
        if name not in self.operations or (self.times is not None and self.used >= self.times):
            return False
        self.used += 1
        return True


@dataclass
class Exchange:
    """One call through the proxy; times on `time.monotonic()`."""

    operation: str
    forwarded_at: float
    answered_at: float | None = None
    delivered_at: float | None = None
    status: int | None = None
    held_s: float = 0.0
    client_gone: bool = False
    answer: bytes = b""

    def carried(self) -> list[str]:
        """The message ids in the answer (a ReceiveMessage's messages), in order."""
        return [(a or b).decode() for a, b in _MESSAGE_IDS.findall(self.answer)]


@dataclass
class _Message:
    start: bytes
    headers: dict[str, str]
    raw: bytes
    body: bytes

    @property
    def closes(self) -> bool:
        return self.headers.get("connection", "").lower() == "close"


def operation(method: str, target: str, headers: dict[str, str], body: bytes) -> str:
    """The call a request makes (SQS JSON or query protocol, or SMQ's REST)."""
    amz = headers.get("x-amz-target", "")
    if amz:
        return amz.rpartition(".")[2]
    if "x-www-form-urlencoded" in headers.get("content-type", ""):
        form = urllib.parse.parse_qs(body.decode(errors="replace"))
        if form.get("Action"):
            return form["Action"][0]
    parsed = urllib.parse.urlsplit(target)
    parts = parsed.path.strip("/").split("/")
    if len(parts) == 3 and parts[0] == "queues" and parts[2] == "messages":
        if method == "GET" and "peekonly=true" in parsed.query:
            return "PeekMessage"
        return _SMQ_MESSAGE_CALLS.get(method, method)
    return f"{method} {parsed.path}"


async def _read_message(reader: asyncio.StreamReader, *, method: str | None) -> _Message | None:
    """One request (`method` None) or the answer to a `method` request; None at a clean EOF."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as error:
        if error.partial:
            raise
        return None
    start, *lines = head.decode("latin-1").split("\r\n")
    headers: dict[str, str] = {}
    for line in lines:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    if "chunked" in headers.get("transfer-encoding", "").lower():
        raw_body, body = await _read_chunked(reader)
    elif "content-length" in headers:
        raw_body = body = await reader.readexactly(int(headers["content-length"]))
    elif method is None or method == "HEAD" or _no_body_status(start):
        raw_body = body = b""
    else:  # an answer that ends with its connection
        raw_body = body = await reader.read()
        headers["connection"] = "close"
    return _Message(start.encode("latin-1"), headers, head + raw_body, body)


def _no_body_status(start: str) -> bool:
    fields = start.split()
    return len(fields) > 1 and (fields[1].startswith("1") or fields[1] in ("204", "304"))


async def _read_chunked(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    raw, body = bytearray(), bytearray()
    while True:
        size_line = await reader.readuntil(b"\r\n")
        raw += size_line
        size = int(size_line.split(b";")[0].strip(), 16)
        if size == 0:
            while True:  # trailers, then the empty line
                line = await reader.readuntil(b"\r\n")
                raw += line
                if line == b"\r\n":
                    return bytes(raw), bytes(body)
        chunk = await reader.readexactly(size + 2)
        raw += chunk
        body += chunk[:-2]


class HttpDelayProxy:
    """Forwards to `upstream`, holding the answers that `holds` name."""

    def __init__(self, upstream: tuple[str, int], holds: Sequence[Hold]) -> None:
        self.upstream = upstream
        self.holds = list(holds)
        self._exchanges: list[Exchange] = []
        self._lock = threading.Lock()
        self._clients: set[asyncio.Task[None]] = set()

    @property
    def exchanges(self) -> list[Exchange]:
        """A copy of the calls so far, in the order they were forwarded."""
        with self._lock:
            return list(self._exchanges)

    def _delay_for(self, name: str) -> float:
        with self._lock:
            return next((hold.delay_s for hold in self.holds if hold.take(name)), 0.0)

    async def serve(
        self, port: int, stop: asyncio.Event, on_ready: Callable[[int], None] = lambda port: None
    ) -> None:
        """Listen on 127.0.0.1:`port` (0: a free one) until `stop` is set, telling `on_ready`
        the port once listening; then close every connection."""
        server = await asyncio.start_server(self._client, "127.0.0.1", port, limit=_HEAD_LIMIT)
        try:
            on_ready(server.sockets[0].getsockname()[1])
            await stop.wait()
        finally:
            server.close()
            for task in list(self._clients):
                task.cancel()
            await server.wait_closed()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._clients.add(task)
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        try:
            while True:
                request = await _read_message(reader, method=None)
                if request is None:
                    return
                if upstream is None:
                    upstream = await asyncio.open_connection(*self.upstream, limit=_HEAD_LIMIT)
                answer = await self._exchange(request, upstream, reader, writer)
                if answer is None or answer.closes or request.closes:
                    return
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            return
        finally:
            self._clients.discard(task)
            for side in (writer, None if upstream is None else upstream[1]):
                if side is not None:
                    side.close()

    async def _exchange(
        self,
        request: _Message,
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> _Message | None:
        method, target, *_ = request.start.decode("latin-1").split(" ")
        name = operation(method, target, request.headers, request.body)
        exchange = Exchange(name, time.monotonic())
        with self._lock:
            self._exchanges.append(exchange)
        up_reader, up_writer = upstream
        up_writer.write(request.raw)
        await up_writer.drain()
        answer = await _read_message(up_reader, method=method)
        if answer is None:
            return None
        status = answer.start.split(b" ")
        exchange.status = int(status[1]) if len(status) > 1 and status[1].isdigit() else None
        exchange.answer = answer.body
        exchange.answered_at = time.monotonic()
        exchange.held_s = self._delay_for(name)
        if exchange.held_s > 0:
            await asyncio.sleep(exchange.held_s)
        if reader.at_eof() or writer.is_closing():
            exchange.client_gone = True
            return None
        writer.write(answer.raw)
        await writer.drain()
        exchange.delivered_at = time.monotonic()
        return answer


@contextmanager
def running(proxy: HttpDelayProxy, port: int = 0) -> Iterator[str]:
    """Run `proxy` on 127.0.0.1:`port` (0: a free one) in a thread of its own; yields its
    URL."""
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    ready = threading.Event()
    bound: list[int] = []
    failed: list[BaseException] = []

    def on_ready(port: int) -> None:
        bound.append(port)
        ready.set()

    def run() -> None:
        try:
            loop.run_until_complete(proxy.serve(port, stop, on_ready))
        except BaseException as error:  # reported to the caller below
            failed.append(error)
            ready.set()
        finally:
            loop.close()

    thread = threading.Thread(target=run, name="http-delay", daemon=True)
    thread.start()
    if not ready.wait(10) or failed:
        raise RuntimeError(f"http_delay did not start: {failed[:1]}")
    try:
        yield f"http://127.0.0.1:{bound[0]}"
    finally:
        with suppress(RuntimeError):  # the loop is already closed
            loop.call_soon_threadsafe(stop.set)
        thread.join(10)


def _hold(text: str) -> Hold:
    parts = text.split(":")
    if len(parts) not in (2, 3):
        raise argparse.ArgumentTypeError(f"expected OPS:SECONDS[:TIMES], got {text!r}")
    times = int(parts[2]) if len(parts) == 3 else None
    return Hold(frozenset(parts[0].split(",")), float(parts[1]), times)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--listen", type=int, required=True, help="port on 127.0.0.1")
    parser.add_argument("--to", required=True, help="HOST:PORT upstream")
    parser.add_argument("--hold", type=_hold, action="append", default=[], help="OPS:S[:TIMES]")
    args = parser.parse_args(argv)
    host, _, port = args.to.rpartition(":")
    proxy = HttpDelayProxy((host, int(port)), args.hold)

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await proxy.serve(args.listen, stop, lambda port: print("ready", port, flush=True))

    asyncio.run(run())


if __name__ == "__main__":
    main()
