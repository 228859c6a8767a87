"""The floor of bench/side_by_side.py: the least a Python SQS consumer can do per message.

    BENCH_ENDPOINT=http://127.0.0.1:PORT BENCH_QUEUE_URL=... BENCH_MESSAGES=N \
        python -m bench.apps.floor

One aiobotocore client, one loop: ReceiveMessage (10, long poll), DeleteMessageBatch, repeat.
No handler, no leases, no concurrency. Prints "ready" before the first receive and "done"
once N messages were deleted, then exits.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from aiobotocore.session import get_session


async def consume(client: Any, queue_url: str, expected: int) -> None:
    deleted = 0
    while deleted < expected:
        answer = await client.receive_message(
            QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=20, VisibilityTimeout=30
        )
        messages = answer.get("Messages", [])
        if not messages:
            continue
        entries = [
            {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)
        ]
        await client.delete_message_batch(QueueUrl=queue_url, Entries=entries)
        deleted += len(entries)


async def main() -> None:
    env = os.environ
    session = get_session()
    async with session.create_client(
        "sqs",
        endpoint_url=env["BENCH_ENDPOINT"],
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    ) as client:
        print("ready", flush=True)
        await consume(client, env["BENCH_QUEUE_URL"], int(env["BENCH_MESSAGES"]))
        print("done", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
