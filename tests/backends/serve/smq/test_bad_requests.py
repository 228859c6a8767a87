"""serve-smq refuses bad input with SMQ's error shape and loses nothing: signed requests sent
with `SmqClient` (raw calls, to reach what a well-behaved client never sends)."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from backends.smq.client import SmqClient
from backends.smq.settings import SmqSettings
from tests.backends.smq.serving import smq_pair
from worker.types import OutgoingMessage, QueueSpec

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]


def _code(status: int, raw: bytes) -> tuple[int, str]:
    fields = {child.tag.rpartition("}")[2]: child.text for child in ET.fromstring(raw)}
    assert fields["RequestId"] and fields["HostId"] and fields["Message"]
    return status, str(fields["Code"])


@pytest.mark.parametrize(
    ("method", "resource", "body", "expected"),
    [
        ("POST", "/queues/jobs/messages", b"<Message><MessageBody>x", (400, "MalformedXML")),
        (
            "POST",
            "/queues/jobs/messages",
            b'<!DOCTYPE x [<!ENTITY a "b">]><Message><MessageBody>&a;</MessageBody></Message>',
            (400, "MalformedXML"),
        ),
        ("POST", "/queues/jobs/messages", b"<Other/>", (400, "MalformedXML")),
        ("POST", "/queues/jobs/messages", b"<Message/>", (400, "InvalidArgument")),
        ("GET", "/queues/jobs/messages?numOfMessages=17", b"", (400, "InvalidArgument")),
        ("GET", "/queues/jobs/messages?waitseconds=31", b"", (400, "InvalidArgument")),
        (
            "PUT",
            "/queues/jobs/messages?ReceiptHandle=x&VisibilityTimeout=0",
            b"",
            (400, "InvalidArgument"),
        ),
        ("DELETE", "/queues/jobs/messages", b"<ReceiptHandles/>", (400, "InvalidArgument")),
        ("GET", "/nowhere", b"", (400, "InvalidArgument")),
        ("GET", "/queues/missing/messages", b"", (404, "QueueNotExist")),
        (
            "PUT",
            "/queues/jobs",
            b"<Queue><VisibilityTimeout>0</VisibilityTimeout></Queue>",
            (400, "InvalidArgument"),
        ),
    ],
)
async def test_bad_requests_get_smqs_error_and_change_nothing(
    method: str, resource: str, body: bytes, expected: tuple[int, str]
) -> None:
    async with smq_pair() as (backend, engine):
        engine.create_queue(QueueSpec("jobs"))
        await backend.send("jobs", [OutgoingMessage(body="kept")])
        settings = SmqSettings(
            endpoint=backend.endpoint, access_key_id="test", access_key_secret="test"
        )
        client = SmqClient(settings)
        try:
            status, raw = await client.call(
                method, resource, body=body, operation="raw", queue="jobs"
            )
        finally:
            await client.aclose()
        assert _code(status, raw) == expected
        counts = engine.counts("jobs")
        assert (counts.visible, counts.in_flight) == (1, 0)
