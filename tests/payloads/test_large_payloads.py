"""Large payloads through S3 (aiobotocore's S3 on moto's server), in the extended clients'
pointer format; the object is removed once its message is deleted."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from structlog.testing import capture_logs

from backends.memory import MemoryBackend
from tests.moto_server import MOTO_ACCESS_KEY, MOTO_REGION, MOTO_SECRET_KEY, MotoServer
from worker import Message, Outcome, Worker, WorkerConfig
from worker.envelope.large_payloads import POINTER_CLASS, S3Payloads
from worker.envelope.payload_cleanup import PayloadCleanup
from worker.errors import MessageRejected
from worker.sending.outgoing import Outgoing
from worker.sending.producer import Producer
from worker.testing import run_worker
from worker.types import MessageAttribute, OutgoingMessage, QueueSpec

pytestmark = pytest.mark.asyncio

MIB = 1_048_576


@pytest_asyncio.fixture
async def s3(moto_server: MotoServer) -> AsyncIterator[Any]:
    from aiobotocore.config import AioConfig
    from aiobotocore.session import get_session

    async with get_session().create_client(
        "s3",
        region_name=MOTO_REGION,
        endpoint_url=moto_server.endpoint_url,
        aws_access_key_id=MOTO_ACCESS_KEY,
        aws_secret_access_key=MOTO_SECRET_KEY,
        config=AioConfig(s3={"addressing_style": "path"}),
    ) as client:
        yield client


async def _bucket(s3: Any) -> str:
    name = f"payloads-{uuid.uuid4().hex[:12]}"
    await s3.create_bucket(Bucket=name)
    return name


async def _keys(s3: Any, bucket: str) -> list[str]:
    listed = await s3.list_objects_v2(Bucket=bucket)
    return [item["Key"] for item in listed.get("Contents", [])]


async def _backend(store: S3Payloads) -> PayloadCleanup:
    inner = MemoryBackend()
    await inner.create_queue(QueueSpec("docs"))
    return PayloadCleanup(inner, store)


async def test_a_1_mib_payload_goes_through_s3_and_its_object_is_gone_after_the_delete(
    s3: Any,
) -> None:
    bucket = await _bucket(s3)
    store = S3Payloads(s3, bucket)
    backend = await _backend(store)
    body = "x" * (MIB - 3) + "end"
    await Producer(backend, large_payloads=store).send("docs", body, attributes={"kind": "doc"})
    [key] = await _keys(s3, bucket)
    app = Worker(WorkerConfig(wait_s=1), large_payloads=store)
    got: list[str] = []

    @app.handler("docs")
    async def handle(document: str) -> None:
        got.append(document)

    async with run_worker(app, backend=backend) as harness:
        [record] = await harness.wait_for_handled(1)
        await harness.wait_until_idle()
    assert record.outcome is Outcome.SUCCEEDED
    assert got == [body]
    # What travelled on the queue: the extended clients' pointer and size attribute.
    assert record.message.body == body  # what the handler got
    assert json.loads(record.message.raw_body) == [
        POINTER_CLASS,
        {"s3BucketName": bucket, "s3Key": key},
    ]
    attributes = record.message.message_attributes
    assert attributes["ExtendedPayloadSize"] == MessageAttribute("Number", string_value=str(MIB))
    assert attributes["kind"] == MessageAttribute("String", string_value="doc")
    assert await _keys(s3, bucket) == []


async def test_a_handler_sees_the_pointer_as_raw_body_and_the_payload_as_body(s3: Any) -> None:
    """`message.raw_body` is what travelled on the queue (the pointer), as before the
    handler run became one coroutine (a review found it had become the fetched body, which
    an idempotency guard hashes)."""
    bucket = await _bucket(s3)
    store = S3Payloads(s3, bucket)
    backend = await _backend(store)
    body = "y" * MIB
    await Producer(backend, large_payloads=store).send("docs", body)
    [key] = await _keys(s3, bucket)
    app = Worker(WorkerConfig(wait_s=1), large_payloads=store)
    seen: list[tuple[str, Any]] = []

    @app.handler("docs", decode="raw")
    async def handle(message: Message) -> None:
        seen.append((message.raw_body, message.body))

    async with run_worker(app, backend=backend) as harness:
        await harness.wait_for_handled(1)
        await harness.wait_until_idle()
    [(raw_body, decoded)] = seen
    assert json.loads(raw_body) == [POINTER_CLASS, {"s3BucketName": bucket, "s3Key": key}]
    assert decoded == body


async def test_a_missing_object_is_a_decode_failure_and_small_bodies_stay_inline(
    s3: Any,
) -> None:
    bucket = await _bucket(s3)
    store = S3Payloads(s3, bucket, threshold_bytes=1000)
    backend = await _backend(store)
    producer = Producer(backend, large_payloads=store)
    await producer.send("docs", {"small": True})
    await producer.send("docs", {"big": "y" * 2000})
    [key] = await _keys(s3, bucket)
    await s3.delete_object(Bucket=bucket, Key=key)
    app = Worker(WorkerConfig(wait_s=1), large_payloads=store)

    @app.handler("docs", on_error="expire")
    async def handle(document: dict[str, object]) -> None:
        assert document == {"small": True}

    with capture_logs() as logs:
        async with run_worker(app, backend=backend) as harness:
            records = await harness.wait_for_handled(2)
    assert sorted(r.outcome.value for r in records) == ["failed", "succeeded"]
    [failure] = [e for e in logs if e["event"] == "handler.undecodable_body"]
    assert failure["reason"] == f"s3://{bucket}/{key} could not be read: NoSuchKey"


async def test_a_legacy_pointer_from_another_client_is_read(s3: Any) -> None:
    bucket = await _bucket(s3)
    store = S3Payloads(s3, bucket, delete_after=False)
    await s3.put_object(Bucket=bucket, Key="from-java", Body=b'{"n": 1}')
    backend = await _backend(store)
    pointer = ["com.amazon.sqs.javamessaging.MessageS3Pointer"]
    pointer.append({"s3BucketName": bucket, "s3Key": "from-java"})  # type: ignore[arg-type]
    size = {"SQSLargePayloadSize": MessageAttribute("Number", string_value="8")}
    await backend.send("docs", [OutgoingMessage(body=json.dumps(pointer), message_attributes=size)])
    app = Worker(WorkerConfig(wait_s=1), large_payloads=store)
    got: list[object] = []

    @app.handler("docs")
    async def handle(document: dict[str, int]) -> None:
        got.append(document)

    async with run_worker(app, backend=backend) as harness:
        await harness.wait_for_handled(1)
        await harness.wait_until_idle()
    assert got == [{"n": 1}]
    assert await _keys(s3, bucket) == ["from-java"]  # delete_after=False keeps it


async def test_the_pointer_leaves_nine_attributes_and_bad_input_stores_nothing(s3: Any) -> None:
    bucket = await _bucket(s3)
    store = S3Payloads(s3, bucket)
    backend = await _backend(store)
    ten = {f"a{i}": "v" for i in range(10)}
    with pytest.raises(MessageRejected, match="10 message attributes, 9 allowed here"):
        await Producer(backend, large_payloads=store).send_many(
            "docs", [Outgoing(body="z" * MIB), Outgoing(body="z", attributes=ten)]
        )
    assert await _keys(s3, bucket) == []
