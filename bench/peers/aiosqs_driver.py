# mypy: ignore-errors
"""The aiosqs peer of bench/side_by_side.py: a Python SQS client that is not botocore (its own
SigV4 signer, aiohttp, the query protocol's XML read by lxml), run with bench/peers/.venv's
Python.

    BENCH_ENDPOINT=... BENCH_QUEUE_URL=... BENCH_MESSAGES=N python aiosqs_driver.py

aiosqs is a client, not a consumer, so the loop is the plain one its README shows: one
ReceiveMessage of up to 10 (long poll), a no-op per message, then each message's
DeleteMessage (aiosqs has no DeleteMessageBatch) sent together, then the next receive: at
most 10 messages held at once. No visibility extension.

aiosqs 1.0.6 reads no message from an answer in SQS's XML namespace
(`<ReceiveMessageResponse xmlns="http://queue.amazonaws.com/doc/2012-11-05/">`, which SQS
and serve-sqs send): its second XPath step names `Message` without the namespace. The driver
drops the namespace declaration before aiosqs's parser reads the answer (one `str.replace`
per answer, counted in its CPU). Prints "ready" before the first receive and "done" once N
messages were deleted.
"""

from __future__ import annotations

import asyncio
import os
import sys
from urllib.parse import urlsplit

import aiosqs.client
from aiosqs import SQSClient

_NAMESPACE = ' xmlns="http://queue.amazonaws.com/doc/2012-11-05/"'
_parse = aiosqs.client.parse_xml_result_response


def _parse_without_namespace(action, body, logger=None):
    return _parse(action=action, body=body.replace(_NAMESPACE, "", 1), logger=logger)


aiosqs.client.parse_xml_result_response = _parse_without_namespace


async def consume(client: SQSClient, queue_url: str, expected: int, wait_s: int) -> None:
    deleted = 0
    while deleted < expected:
        messages = await client.receive_message(
            queue_url=queue_url,
            max_number_of_messages=10,
            visibility_timeout=30,
            wait_time_seconds=wait_s,
        )
        if not messages:
            continue
        await asyncio.gather(
            *(
                client.delete_message(queue_url=queue_url, receipt_handle=m["ReceiptHandle"])
                for m in messages
            )
        )
        deleted += len(messages)


async def main() -> None:
    env = os.environ
    endpoint = urlsplit(env["BENCH_ENDPOINT"])
    # aiosqs speaks https to `host`; the endpoint is plain http on loopback.
    client = SQSClient(
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        host=endpoint.netloc,
        timeout_sec=30,
    )
    client.endpoint_url = f"{endpoint.scheme}://{endpoint.netloc}"
    async with client:
        print("ready", flush=True)
        await consume(
            client,
            env["BENCH_QUEUE_URL"],
            int(env.get("BENCH_MESSAGES", "0")),
            int(env.get("BENCH_WAIT_S", "20")),
        )
        print("done", flush=True)


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
