# mypy: ignore-errors
"""The dramatiq-sqs peer of bench/side_by_side.py: a broker module for dramatiq's own CLI.

    cd bench/peers && BENCH_ENDPOINT=... BENCH_QUEUE=... \
        .venv/bin/dramatiq dramatiq_driver --processes P --threads T

One no-op actor on BENCH_QUEUE. dramatiq-sqs receives up to min(10, 2 x threads) messages per
ReceiveMessage and deletes each message with its own DeleteMessage; it has no visibility
extension (a message stays invisible for the broker's `visibility_timeout`, 12 h by default).
The queue's bodies must be dramatiq messages (bench/side_by_side.py writes them).
"""

from __future__ import annotations

import os

import dramatiq
from dramatiq_sqs import SQSBroker

QUEUE = os.environ.get("BENCH_QUEUE", "side-by-side")

broker = SQSBroker(
    endpoint_url=os.environ["BENCH_ENDPOINT"],
    region_name="us-east-1",
    aws_access_key_id="testing",
    aws_secret_access_key="testing",
)
dramatiq.set_broker(broker)


@dramatiq.actor(queue_name=QUEUE, actor_name="noop", max_retries=0)
def noop() -> None:
    pass
