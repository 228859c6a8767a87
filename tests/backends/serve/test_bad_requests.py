"""Bad requests against a real `lease-worker serve-sqs` process: each gets SQS's error shape
and a 4xx, the server's memory stays bounded (its RSS is read from /proc), it stays up, and
it logs one short line per refusal that never repeats the input.

One process serves the module (started once, ~1 s). The 256 MiB attempts are made over raw
sockets so that nothing in a client library buffers or retries them.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import boto3
import pytest
from botocore.config import Config

from backends.serve.sqs.endpoint import serve_sqs
from tests.json_log import JsonLog

pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parents[3]
WAIT_S = 30.0
HUGE = 256 * 1024 * 1024
#: The server's cap is about 4 MiB; anything near the upload's size means it was buffered.
RSS_GROWTH_LIMIT = 48 * 1024 * 1024


class Server:
    def __init__(self, proc: subprocess.Popen[str], log: JsonLog, port: int) -> None:
        self.proc = proc
        self.log = log
        self.port = port
        self.url = f"http://127.0.0.1:{port}"

    def rss(self) -> int:
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        [line] = [line for line in status.splitlines() if line.startswith("VmRSS:")]
        return int(line.split()[1]) * 1024

    def client(self) -> Any:
        return boto3.client(
            "sqs",
            endpoint_url=self.url,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            config=Config(retries={"total_max_attempts": 1}),
        )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEASE_WORKER_")}
    command = [sys.executable, "-m", "worker", "serve-sqs", "--log-format", "json"]
    proc = subprocess.Popen(
        [*command, "--port", str(port), "--queue", "jobs"],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    log = JsonLog(proc, WAIT_S)
    try:
        log.next(lambda e: e.get("event") == "sqs_endpoint.started", "the start")
        yield Server(proc, log, port)
    finally:
        proc.kill()
        proc.wait(timeout=WAIT_S)


def raw_request(port: int, head: bytes, body: bytes = b"") -> tuple[int, bytes]:
    """Send one request as given; (status, body) of the answer, read until the server closes
    or the declared length is in."""
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT_S) as sock:
        sock.sendall(head + body)
        return read_answer(sock)


def read_answer(sock: socket.socket) -> tuple[int, bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"closed before an answer: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    length = next(int(h.split(":")[1]) for h in lines if h.lower().startswith("content-length"))
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, "closed inside the answer"
        body += chunk
    return int(lines[0].split()[1]), body


def json_head(target: bytes, length: int, *, chunked: bool = False) -> bytes:
    lines = [
        b"POST / HTTP/1.1",
        b"Host: 127.0.0.1",
        b"X-Amz-Target: " + target,
        b"Content-Type: application/x-amz-json-1.0",
    ]
    lines.append(b"Transfer-Encoding: chunked" if chunked else b"Content-Length: %d" % length)
    return b"\r\n".join(lines) + b"\r\n\r\n"


def upload(sock: socket.socket, chunked: bool) -> int:
    """Push up to 256 MiB of a body; returns how much the kernel took before the server hung
    up (the server never reads past its cap)."""
    piece = b'{"QueueUrl": "' + b"A" * (1024 * 1024 - 14)
    sent = 0
    try:
        while sent < HUGE:
            sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
            sent += len(piece)
    except OSError:
        pass
    return sent


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_256_mib_request_is_refused_with_bounded_memory(server: Server, chunked: bool) -> None:
    sqs = server.client()
    sqs.list_queues()  # warm: the first request's allocations are not the upload's
    before = server.rss()
    with socket.create_connection(("127.0.0.1", server.port), timeout=WAIT_S) as sock:
        sock.sendall(json_head(b"AmazonSQS.SendMessage", HUGE, chunked=chunked))
        answers: list[tuple[int, bytes]] = []
        reader = threading.Thread(target=lambda: answers.append(read_answer(sock)))
        reader.start()
        sent = upload(sock, chunked)
        reader.join(timeout=WAIT_S)
    after = server.rss()
    [(status, body)] = answers
    assert status == 413
    error = json.loads(body)
    assert error["__type"] == "com.amazonaws.sqs#RequestEntityTooLarge"
    assert b"AAAA" not in body
    assert sent < HUGE  # the server hung up instead of taking it all
    assert after - before < RSS_GROWTH_LIMIT, (before, after)
    print(f"rss before {before} after {after} sent {sent}")  # for the report (pytest -s)
    server.log.next(
        lambda e: (
            e.get("event") == "sqs_endpoint.bad_request"
            and e.get("code") == "RequestEntityTooLarge"
        ),
        "the refusal's log line",
    )
    assert sqs.list_queues()["QueueUrls"] == [f"{server.url}/000000000000/jobs"]


@pytest.mark.parametrize(
    ("target", "body", "status", "shape"),
    [
        (b"AmazonSQS.\xff\xfeList", b"{}", 400, "UnknownOperationException"),
        (b"AmazonSQS.ListQueues", b"[" * 100_000, 400, "SerializationException"),
        (b"AmazonSQS.ListQueues", b"\xff\xfe{}", 400, "SerializationException"),
        (b"Nothing.ListQueues", b"{}", 400, "UnknownOperationException"),
    ],
    ids=["non-utf8-target", "deep-json", "non-utf8-body", "foreign-target"],
)
def test_unreadable_json_requests(
    server: Server, target: bytes, body: bytes, status: int, shape: str
) -> None:
    got, raw = raw_request(server.port, json_head(target, len(body)), body)
    assert got == status
    error = json.loads(raw)
    assert error["__type"] == f"com.amazonaws.sqs#{shape}"
    assert b"\xff" not in raw and b"[[[" not in raw and b"List" not in raw
    event = server.log.next(
        lambda e: e.get("event") == "sqs_endpoint.bad_request" and e.get("code") == shape,
        "the refusal's log line",
    )
    assert len(json.dumps(event)) < 300  # short, and no input in it
    assert server.client().list_queues()["QueueUrls"]


def test_unreadable_query_requests(server: Server) -> None:
    head = (
        b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: %d\r\n\r\n"
    )
    for body, code in [
        (b"Action=ListQueues&QueueNamePrefix=%ff", b"MalformedQueryString"),
        (b"QueueName=x", b"MissingAction"),
        (b"Action=No-such", b"InvalidAction"),
    ]:
        status, raw = raw_request(server.port, head % len(body), body)
        assert status == 400
        assert b"<Code>" + code + b"</Code>" in raw and b"<ErrorResponse" in raw
        assert b"%ff" not in raw and b"\xff" not in raw


def test_the_query_protocol_also_comes_as_a_get(server: Server) -> None:
    head = b"GET /?Action=GetQueueUrl&QueueName=jobs HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    status, raw = raw_request(server.port, head)
    assert status == 200
    assert raw.startswith(b'<?xml version="1.0"?><GetQueueUrlResponse')
    assert f"<QueueUrl>{server.url}/000000000000/jobs</QueueUrl>".encode() in raw


def test_a_stalled_body_is_refused_in_time() -> None:
    async def main() -> tuple[int, bytes, float]:
        async with anyio.create_task_group() as tg:
            url = await tg.start(_serve_with_short_timeout)
            port = int(url.rsplit(":", 1)[1])
            start = anyio.current_time()
            status, body = await anyio.to_thread.run_sync(
                raw_request, port, json_head(b"AmazonSQS.ListQueues", 100), b"{"
            )
            took = anyio.current_time() - start
            tg.cancel_scope.cancel()
        return status, body, took

    status, body, took = anyio.run(main)
    assert status == 408
    assert json.loads(body)["__type"] == "com.amazonaws.sqs#RequestTimeout"
    assert 0.25 <= took < 5.0


def test_a_body_split_across_writes_is_read_whole(server: Server) -> None:
    """The body in two writes 10 ms apart, in both protocols: each read to its end."""
    cases = [
        (json_head(b"AmazonSQS.GetQueueUrl", 20), b'{"QueueName":"jobs"}', b"QueueUrl"),
        (
            b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 35\r\n\r\n",
            b"Action=GetQueueUrl&QueueName=jobs&X",
            b"<QueueUrl>",
        ),
    ]
    for head, body, expected in cases:
        with socket.create_connection(("127.0.0.1", server.port), timeout=WAIT_S) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.sendall(head + body[:7])
            time.sleep(0.01)  # the second write, 10 ms later (part of the request)
            sock.sendall(body[7:])
            status, raw = read_answer(sock)
        assert (status, expected in raw) == (200, True), raw


async def _serve_with_short_timeout(*, task_status: Any) -> None:
    await serve_sqs(body_timeout_s=0.3, task_status=task_status)


def test_the_command_answers_stale_deletes_as_sqs_does(server: Server) -> None:
    """serve-sqs defaults to `--receipt-handles sqs`: a second delete succeeds."""
    sqs = server.client()
    url = sqs.create_queue(QueueName="stale")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="m")
    [message] = sqs.receive_message(QueueUrl=url)["Messages"]
    sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])  # no error
    with pytest.raises(sqs.exceptions.ReceiptHandleIsInvalid):
        sqs.delete_message(QueueUrl=url, ReceiptHandle="never-issued")
