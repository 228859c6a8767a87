"""serve-smq at the edges of its wire: a body split across writes, a body that stalls, an
unsigned request, and the size of what an error repeats. Raw HTTP over a socket, signed by
the official SDK's own signer (`mns.mns_client.MNSClient.get_signature`), so the bytes on the
wire are exactly the test's."""

from __future__ import annotations

import base64
import hashlib
import socket
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator

import pytest

from backends.serve.smq import SmqEndpoint, smq_endpoint_in_thread
from worker.types import QueueSpec

mns_client = pytest.importorskip("mns.mns_client", reason="aliyun-mns-sdk is not installed")

#: Small, so that a stalled body is refused at once (the default is SMQ's 30 s).
BODY_TIMEOUT_S = 0.3
WAIT_S = 10.0


@pytest.fixture(scope="module")
def endpoint() -> Iterator[SmqEndpoint]:
    with smq_endpoint_in_thread(body_timeout_s=BODY_TIMEOUT_S) as running:
        running.call(running.engine.create_queue, QueueSpec("edges"))
        yield running


def _port(endpoint: SmqEndpoint) -> int:
    return int(endpoint.url.rsplit(":", 1)[1])


def _signed_head(
    endpoint: SmqEndpoint, method: str, resource: str, body: bytes, *, sign: bool = True
) -> bytes:
    headers = {
        "host": f"127.0.0.1:{_port(endpoint)}",
        "date": time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime()),
        "x-mns-version": "2015-06-06",
        "content-type": "text/xml;charset=UTF-8",
        "content-length": str(len(body)),
    }
    if body:
        digest = hashlib.md5(body, usedforsecurity=False).hexdigest().encode()
        headers["content-md5"] = base64.b64encode(digest).decode()
    if sign:
        client = mns_client.MNSClient(endpoint.url, "test", "test")
        credential = client.credentials_provider.get_credentials()
        headers["authorization"] = client.get_signature(method, headers, resource, credential)
    lines = [f"{method} {resource} HTTP/1.1", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _answer(sock: socket.socket) -> tuple[int, bytes]:
    raw = b""
    while b"\r\n\r\n" not in raw:
        chunk = sock.recv(65536)
        assert chunk, raw
        raw += chunk
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    length = next(int(h.split(":")[1]) for h in lines if h.lower().startswith("content-length"))
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk
        body += chunk
    return int(lines[0].split()[1]), body


def _fields(raw: bytes) -> dict[str, str]:
    return {child.tag.rpartition("}")[2]: child.text or "" for child in ET.fromstring(raw)}


def test_a_body_split_across_two_writes_is_read_whole(endpoint: SmqEndpoint) -> None:
    body = b"<Message><MessageBody>split across writes</MessageBody></Message>"
    head = _signed_head(endpoint, "POST", "/queues/edges/messages", body)
    with socket.create_connection(("127.0.0.1", _port(endpoint)), timeout=WAIT_S) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(head + body[:20])
        time.sleep(0.01)  # the second write, 10 ms later (part of the request, not a wait)
        sock.sendall(body[20:])
        status, raw = _answer(sock)
    assert status == 201, raw
    assert _fields(raw)["MessageBodyMD5"] == hashlib.md5(b"split across writes").hexdigest().upper()


def test_a_stalled_body_gets_408_after_the_body_timeout(endpoint: SmqEndpoint) -> None:
    body = b"<Message><MessageBody>never finished</MessageBody></Message>"
    head = _signed_head(endpoint, "POST", "/queues/edges/messages", body)
    with socket.create_connection(("127.0.0.1", _port(endpoint)), timeout=WAIT_S) as sock:
        started = time.monotonic()
        sock.sendall(head + body[:10])  # and nothing more
        status, raw = _answer(sock)
        waited = time.monotonic() - started
        assert sock.recv(1) == b""  # the connection is closed: the rest is never read
    assert (status, _fields(raw)["Code"]) == (408, "RequestTimeout")
    assert BODY_TIMEOUT_S <= waited < WAIT_S


def test_an_unsigned_request_gets_400_missing_authorization_header(
    endpoint: SmqEndpoint,
) -> None:
    head = _signed_head(endpoint, "GET", "/queues", b"", sign=False)
    with socket.create_connection(("127.0.0.1", _port(endpoint)), timeout=WAIT_S) as sock:
        sock.sendall(head)
        status, raw = _answer(sock)
    fields = _fields(raw)
    assert (status, fields["Code"]) == (400, "MissingAuthorizationHeader")
    assert fields["Message"] == "Authorization header is required."
    assert fields["RequestId"] and fields["HostId"]


def test_a_malformed_authorization_header_gets_400_invalid_authorization_header(
    endpoint: SmqEndpoint,
) -> None:
    head = _signed_head(endpoint, "GET", "/queues", b"", sign=False)
    head = head.replace(b"\r\n\r\n", b"\r\nauthorization: Basic dGVzdDp0ZXN0\r\n\r\n")
    with socket.create_connection(("127.0.0.1", _port(endpoint)), timeout=WAIT_S) as sock:
        sock.sendall(head)
        status, raw = _answer(sock)
    assert (status, _fields(raw)["Code"]) == (400, "InvalidAuthorizationHeader")


def _call(
    endpoint: SmqEndpoint, method: str, resource: str, body: bytes = b""
) -> tuple[int, bytes]:
    with socket.create_connection(("127.0.0.1", _port(endpoint)), timeout=WAIT_S) as sock:
        sock.sendall(_signed_head(endpoint, method, resource, body) + body)
        return _answer(sock)


def test_an_error_repeats_little_of_a_large_bad_input(endpoint: SmqEndpoint) -> None:
    """A 7,000-character queue name, and a batch delete of 16 handles of 64 KiB each: the
    answers are the right errors, a few KiB each, not the input again."""
    status, raw = _call(endpoint, "PUT", "/queues/" + "q" * 7000)
    assert (status, _fields(raw)["Code"]) == (400, "InvalidArgument")
    assert len(raw) < 2048
    handles = "".join(f"<ReceiptHandle>{i}{'h' * 65536}</ReceiptHandle>" for i in range(16))
    body = f"<ReceiptHandles>{handles}</ReceiptHandles>".encode()
    status, raw = _call(endpoint, "DELETE", "/queues/edges/messages", body)
    errors = ET.fromstring(raw)
    assert status == 404 and len(errors) == 16
    codes = {child.text for error in errors for child in error if child.tag.endswith("ErrorCode")}
    assert codes == {"ReceiptHandleError"}
    assert len(raw) < 16 * 2048
