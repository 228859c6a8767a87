"""Client CPU per SQS call on the lean path: ReceiveMessage (10 messages, read into
`ReceivedMessage`s) and DeleteMessageBatch (10 entries) through `SqsBackend`, against a fresh
`lease-worker serve-sqs` process on 127.0.0.1.

    python -m bench.lean_calls [--client lean|botocore] [--loop uvloop] [--runs 7]
                               [--rounds 300]

Each call is timed by `time.process_time` (this process's CPU only: the server is another
process, and waiting on the socket costs no CPU), so other work on the machine skews it less
than wall time would. Each run fills the queue, then receives and deletes it 10 at a time;
the figures are the medians over runs of each run's mean CPU per call, and per message (a
receive and a delete of 10 messages, divided by 10). Kept out of `bench.report`: it is the
instrument for tuning the lean path, not a figure of the report.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass

from backends.sqs import SqsBackend, SqsSettings
from backends.sqs.settings import SqsClientKind
from bench._common import LOOPS, run_async
from bench._harness import CREDENTIALS, Server, server
from worker.types import Deletion

QUEUE = "lean-calls"
BATCH = 10


@dataclass(frozen=True, slots=True)
class RunCpu:
    receive_us: float
    delete_us: float

    @property
    def per_message_us(self) -> float:
        return (self.receive_us + self.delete_us) / BATCH


async def _drain(endpoint: str, url: str, client: SqsClientKind, rounds: int) -> RunCpu:
    settings = SqsSettings(
        region=CREDENTIALS["AWS_REGION"],
        endpoint_url=endpoint,
        access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
        secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        session_token=CREDENTIALS["AWS_SESSION_TOKEN"],
        client=client,
    )
    receive_s = delete_s = 0.0
    backend = await SqsBackend.connect(settings)
    try:
        # One untimed round trip: the connection is opened outside the figures.
        await backend.receive(url, max_messages=BATCH, wait_s=0, visibility_s=0)
        for _ in range(rounds):
            start = time.process_time()
            messages = await backend.receive(url, max_messages=BATCH, wait_s=0)
            received = time.process_time()
            deletions = [Deletion(str(i), m.receipt_handle) for i, m in enumerate(messages)]
            result = await backend.delete(url, deletions)
            deleted = time.process_time()
            if len(messages) != BATCH or result.failed:
                raise RuntimeError(f"got {len(messages)} messages, {len(result.failed)} failed")
            receive_s += received - start
            delete_s += deleted - received
    finally:
        await backend.aclose()
    return RunCpu(receive_s / rounds * 1e6, delete_s / rounds * 1e6)


def one_run(sqs: Server, client: SqsClientKind, rounds: int, loop: str, index: int) -> RunCpu:
    url = str(sqs.sqs.call("CreateQueue", QueueName=f"{QUEUE}-{index}")["QueueUrl"])
    sqs.sqs.fill(url, rounds * BATCH, lambda i: f'{{"n": {i}}}')
    return run_async(_drain, sqs.url, url, client, rounds, loop=loop)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--client", choices=("lean", "botocore"), default="lean")
    parser.add_argument("--loop", choices=LOOPS, default="uvloop")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--rounds", type=int, default=300)
    args = parser.parse_args()
    runs: list[RunCpu] = []
    with server() as sqs:
        for index in range(args.runs):
            runs.append(one_run(sqs, args.client, args.rounds, args.loop, index))
    receive = statistics.median(run.receive_us for run in runs)
    delete = statistics.median(run.delete_us for run in runs)
    per_message = statistics.median(run.per_message_us for run in runs)
    print(
        f"client={args.client} loop={args.loop} runs={args.runs} rounds={args.rounds}: "
        f"CPU per ReceiveMessage {receive:.1f} us, per DeleteMessageBatch {delete:.1f} us, "
        f"per message {per_message:.2f} us (medians over runs)"
    )
    print("runs (receive, delete us):", [(round(r.receive_us), round(r.delete_us)) for r in runs])


if __name__ == "__main__":
    main()
