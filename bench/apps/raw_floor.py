"""The floor of bench/side_by_side.py: the least CPU a Python SQS client spends on a message.

    BENCH_ENDPOINT=http://127.0.0.1:PORT BENCH_QUEUE_URL=... BENCH_MESSAGES=N \
        python -m bench.apps.raw_floor

A serial drain: ReceiveMessage (10, long poll), DeleteMessageBatch, repeat, one call after
the other over one keep-alive `http.client` connection, in SQS's JSON protocol written and
read by the json module, each request signed by botocore's `SigV4Auth` (what any client
must do). No event loop, no handler, no leases, no retries, no model. Prints "ready" before
the first receive and "done" once N messages were deleted, then exits.
"""

from __future__ import annotations

import http.client
import json
import os
from typing import Any
from urllib.parse import urlsplit

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

_HEADERS = {"Content-Type": "application/x-amz-json-1.0"}


class RawSqs:
    """SQS's JSON protocol over one connection, each request signed by botocore."""

    def __init__(self, endpoint: str) -> None:
        self.url = endpoint.rstrip("/") + "/"
        parts = urlsplit(endpoint)
        self.connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=30)
        credentials = Credentials("testing", "testing", "testing")
        self.signer = SigV4Auth(credentials, "sqs", "us-east-1")

    def call(self, operation: str, params: dict[str, Any]) -> dict[str, Any]:
        body = json.dumps(params)
        request = AWSRequest(
            "POST", self.url, {**_HEADERS, "X-Amz-Target": f"AmazonSQS.{operation}"}, body
        )
        self.signer.add_auth(request)
        self.connection.request("POST", "/", body, dict(request.headers.items()))
        response = self.connection.getresponse()
        raw = response.read()
        if response.status != 200:
            raise RuntimeError(f"{operation}: HTTP {response.status} {raw[:200]!r}")
        answer: dict[str, Any] = json.loads(raw) if raw else {}
        return answer


def drain(sqs: RawSqs, queue_url: str, expected: int) -> None:
    deleted = 0
    receive = {"QueueUrl": queue_url, "MaxNumberOfMessages": 10, "WaitTimeSeconds": 20}
    receive["VisibilityTimeout"] = 30
    while deleted < expected:
        messages = sqs.call("ReceiveMessage", receive).get("Messages", [])
        if not messages:
            continue
        entries = [
            {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)
        ]
        answer = sqs.call("DeleteMessageBatch", {"QueueUrl": queue_url, "Entries": entries})
        if answer.get("Failed"):
            raise RuntimeError(f"DeleteMessageBatch: {answer['Failed'][0]}")
        deleted += len(entries)


def main() -> None:
    env = os.environ
    sqs = RawSqs(env["BENCH_ENDPOINT"])
    print("ready", flush=True)
    drain(sqs, env["BENCH_QUEUE_URL"], int(env["BENCH_MESSAGES"]))
    print("done", flush=True)


if __name__ == "__main__":
    main()
