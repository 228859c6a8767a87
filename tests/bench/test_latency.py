"""bench/latency.py: the delaying TCP proxy that bench/network.py puts between a contender and
the endpoint. Real sockets on 127.0.0.1 at free ports; the proxy in this test's loop, and once
as its own process (`python -m bench.latency`). Round trips are checked against a lower bound
(2 x the one-way delay), never an upper one."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import socketserver
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import pytest

from bench import _harness, latency
from bench.latency import DelayLine, Marker

# -- the delay line -------------------------------------------------------------------------


def test_the_delay_line_releases_items_in_order_once_each_is_due() -> None:
    line = DelayLine(0.010)
    line.push(1.000, b"a")
    line.push(1.004, b"b")
    line.push(1.004, Marker.EOF)
    assert line.next_at() == pytest.approx(1.010)
    assert line.pop_due(1.0099) == []
    assert line.pop_due(1.010) == [b"a"]
    assert line.next_at() == pytest.approx(1.014)
    assert line.pop_due(2.0) == [b"b", Marker.EOF]
    assert line.next_at() is None


# -- the proxy in this loop -----------------------------------------------------------------


class Echo:
    """An echo server that counts the connections it accepted and those that ended."""

    def __init__(self) -> None:
        self.accepted = 0
        self.ended = 0
        self.port = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        writer.close()  # the client's end of stream: end ours too
        await writer.wait_closed()
        self.ended += 1


@asynccontextmanager
async def proxied(
    delay_s: float, upstream_port: int | None = None
) -> AsyncIterator[tuple[Echo, latency.Proxy, int]]:
    """An echo server and the proxy in front of it; yields (echo, proxy, proxy's port)."""
    echo = Echo()
    server = await asyncio.start_server(echo.handle, "127.0.0.1", 0)
    echo.port = server.sockets[0].getsockname()[1]
    port = _harness.free_port()
    stop, ready = asyncio.Event(), asyncio.Event()
    proxy = latency.Proxy("127.0.0.1", upstream_port or echo.port, delay_s)
    async with server, asyncio.TaskGroup() as tg:
        tg.create_task(latency.serve(proxy, ("127.0.0.1", port), stop, on_ready=ready.set))
        await ready.wait()
        try:
            yield echo, proxy, port
        finally:
            stop.set()


async def _round_trip(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, payload: bytes
) -> tuple[bytes, float]:
    loop = asyncio.get_running_loop()
    started = loop.time()
    writer.write(payload)
    got = await reader.readexactly(len(payload))
    return got, loop.time() - started


@pytest.mark.asyncio
async def test_round_trips_take_at_least_twice_the_delay_over_one_upstream_connection() -> None:
    delay_s = 0.030
    async with proxied(delay_s) as (echo, proxy, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for i in range(5):
            payload = f"request {i}\n".encode()
            got, took = await _round_trip(reader, writer, payload)
            assert got == payload
            assert took >= 2 * delay_s
        # Five requests on one keep-alive client connection: one upstream connection.
        assert (echo.accepted, proxy.accepted) == (1, 1)
        writer.close()
        await writer.wait_closed()


@pytest.mark.asyncio
async def test_each_client_connection_gets_its_own_upstream_connection() -> None:
    async with proxied(0.0) as (echo, proxy, port):
        pairs = [await asyncio.open_connection("127.0.0.1", port) for _ in range(3)]
        for i, (reader, writer) in enumerate(pairs):
            assert (await _round_trip(reader, writer, b"%d" % i))[0] == b"%d" % i
        assert (echo.accepted, proxy.accepted) == (3, 3)
        for _, writer in pairs:
            writer.close()
            await writer.wait_closed()


@pytest.mark.asyncio
async def test_chunks_arrive_intact_and_in_order_and_an_end_of_stream_closes_both_sides() -> None:
    # 300 chunks of different sizes, then 4 MiB at once (more than the socket buffers: the
    # proxy must pause reading while its writes back up), all sent before any is read.
    chunks = [bytes([i % 251]) * (1 + 37 * i) for i in range(300)]
    chunks.append(bytes(range(256)) * (4 * 4096))
    async with proxied(0.005) as (echo, _, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)

        async def send() -> None:
            for chunk in chunks:
                writer.write(chunk)
                await writer.drain()
            writer.write_eof()

        async with asyncio.TaskGroup() as tg:
            tg.create_task(send())
            received = await reader.read()  # to the end of stream
        assert received == b"".join(chunks)
        # Our end of stream reached the echo server, whose own came back: both sides ended.
        assert echo.ended == 1
        writer.close()
        await writer.wait_closed()


@pytest.mark.asyncio
async def test_an_unreachable_upstream_ends_the_client_and_the_proxy_carries_on() -> None:
    nobody = _harness.free_port()
    async with proxied(0.0, upstream_port=nobody) as (_, proxy, port):
        for _ in range(2):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"hello")
            # Closed or reset: either way the client is not left hanging.
            with contextlib.suppress(ConnectionResetError):
                assert await reader.read() == b""
            writer.close()
        assert proxy.accepted == 2


# -- the proxy as its own process -----------------------------------------------------------


class _EchoHandler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(65536):
            self.request.sendall(data)


@contextmanager
def _threaded_echo() -> Iterator[int]:
    with socketserver.ThreadingTCPServer(("127.0.0.1", 0), _EchoHandler) as server:
        server.daemon_threads = True
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield server.server_address[1]
        finally:
            server.shutdown()
            thread.join(5)


def test_the_command_delays_counts_connections_and_exits_cleanly(tmp_path: Path) -> None:
    stats = tmp_path / "stats.json"
    port = _harness.free_port()
    with _threaded_echo() as upstream:
        command = [sys.executable, "-m", "bench.latency", "--listen", str(port)]
        command += ["--to", f"127.0.0.1:{upstream}", "--delay-ms", "20", "--stats", str(stats)]
        with _harness.started(command, env={}) as process:
            assert process.ready.wait(20), process.stderr_tail()
            with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
                for payload in (b"one", b"two"):
                    started = time.perf_counter()
                    client.sendall(payload)
                    assert client.recv(16) == payload
                    assert time.perf_counter() - started >= 0.040
            assert json.loads(stats.read_text()) == {"connections": 1}
        assert process.popen.returncode == 0, process.stderr_tail()


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        (["--to", "nowhere"], "expected HOST:PORT"),
        (["--to", "127.0.0.1:1", "--delay-ms", "-1"], "0 or more ms"),
    ],
)
def test_bad_arguments_are_refused_with_a_reason(
    arguments: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        latency.main(["--listen", "1", *arguments])
    assert exited.value.code == 2
    assert said in capsys.readouterr().err
