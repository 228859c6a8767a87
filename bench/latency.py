"""A TCP forwarding proxy that puts a one-way delay on every chunk, in both directions.

    python -m bench.latency --listen PORT --to HOST:PORT --delay-ms D [--stats FILE]

Its rules (what bench/network.py relies on, and tests/bench/test_latency.py checks):
- Every accepted client connection gets exactly one upstream connection of its own, opened
  when the client connects and kept for as long as the client keeps its own: keep-alive holds
  end to end, so a client that reuses its connection pays no TCP connect per call (the old
  fault proxy opened one per request, which would have charged the client a connect per call).
- A chunk read from one side is written to the other D ms after it *arrived* (not after the
  chunk before it was written), whole and on its own, in the order of arrival: the proxy never
  merges or reorders chunks. A round trip through it therefore takes at least 2 x D.
- An end of stream travels like a chunk (delayed, in order) as a half-close; once both sides
  have had theirs, both sockets close. A side that closes or fails closes the other once what
  it sent before has been delivered.
- While one side's write buffer is full, the side that feeds it is not read (flow control), so
  at most D ms of data plus the buffers are held.
- The delay is measured on the loop's monotonic clock (asyncio's default loop: nanosecond
  resolution; uvloop's millisecond clock would blur a 1 ms delay).

Prints "ready" once listening. SIGTERM or SIGINT closes the listener and every connection,
then exits with status 0. `--stats FILE`: after each accepted connection, `{"connections": N}`
(accepted so far) is written there, so that the benchmark can show that connections persist.
"""

from __future__ import annotations

import argparse
import asyncio
import enum
import json
import os
import signal
import sys
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

# -- the delay line (no I/O) ----------------------------------------------------------------


class Marker(enum.Enum):
    #: The sending side ended its stream (a half-close).
    EOF = "eof"
    #: The sending side's connection is gone.
    CLOSE = "close"


Item = bytes | Marker


@dataclass(slots=True)
class DelayLine:
    """Items in order of arrival, each due `delay_s` after it arrived."""

    delay_s: float
    _queue: deque[tuple[float, Item]] = field(default_factory=deque)

    def push(self, now: float, item: Item) -> None:
        self._queue.append((now + self.delay_s, item))

    def next_at(self) -> float | None:
        """When the oldest item is due, or None when nothing waits."""
        return self._queue[0][0] if self._queue else None

    def pop_due(self, now: float) -> list[Item]:
        """The items due at `now`, oldest first; arrival order is due order, so it stops at
        the first item not yet due."""
        due: list[Item] = []
        while self._queue and self._queue[0][0] <= now:
            due.append(self._queue.popleft()[1])
        return due


# -- the sockets ----------------------------------------------------------------------------


class Half(asyncio.Protocol):
    """One socket of a proxied pair: what it reads waits in its line, then goes to its peer's
    socket."""

    def __init__(self, delay_s: float, loop: asyncio.AbstractEventLoop) -> None:
        self.line = DelayLine(delay_s)
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.peer: Half | None = None
        #: An end of stream was written to this socket.
        self.eof_written = False
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self._push(data)

    def eof_received(self) -> bool:
        self._push(Marker.EOF)
        return True  # keep this socket open for what the other side still sends

    def connection_lost(self, exc: Exception | None) -> None:
        self._push(Marker.CLOSE)

    # Our socket's write buffer filled or drained: stop or resume reading the peer, which
    # is what feeds it.
    def pause_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.resume_reading()

    def link(self, peer: Half) -> None:
        """Pair with `peer` (both ways) and deliver whatever already waits."""
        self.peer, peer.peer = peer, self
        self.schedule()
        peer.schedule()

    def _push(self, item: Item) -> None:
        self.line.push(self.loop.time(), item)
        if self.line.delay_s == 0 and self._timer is None:
            self._deliver()  # no delay: no timer either (the proxy-only baseline)
        else:
            self.schedule()

    def schedule(self) -> None:
        at = self.line.next_at()
        if self._timer is None and at is not None and self.peer is not None:
            self._timer = self.loop.call_at(at, self._deliver)

    def _deliver(self) -> None:
        self._timer = None
        peer = self.peer
        if peer is None or peer.transport is None:
            return  # delivered once linked
        for item in self.line.pop_due(self.loop.time()):
            if peer.transport.is_closing():
                continue  # the peer is gone: what was meant for it is dropped
            if item is Marker.CLOSE:
                peer.transport.close()
            elif item is Marker.EOF:
                peer.transport.write_eof()
                peer.eof_written = True
                if self.eof_written:  # both directions ended
                    peer.transport.close()
                    if self.transport is not None:
                        self.transport.close()
            else:
                peer.transport.write(item)
        self.schedule()

    def abort(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self.transport is not None:
            self.transport.abort()


# -- the proxy ------------------------------------------------------------------------------


class Proxy:
    """Accepts clients, opens one upstream connection for each, counts them."""

    def __init__(
        self,
        host: str,
        port: int,
        delay_s: float,
        on_accept: Callable[[int], None] = lambda accepted: None,
    ) -> None:
        self.upstream = (host, port)
        self.delay_s = delay_s
        self.accepted = 0
        self._on_accept = on_accept
        self._halves: set[Half] = set()
        self._connecting: set[asyncio.Task[None]] = set()

    def client(self) -> Half:
        """The protocol factory for the listening socket."""
        loop = asyncio.get_running_loop()
        half = _Accepted(self, self.delay_s, loop)
        self._halves.add(half)
        return half

    def accepted_one(self, client: Half) -> None:
        assert client.transport is not None
        client.transport.pause_reading()  # nothing is read before its upstream exists
        self.accepted += 1
        self._on_accept(self.accepted)
        task = client.loop.create_task(self._connect(client))
        self._connecting.add(task)
        task.add_done_callback(self._connecting.discard)

    async def _connect(self, client: Half) -> None:
        loop = client.loop
        upstream = Half(self.delay_s, loop)
        self._halves.add(upstream)
        try:
            await loop.create_connection(lambda: upstream, *self.upstream)
        except OSError as error:
            print(f"latency: upstream {self.upstream}: {error}", file=sys.stderr)
            client.abort()
            self.forget(client, upstream)
            return
        client.link(upstream)
        if client.transport is not None and not client.transport.is_closing():
            client.transport.resume_reading()

    def forget(self, *halves: Half) -> None:
        self._halves.difference_update(halves)

    def close(self) -> None:
        for task in self._connecting:
            task.cancel()
        for half in list(self._halves):
            half.abort()
        self._halves.clear()


class _Accepted(Half):
    """A client's socket: reports itself to the proxy, which opens its upstream."""

    def __init__(self, proxy: Proxy, delay_s: float, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(delay_s, loop)
        self.proxy = proxy

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.proxy.accepted_one(self)

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self.proxy.forget(self)
        if self.peer is not None:
            self.proxy.forget(self.peer)


def _stats_writer(path: Path | None) -> Callable[[int], None]:
    def write(connections: int) -> None:
        if path is not None:
            # Renamed into place: a reader never sees half a file.
            partial = path.with_name(path.name + ".partial")
            partial.write_text(json.dumps({"connections": connections}))
            os.replace(partial, path)

    return write


async def serve(
    proxy: Proxy,
    listen: tuple[str, int],
    stop: asyncio.Event,
    *,
    on_ready: Callable[[], None] = lambda: None,
) -> None:
    """Run `proxy` on `listen` until `stop` is set; then close the listener and every
    connection."""
    server = await asyncio.get_running_loop().create_server(proxy.client, *listen)
    try:
        on_ready()
        await stop.wait()
    finally:
        server.close()
        proxy.close()
        await server.wait_closed()


def _address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host, int(port)


def _delay(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"the delay must be 0 or more ms, got {text!r}")
    return value


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--listen", type=int, required=True, help="port on 127.0.0.1")
    parser.add_argument("--to", type=_address, required=True, help="HOST:PORT upstream")
    parser.add_argument("--delay-ms", type=_delay, default=0.0, help="one-way, each chunk")
    parser.add_argument("--stats", type=Path, default=None)
    args = parser.parse_args(argv)

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        host, port = args.to
        proxy = Proxy(host, port, args.delay_ms / 1000, _stats_writer(args.stats))
        await serve(
            proxy, ("127.0.0.1", args.listen), stop, on_ready=lambda: print("ready", flush=True)
        )

    asyncio.run(run())


if __name__ == "__main__":
    main()
