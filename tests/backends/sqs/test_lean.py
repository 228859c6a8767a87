"""The lean SQS path against real servers: the same requests as botocore, and credentials
taken afresh from the provider chain on every call.

- Request counts: one sequence of calls (send, receive, extend, delete, an empty receive)
  through `SqsBackend` with `client="botocore"` and with `client="lean"`, each against a fresh
  `serve-sqs` endpoint (in a thread); the endpoints' `GET /_stats` must agree, operation by
  operation, with the counts written down here.
- Credential refresh: a profile whose `credential_process` hands out a new key and session
  token on each run, expiring within botocore's mandatory-refresh window, so botocore's
  provider chain refreshes on every `get_frozen_credentials`. A small recording server takes
  the lean calls; each must carry the next token, and be signed with the key of that token,
  with a signature that verifies (rebuilt from what arrived, with the secret).
"""

from __future__ import annotations

import hmac
import json
import re
import sys
import urllib.request
from pathlib import Path

import anyio
import pytest
from aiohttp import web
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import ReadOnlyCredentials

from backends.serve.sqs.endpoint import sqs_endpoint_in_thread
from backends.sqs import SqsBackend, SqsSettings
from backends.sqs.settings import SqsClientKind
from tests.local_http import serving
from tests.moto_server import MOTO_ACCESS_KEY, MOTO_REGION, MOTO_SECRET_KEY
from worker.types import Deletion, OutgoingMessage, QueueSpec, ReceivedMessage, VisibilityChange

pytestmark = pytest.mark.asyncio

MESSAGES = 25


async def _drive(url: str, client: SqsClientKind) -> None:
    """Send MESSAGES, receive them all, extend and delete them in batches, poll once more."""
    settings = SqsSettings(
        region=MOTO_REGION,
        endpoint_url=url,
        access_key_id=MOTO_ACCESS_KEY,
        secret_access_key=MOTO_SECRET_KEY,
        client=client,
    )
    backend = await SqsBackend.connect(settings)
    try:
        await backend.create_queue(QueueSpec("counted"))
        for start in range(0, MESSAGES, 10):
            batch = [
                OutgoingMessage(entry_id=str(i), body=f"m{i}")
                for i in range(start, min(start + 10, MESSAGES))
            ]
            assert not (await backend.send("counted", batch)).failed
        received: list[ReceivedMessage] = []
        while len(received) < MESSAGES:
            got = await backend.receive("counted", max_messages=10, wait_s=0)
            assert got, "the queue ran dry before every message came"
            received.extend(got)
        for start in range(0, MESSAGES, 10):
            chunk = received[start : start + 10]
            changes = [VisibilityChange(str(i), m.receipt_handle, 60) for i, m in enumerate(chunk)]
            assert not (await backend.extend("counted", changes)).failed
            deletions = [Deletion(str(i), m.receipt_handle) for i, m in enumerate(chunk)]
            assert not (await backend.delete("counted", deletions)).failed
        assert await backend.receive("counted", max_messages=10, wait_s=0) == []
    finally:
        await backend.aclose()


def _stats(url: str) -> dict[str, int]:
    with urllib.request.urlopen(f"{url}/_stats", timeout=5) as answer:
        requests: dict[str, int] = json.loads(answer.read())["requests"]
    return requests


async def test_the_lean_path_makes_the_same_requests_as_botocore() -> None:
    counts = {}
    for client in ("botocore", "lean"):
        with sqs_endpoint_in_thread() as endpoint:
            await _drive(endpoint.url, client)
            counts[client] = _stats(endpoint.url)
    assert (
        counts["lean"]
        == counts["botocore"]
        == {
            "CreateQueue": 1,
            "SendMessageBatch": 3,
            "ReceiveMessage": 4,
            "ChangeMessageVisibilityBatch": 3,
            "DeleteMessageBatch": 3,
        }
    )


_PROCESS = """\
import datetime, json, pathlib, sys
counter = pathlib.Path(sys.argv[1])
n = int(counter.read_text()) + 1 if counter.exists() else 1
counter.write_text(str(n))
expires = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(minutes=2)
print(json.dumps({"Version": 1, "AccessKeyId": f"AKIDLEAN{n:04d}", "SecretAccessKey": "s",
                  "SessionToken": f"token-{n}", "Expiration": expires.isoformat()}))
"""


def signature_verifies(request: web.Request, body: bytes, secret: str) -> bool:
    """Whether the request's SigV4 signature is right for `secret`: the canonical request is
    rebuilt from what arrived (the signed headers, the body), as SQS rebuilds it."""
    authorization = request.headers.get("Authorization", "")
    fields = dict(re.findall(r"(\w+)=([^,\s]+)", authorization))
    key_id, _, region, service, _ = fields["Credential"].split("/")
    signed = fields["SignedHeaders"].split(";")
    rebuilt = AWSRequest(
        method=request.method,
        url=f"http://{request.host}{request.path}",
        data=body,
        headers={name: request.headers[name] for name in signed if name != "host"},
    )
    rebuilt.context["timestamp"] = request.headers["X-Amz-Date"]
    token = request.headers.get("X-Amz-Security-Token")
    auth = SigV4Auth(ReadOnlyCredentials(key_id, secret, token), service, region)
    string_to_sign = auth.string_to_sign(rebuilt, auth.canonical_request(rebuilt))
    expected: str = auth.signature(string_to_sign, rebuilt)
    return hmac.compare_digest(expected, fields["Signature"])


class Recorder:
    """An SQS stand-in that answers every JSON call with `{}` and keeps what signed it."""

    def __init__(self, secret: str) -> None:
        self.secret = secret
        self.calls: list[tuple[str, str, str, bool]] = []  # (operation, token, key id, valid)

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        credential = re.search(r"Credential=([^/]+)/", request.headers.get("Authorization", ""))
        self.calls.append(
            (
                request.headers.get("X-Amz-Target", ""),
                request.headers.get("X-Amz-Security-Token", ""),
                credential.group(1) if credential else "",
                signature_verifies(request, body, self.secret),
            )
        )
        return web.Response(body=b"{}", content_type="application/x-amz-json-1.0")


async def test_lean_calls_take_refreshed_credentials_from_the_provider_chain(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script, counter, config = tmp_path / "creds.py", tmp_path / "runs", tmp_path / "config"
    script.write_text(_PROCESS)
    config.write_text(
        f"[profile lean-refresh]\ncredential_process = {sys.executable} {script} {counter}\n"
    )
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    recorder = Recorder(secret="s")
    async with serving(recorder.handle) as url:
        settings = SqsSettings(
            region="us-east-1", endpoint_url=url, profile="lean-refresh", client="lean"
        )
        backend = await SqsBackend.connect(settings)
        try:
            queue = f"{url}/000000000000/jobs"
            for _ in range(3):
                with anyio.fail_after(20):
                    assert await backend.receive(queue, max_messages=10, wait_s=0) == []
        finally:
            await backend.aclose()
    runs = int(counter.read_text())
    # The process ran once per call at least (a refresh each time), and each call carried
    # the newest token, signed with the key that came with it.
    tokens = [int(token.removeprefix("token-")) for _, token, _, _ in recorder.calls]
    assert [call[0] for call in recorder.calls] == ["AmazonSQS.ReceiveMessage"] * 3
    assert tokens == [runs - 2, runs - 1, runs]
    assert [call[2] for call in recorder.calls] == [f"AKIDLEAN{n:04d}" for n in tokens]
    # Neither moto nor our endpoint checks signatures: this server does.
    assert [call[3] for call in recorder.calls] == [True] * 3
