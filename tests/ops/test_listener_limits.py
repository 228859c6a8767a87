"""What one client of the ops listener may take (issue 29, 1): each limit with small numbers.

Real sockets on 127.0.0.1 and real time, as in test_listener.py: the limits are timers and
descriptors, which virtual time cannot show. Each test is kept under about 2 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator, MutableMapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import SocketStream
from structlog.testing import capture_logs

from tests.ops.test_listener import quick_app
from worker.errors import ConfigError
from worker.ops import OpsLimits, OpsListener
from worker.ops.limits import connection_cap, json_depth, loads_bounded
from worker.runtime.supervisor import Supervisor
from worker.testing import run_worker

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "limits-token"


@asynccontextmanager
async def listening(supervisor: Supervisor, **limits: Any) -> AsyncIterator[OpsListener]:
    options = {"idle_timeout_s": 10.0, "header_timeout_s": 10.0, **limits}
    async with OpsListener(
        supervisor, port=0, limits=OpsLimits(**options), console_token=TOKEN
    ) as ops:
        yield ops


@asynccontextmanager
async def a_listener(**limits: Any) -> AsyncIterator[OpsListener]:
    async with run_worker(quick_app()) as harness, listening(harness.supervisor, **limits) as ops:
        yield ops


async def connect(ops: OpsListener) -> SocketStream:
    assert ops.port is not None
    return await anyio.connect_tcp("127.0.0.1", ops.port)


async def closed_after(stream: SocketStream, within_s: float) -> float:
    """Seconds until the listener closed `stream` (reading and dropping what it sent)."""
    started = time.monotonic()
    with anyio.fail_after(within_s):
        try:
            while True:
                await stream.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            return time.monotonic() - started


async def exchange(ops: OpsListener, raw: bytes) -> tuple[int, bytes]:
    """Send `raw`, read until the listener closes: (status, body)."""
    stream = await connect(ops)
    await stream.send(raw)
    answer = b""
    with anyio.fail_after(5):
        try:
            while True:
                answer += await stream.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            pass
    await stream.aclose()
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


def post(path: str, body: bytes, *, length: int | None = None, token: str = TOKEN) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
        "Content-Type: application/json\r\nConnection: close\r\n"
        f"Content-Length: {len(body) if length is None else length}\r\n\r\n"
    ).encode() + body


def get(path: str, **headers: str) -> bytes:
    lines = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    return f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n{lines}\r\n".encode()


def faults(
    logs: Sequence[MutableMapping[str, Any]], kind: str | None = None
) -> list[MutableMapping[str, Any]]:
    return [
        line
        for line in logs
        if line["event"] == "ops.client_fault" and (kind is None or line["kind"] == kind)
    ]


def open_sockets() -> int:
    """This process's open sockets (uvloop opens /dev/null once, lazily: not counted)."""
    found = 0
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the directory's own descriptor, gone by now
            found += os.readlink(f"/proc/self/fd/{name}").startswith("socket:")
    return found


# -- connections -------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_connections_past_the_cap_wait_in_the_backlog_and_cost_no_descriptor() -> None:
    async with a_listener(max_connections=5) as ops:
        before = open_sockets()
        streams = [await connect(ops) for _ in range(12)]
        await anyio.sleep(0.3)
        # 12 of the client's own, and 5 of the listener's: the other 7 wait in the backlog.
        assert open_sockets() - before == 12 + 5
        assert ops.open_connections == 5
        for stream in streams[:3]:
            await stream.aclose()
        await anyio.sleep(0.3)
        assert ops.open_connections == 5  # three more were taken from the backlog
        assert open_sockets() - before == 9 + 5
        for stream in streams[3:]:
            await stream.aclose()
        assert (await exchange(ops, get("/healthz")))[0] == 200


@pytest.mark.asyncio
async def test_a_silent_connection_is_closed_after_the_header_timeout() -> None:
    async with a_listener(header_timeout_s=0.3) as ops:
        silent = await connect(ops)  # its first request is due from the accept
        assert 0.2 < await closed_after(silent, 2) < 1.0
        assert ops.open_connections == 0


@pytest.mark.asyncio
async def test_a_kept_alive_connection_is_closed_after_the_idle_timeout() -> None:
    async with a_listener(idle_timeout_s=0.3) as ops:
        kept = await connect(ops)
        await kept.send(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert b"200 OK" in await kept.receive()
        assert 0.2 < await closed_after(kept, 2) < 1.0
        assert ops.open_connections == 0


@pytest.mark.asyncio
async def test_a_head_that_never_ends_is_closed_after_the_header_timeout_and_logged_once() -> None:
    async with a_listener(header_timeout_s=0.4) as ops:
        with capture_logs() as logs:
            streams = [await connect(ops) for _ in range(3)]
            for stream in streams:
                await stream.send(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n")

            async def trickle(stream: SocketStream) -> None:
                with anyio.move_on_after(3):
                    try:
                        while True:  # a header line every 0.1 s, never the blank line
                            await anyio.sleep(0.1)
                            await stream.send(b"X-More: 1\r\n")
                    except (anyio.BrokenResourceError, OSError):
                        pass

            async with anyio.create_task_group() as tasks:
                for stream in streams:
                    tasks.start_soon(trickle, stream)
                for stream in streams:
                    assert await closed_after(stream, 2) < 1.2
                tasks.cancel_scope.cancel()
    [line] = faults(logs)
    assert line["kind"] == "header_timeout" and line["log_level"] == "info"
    assert "exc_info" not in line


@pytest.mark.asyncio
async def test_a_client_that_does_not_read_its_answers_is_cut_off() -> None:
    async with a_listener(request_timeout_s=0.5) as ops:
        assert ops.port is not None
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", ops.port))
        try:
            # ~30 MB of answers: more than the kernel's buffers on both sides take.
            pipelined = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" * 3000
            await asyncio.get_running_loop().sock_sendall(sock, pipelined)
            await anyio.sleep(0.2)
            assert ops.open_connections == 1  # writing, to a client that reads nothing
            for _ in range(100):  # a few tenths of a second past the timeout, unless busy
                if not ops.open_connections:
                    break
                await anyio.sleep(0.05)
            assert ops.open_connections == 0
        finally:
            sock.close()


# -- bytes -------------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_a_body_that_does_not_arrive_in_time_is_408() -> None:
    async with a_listener(body_timeout_s=0.3) as ops:
        started = time.monotonic()
        status, _ = await exchange(ops, post("/api/dlq/redrive", b'{"queue":', length=100))
        assert status == 408
        assert time.monotonic() - started < 1.5


@pytest.mark.asyncio
async def test_a_client_that_leaves_mid_body_is_its_fault_not_an_error() -> None:
    async with a_listener() as ops:
        with capture_logs() as logs:
            stream = await connect(ops)
            await stream.send(post("/api/dlq/redrive", b'{"queue":', length=100))
            await anyio.sleep(0.1)
            await stream.aclose()
            await anyio.sleep(0.2)
    [line] = faults(logs)
    assert line["kind"] == "body_incomplete" and line["log_level"] == "info"
    assert not [line for line in logs if line["log_level"] == "error"]  # was a 500's traceback


@pytest.mark.asyncio
async def test_a_body_over_the_limit_is_413() -> None:
    with capture_logs() as logs:
        async with a_listener(max_body_bytes=1000) as ops:
            body = json.dumps({"queue": "x" * 5000}).encode()
            assert (await exchange(ops, post("/api/dlq/redrive", body)))[0] == 413
            assert (await exchange(ops, post("/metrics", body)))[0] == 413  # before the 405
    assert [line["count"] for line in faults(logs, "body_too_large")] == [1]


@pytest.mark.asyncio
async def test_json_nested_too_deep_is_400_before_any_parser_sees_it() -> None:
    with capture_logs() as logs:
        async with a_listener() as ops:
            for depth in (20_000, 33):
                nested = b"[" * depth + b"]" * depth
                status, body = await exchange(ops, post("/api/dlq/redrive", nested))
                assert status == 400
                assert json.loads(body) == {"error": "JSON nested more than 32 deep"}
            # At the limit it is parsed, and refused for what it says.
            nested = b'{"queue": ' + b"[" * 31 + b"]" * 31 + b"}"
            assert (await exchange(ops, post("/api/dlq/redrive", nested)))[0] == 404
    [line] = faults(logs, "json_too_deep")
    assert line["log_level"] == "info" and "exc_info" not in line


def test_the_depth_scan_skips_strings_and_stops_early() -> None:
    assert json_depth(b'{"a": "[[[[{{{{", "b": [1, {"c": "\\"]]"}]}') == 3
    assert json_depth(b'"unterminated [[[') == 0
    assert json_depth(b"[" * 100, stop_above=5) == 6
    assert loads_bounded(b'{"a": [1, 2]}') == {"a": [1, 2]}
    # A run of escaped quotes with no end: linear, not quadratic (~0.3 ms, not minutes).
    started = time.perf_counter()
    assert json_depth(b'"' + b'\\"' * 30_000 + b"[" * 40) == 0
    assert time.perf_counter() - started < 0.5


@pytest.mark.asyncio
async def test_an_oversized_header_is_400_logged_once_at_info_without_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with a_listener() as ops:
        with capture_logs() as logs:
            for _ in range(5):
                status, _ = await exchange(ops, get("/healthz", **{"X-Big": "a" * 10_000}))
                assert status == 400
    [line] = faults(logs)
    assert line["kind"] == "bad_request" and line["log_level"] == "info"
    assert "exc_info" not in line
    # aiohttp's own "Error handling request" record, with its traceback, is not written.
    assert not [record for record in caplog.records if record.exc_info]
    assert not [line for line in logs if line["log_level"] == "error"]


@pytest.mark.asyncio
async def test_faults_of_one_kind_are_counted_between_lines() -> None:
    async with a_listener(log_every_s=0.5) as ops:
        with capture_logs() as logs:
            for _ in range(4):
                await exchange(ops, get("/healthz", **{"X-Big": "a" * 10_000}))
            await anyio.sleep(1.0)  # the sweep writes what was counted since
    assert [line["count"] for line in faults(logs, "bad_request")] == [1, 3]


# -- Host --------------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_a_request_without_a_host_is_not_loopback() -> None:
    async with a_listener() as ops:
        assert (await exchange(ops, b"GET / HTTP/1.0\r\n\r\n"))[0] == 421
        assert (await exchange(ops, b"GET /api/status HTTP/1.0\r\n\r\n"))[0] == 421
        assert (await exchange(ops, b"GET /healthz HTTP/1.0\r\n\r\n"))[0] == 200  # probes
        assert (await exchange(ops, get("/")))[0] == 200


# -- settings ----------------------------------------------------------------------------------


def test_the_cap_defaults_to_64_and_is_at_most_a_quarter_of_the_open_file_limit() -> None:
    assert connection_cap(OpsLimits(), nofile=1024) == 64
    assert connection_cap(OpsLimits(), nofile=100) == 25
    assert connection_cap(OpsLimits(max_connections=256), nofile=1024) == 256
    with pytest.raises(ConfigError, match=r"at most 256, a quarter .* open-file limit \(1024"):
        connection_cap(OpsLimits(max_connections=257), nofile=1024)
    with pytest.raises(ConfigError, match="max_connections=0"):
        OpsLimits(max_connections=0)
    with pytest.raises(ConfigError, match="idle_timeout_s=0"):
        OpsLimits(idle_timeout_s=0)


@pytest.mark.parametrize(
    ("given", "error"),
    [
        (["--ops-max-connections", "0"], "--ops-max-connections=0: must be a whole number >= 1"),
        (["--ops-max-connections", "1000000000"], "a quarter of this process's open-file limit"),
        (["--ops-max-connections", "x"], "invalid int value"),
    ],
)
def test_the_cli_refuses_a_bad_cap_in_one_line(given: list[str], error: str) -> None:
    command = [sys.executable, "-m", "worker", "run", "examples.hello:app", *given]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    assert error in done.stderr


def test_the_environment_sets_the_cap() -> None:
    env = {**os.environ, "LEASE_WORKER_OPS_MAX_CONNECTIONS": "abc"}
    command = [sys.executable, "-m", "worker", "run", "examples.hello:app"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=env, timeout=30)
    assert done.returncode == 2
    assert "LEASE_WORKER_OPS_MAX_CONNECTIONS='abc': expected an integer" in done.stderr


# -- out of descriptors --------------------------------------------------------------------

#: A worker with an ops listener whose process has no descriptor left: it prints its port,
#: waits for "free" on standard input, frees them, and prints what it logged meanwhile.
_OUT_OF_FILES = textwrap.dedent(
    """
    import logging, os, resource, sys
    import anyio
    from structlog.testing import capture_logs
    from worker import Message, Worker, WorkerConfig
    from worker.ops import OpsListener
    from worker.testing import run_worker

    records = []
    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage()[:80])
    logging.getLogger().addHandler(Keep())
    app = Worker(WorkerConfig(wait_s=1))

    @app.handler("jobs")
    async def handle(message: Message) -> None:
        pass

    async def main():
        async with run_worker(app) as harness, OpsListener(harness.supervisor, port=0) as ops:
            held = []
            with capture_logs() as logs:
                soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
                resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
                try:
                    while True:
                        held.append(os.open(os.devnull, os.O_RDONLY))
                except OSError:
                    pass
                print("PORT", ops.port, flush=True)
                await anyio.to_thread.run_sync(sys.stdin.readline)
                for fd in held:
                    os.close(fd)
                resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
                print("FREED", flush=True)
                await anyio.to_thread.run_sync(sys.stdin.readline)
            lines = [(l["event"], l.get("error"), l["count"]) for l in logs if "ops." in l["event"]]
            print("LOGGED", repr((lines, records)), flush=True)

    anyio.run(main)
    """
)


def _line(stream: Any, marker: str) -> str:
    """What follows `marker` on the next line that starts with it (the worker's own log
    lines come on the same stream)."""
    while line := stream.readline():
        if line.startswith(marker):
            return str(line[len(marker) :].strip())
    raise AssertionError(f"no {marker} line")


def test_out_of_descriptors_the_listener_backs_off_logs_once_and_recovers() -> None:
    worker = subprocess.Popen(
        [sys.executable, "-c", _OUT_OF_FILES],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert worker.stdin is not None and worker.stdout is not None
    try:
        port = int(_line(worker.stdout, "PORT"))
        clients = []
        for _ in range(20):  # each waits in the backlog while no descriptor is left
            clients.append(socket.create_connection(("127.0.0.1", port), timeout=5))
            time.sleep(0.075)
        worker.stdin.write("free\n")
        worker.stdin.flush()
        _line(worker.stdout, "FREED")
        with socket.create_connection(("127.0.0.1", port), timeout=5) as probe:
            probe.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            assert probe.recv(100).startswith(b"HTTP/1.1 200 OK")
        for client in clients:
            client.close()
        worker.stdin.write("done\n")
        worker.stdin.flush()
        lines, records = eval(_line(worker.stdout, "LOGGED"))  # our own repr
    finally:
        worker.kill()
        worker.communicate()
    # 1.5 s of EMFILE: about 5 tries (0.1, 0.2, 0.4, 0.8 s apart), one line.
    assert lines == [("ops.accept_failed", "EMFILE", 1)]
    assert not [record for record in records if "accept" in record]  # not asyncio's either


#: The handler span's first use with no descriptor left: OpenTelemetry's lazy import fails
#: with OSError (EMFILE), which ended the handler task, and the worker with it (exit 1).
_SPAN_WITHOUT_FILES = textwrap.dedent(
    """
    import os, resource, time
    from worker.envelope import tracing
    from worker.types import ReceivedMessage

    received = ReceivedMessage(
        queue="q", message_id="m", receipt_handle="h", body="", receive_count=1
    )
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (128, hard))
    held = []
    try:
        while True:
            held.append(os.open(os.devnull, os.O_RDONLY))
    except OSError:
        pass
    try:
        span = tracing.open_handler_span(received)
    except OSError as error:
        span = f"raised {error!r}"
    for fd in held:
        os.close(fd)
    time.sleep(1.1)  # the next try, once descriptors are back, imports it
    tracing.forget_provider()
    print(repr((span, tracing._api() is not None)))
    """
)


def test_a_handler_span_with_no_descriptor_left_is_no_span_not_a_crash() -> None:
    pytest.importorskip("opentelemetry")
    done = subprocess.run(
        [sys.executable, "-c", _SPAN_WITHOUT_FILES],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert done.stdout.strip() == "(None, True)"


@pytest.mark.asyncio
async def test_clients_that_stay_polite_do_not_starve_the_probes_for_ever() -> None:
    """A few kept-alive connections, each asking /healthz now and then, held every place
    under the cap for ever: the kubelet's probe waited in the backlog and timed out (found
    in review). At the cap, the connection idle the longest makes room."""
    async with a_listener(max_connections=4, idle_timeout_s=0.5, header_timeout_s=0.5) as ops:
        hogs = [await connect(ops) for _ in range(4)]

        async def keep(stream) -> None:  # type: ignore[no-untyped-def]
            while True:  # one cheap request every 0.3 s: never idle 0.5 s
                await stream.send(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                await stream.receive()
                await anyio.sleep(0.3)

        async with anyio.create_task_group() as tasks:
            for stream in hogs:
                tasks.start_soon(keep, stream)
            await anyio.sleep(0.2)
            # The probe: timeoutSeconds 1 here (5 s in the kit, for idle_timeout_s 10 s).
            with anyio.move_on_after(1.5) as probe:
                status, _ = await exchange(ops, get("/healthz"))
            tasks.cancel_scope.cancel()
        assert not probe.cancelled_caught, "the probe never got a connection"
        assert status == 200
