"""`serve-sqs --persist` SIGKILLed under load: is anything acknowledged lost, and does any
message run twice at once?

    python -m bench.persist_chaos [--kills 4] [--workers 3] [--seconds 10]

One real `lease-worker serve-sqs --persist` process, killed with SIGKILL `--kills` times
(after serving `--seconds` / (kills + 1) each time) and started again on the same port and
files; a producer sends batches of 10 and records every send the server acknowledged;
`--workers` worker processes receive (visibility 10 s), run each message 5-50 ms, record the
run, and delete it. Clients retry through the outages. Once the producer is done and the
workers find the queue empty, whatever is left is received once more to count it, and the
table says:

- sends acknowledged, and how many of them never ran (lost);
- runs of one message that overlapped in time in two workers (concurrent runs: what reused
  receipt handles caused, an old holder's delete removing a new holder's message);
- messages run again after a run whose delete was acknowledged (lost deletes).
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

ROOT = Path(__file__).resolve().parents[1]
_VISIBILITY_S = 10


def _client(url: str) -> Any:
    return boto3.client(
        "sqs",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id="bench",
        aws_secret_access_key="bench",
        config=Config(retries={"total_max_attempts": 1}, connect_timeout=1, read_timeout=25),
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class _Server:
    def __init__(self, state: Path, port: int) -> None:
        self.state, self.port = state, port
        self.url = f"http://127.0.0.1:{port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> float:
        """Start and wait until it answers; the seconds that took."""
        began = time.monotonic()
        command = [sys.executable, "-m", "worker", "serve-sqs", "--port", str(self.port)]
        command += ["--persist", str(self.state), "--queue", "jobs", "--log-level", "warning"]
        self.proc = subprocess.Popen(command, cwd=ROOT, stdin=subprocess.DEVNULL)
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return time.monotonic() - began
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError("serve-sqs ended at start") from None
                time.sleep(0.02)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=30)


def _produce(url: str, done: Any, out: Path) -> None:
    sqs = _client(url)
    queue = f"{url}/000000000000/jobs"
    batch = 0
    with out.open("w") as log:
        while not done.is_set():
            entries = [{"Id": str(i), "MessageBody": f"b{batch}-{i}"} for i in range(10)]
            try:
                answer = sqs.send_message_batch(QueueUrl=queue, Entries=entries)
            except (BotoCoreError, ClientError):
                time.sleep(0.05)  # the server is down: try the same batch again
                continue
            for item in answer.get("Successful", []):
                log.write(json.dumps([f"b{batch}-{item['Id']}", item["MessageId"]]) + "\n")
            log.flush()
            batch += 1
            time.sleep(0.1)


def _work(url: str, name: str, done: Any, out: Path, seed: int) -> None:
    import random

    pick = random.Random(seed)
    sqs = _client(url)
    queue = f"{url}/000000000000/jobs"
    with out.open("w") as log:
        while True:
            try:
                got = sqs.receive_message(
                    QueueUrl=queue,
                    MaxNumberOfMessages=5,
                    WaitTimeSeconds=1,
                    VisibilityTimeout=_VISIBILITY_S,
                )
            except (BotoCoreError, ClientError):
                time.sleep(0.05)
                continue
            if not got.get("Messages") and done.is_set():
                return  # drained
            for message in got.get("Messages", []):
                started = time.time()
                time.sleep(pick.uniform(0.005, 0.05))  # the handler's work
                deleted = _delete(sqs, queue, message["ReceiptHandle"])
                run = [name, message["MessageId"], message["Body"], started, time.time(), deleted]
                log.write(json.dumps(run) + "\n")
                log.flush()


def _delete(sqs: Any, queue: str, handle: str) -> bool:
    for _ in range(600):
        try:
            sqs.delete_message(QueueUrl=queue, ReceiptHandle=handle)
            return True
        except ClientError:
            return False  # refused: not acknowledged
        except BotoCoreError:
            time.sleep(0.05)  # down, or the answer lost: send it again
    return False


def _lines(path: Path) -> list[Any]:
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def _left(url: str) -> set[str]:
    """The ids of the messages still stored (not run by the end), received to see them."""
    sqs = _client(url)
    queue = f"{url}/000000000000/jobs"
    left: set[str] = set()
    while True:
        got = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10, VisibilityTimeout=600)
        if not got.get("Messages"):
            counts = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["All"])
            if counts["Attributes"]["ApproximateNumberOfMessagesNotVisible"] == str(len(left)):
                return left
            time.sleep(0.5)  # some in flight with a worker that stopped: until they lapse
            continue
        left.update(m["MessageId"] for m in got["Messages"])


def _judge(sent: list[Any], runs: list[Any], left: set[str]) -> dict[str, int]:
    by_id: dict[str, list[Any]] = defaultdict(list)
    for run in runs:
        by_id[run[1]].append(run)
    lost = sum(1 for _, message_id in sent if message_id not in by_id and message_id not in left)
    concurrent = lost_deletes = 0
    for message_runs in by_id.values():
        message_runs.sort(key=lambda run: run[3])
        for first, second in itertools.pairwise(message_runs):
            if second[3] < first[4]:
                concurrent += 1
            elif first[5]:
                lost_deletes += 1
    return {
        "sends acknowledged": len(sent),
        "acknowledged sends lost": lost,
        "runs": len(runs),
        "left in the queue at the end": len(left),
        "concurrent runs": concurrent,
        "runs after an acknowledged delete": lost_deletes,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=4)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument(
        "--seconds", type=float, default=10.0, help="time served under load, kills spread over it"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        server = _Server(work / "state.json", _free_port())
        server.start()
        context = multiprocessing.get_context("spawn")
        done = context.Event()
        producer = context.Process(target=_produce, args=(server.url, done, work / "sent.jsonl"))
        workers = [
            context.Process(target=_work, args=(server.url, f"w{i}", done, work / f"w{i}.jsonl", i))
            for i in range(args.workers)
        ]
        for process in (producer, *workers):
            process.start()
        restarts = []
        every = args.seconds / (args.kills + 1)
        for _ in range(args.kills):
            time.sleep(every)  # serving, under load, then killed
            server.kill()
            restarts.append(server.start())
        time.sleep(every)
        done.set()
        for process in (producer, *workers):
            process.join()
        left = _left(server.url)
        server.stop()
        runs = [run for i in range(args.workers) for run in _lines(work / f"w{i}.jsonl")]
        figures = _judge(_lines(work / "sent.jsonl"), runs, left)
        journal = work / "state.json.journal"
        size = journal.stat().st_size if journal.exists() else 0
    figures["SIGKILLs"] = args.kills
    print(f"serve-sqs --persist, {args.workers} workers, {args.kills} SIGKILLs")
    took = ", ".join(f"{s:.2f}" for s in restarts)
    print(f"(restarts answered after {took} s; journal at stop: {size} bytes)")
    width = max(map(len, figures))
    for label, value in figures.items():
        print(f"  {label:<{width}}  {value:>7}")
    sys.exit(0 if figures["acknowledged sends lost"] == figures["concurrent runs"] == 0 else 1)


if __name__ == "__main__":
    main()
