"""A 1 MiB document through S3 and back, in the pointer format of AWS's extended clients.

Run it against any S3 endpoint (moto's server will do: `python -m moto.server -p 5000`)::

    python -m examples.large_payloads --endpoint-url http://127.0.0.1:5000

The queue is the in-memory engine here; with SQS, wrap `await SqsBackend.connect(...)` the
same way. The producer stores the body in S3 and sends a pointer; the worker fetches the
body before the handler runs; `PayloadCleanup` deletes the object once the message is
deleted. The bucket is made if missing.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from typing import Any

import anyio

from backends.memory import MemoryBackend
from worker import PayloadCleanup, Producer, S3Payloads, Worker, WorkerConfig, WorkerContext, serve
from worker.types import QueueSpec

QUEUE = "documents"
SIZE = 1_048_576


@dataclasses.dataclass
class Result:
    received_bytes: int = 0
    objects_while_queued: int = 0
    objects_after_delete: int = -1


async def _object_count(s3: Any, bucket: str) -> int:
    return int((await s3.list_objects_v2(Bucket=bucket)).get("KeyCount", 0))


def build(s3: Any, bucket: str, result: Result) -> Worker:
    store = S3Payloads(s3, bucket)
    app = Worker(WorkerConfig(wait_s=1), large_payloads=store)
    handled = anyio.Event()

    @app.handler(QUEUE)
    async def handle(document: str) -> None:
        result.received_bytes = len(document.encode())
        handled.set()

    @app.background
    async def produce(context: WorkerContext) -> None:
        await Producer(context.backend, large_payloads=store).send(QUEUE, "d" * SIZE)
        result.objects_while_queued = await _object_count(s3, bucket)
        await handled.wait()
        with anyio.fail_after(10):  # the delete, then the object's, follow the handler
            while (count := await _object_count(s3, bucket)) > 0:  # noqa: ASYNC110 (a demo polls)
                await anyio.sleep(0.1)
        result.objects_after_delete = count
        context.request_shutdown()

    return app


async def main(endpoint_url: str, bucket: str) -> Result:
    from aiobotocore.config import AioConfig
    from aiobotocore.session import get_session

    result = Result()
    async with get_session().create_client(
        "s3",
        endpoint_url=endpoint_url,
        region_name=os.environ.get("AWS_DEFAULT_REGION", "us-east-1"),
        config=AioConfig(s3={"addressing_style": "path"}),
    ) as s3:
        existing = {b["Name"] for b in (await s3.list_buckets()).get("Buckets", [])}
        if bucket not in existing:
            await s3.create_bucket(Bucket=bucket)
        memory = MemoryBackend()
        await memory.create_queue(QueueSpec(QUEUE))
        await serve(build(s3, bucket, result), PayloadCleanup(memory, S3Payloads(s3, bucket)))
    print(
        f"received {result.received_bytes} bytes; objects in S3 while queued: "
        f"{result.objects_while_queued}, after the delete: {result.objects_after_delete}"
    )
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint-url", required=True)
    parser.add_argument("--bucket", default="lease-worker-large-payloads")
    arguments = parser.parse_args()
    anyio.run(main, arguments.endpoint_url, arguments.bucket)
