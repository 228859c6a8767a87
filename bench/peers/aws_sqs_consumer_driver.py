# mypy: ignore-errors
"""The aws-sqs-consumer peer of bench/side_by_side.py (run with bench/peers/.venv's Python).

    BENCH_ENDPOINT=... BENCH_QUEUE_URL=... BENCH_MESSAGES=N python aws_sqs_consumer_driver.py

A no-op `handle_message_batch` with batch_size 10: the library receives, calls the handler
and deletes the batch with one DeleteMessageBatch, one batch at a time in one thread. It has
no heartbeat or visibility extension to turn on. Prints "ready" before the first poll and
"done" once N messages were handled.
"""

from __future__ import annotations

import os
import sys

import boto3
from aws_sqs_consumer import Consumer


class NoopConsumer(Consumer):
    def __init__(self, expected: int, **options) -> None:
        super().__init__(**options)
        self.expected = expected
        self.handled = 0

    def handle_message_batch(self, messages) -> None:
        before = self.handled
        self.handled += len(messages)
        if before < self.expected <= self.handled:
            print("done", flush=True)


def main() -> None:
    env = os.environ
    client = boto3.client(
        "sqs",
        endpoint_url=env["BENCH_ENDPOINT"],
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    consumer = NoopConsumer(
        int(env.get("BENCH_MESSAGES", "0")),
        queue_url=env["BENCH_QUEUE_URL"],
        region="us-east-1",
        sqs_client=client,
        batch_size=int(env.get("BENCH_BATCH_SIZE", "10")),
        wait_time_seconds=int(env.get("BENCH_WAIT_S", "20")),
        visibility_timeout_seconds=int(env.get("BENCH_VISIBILITY_S", "30")),
    )
    print("ready", flush=True)
    consumer.start()


if __name__ == "__main__":
    sys.exit(main())
