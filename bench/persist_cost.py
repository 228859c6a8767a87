"""What `serve-sqs --persist` costs: requests per second with and without it, side by side.

    python -m bench.persist_cost [--clients 8] [--seconds 5]

Each setting starts its own `lease-worker serve-sqs` process; `--clients` threads, each with
its own boto3 client, send one message, receive it and delete it, over and over, for
`--seconds`. Every one of those requests changes the engine, so with `--persist` every one
waits for a journal write and its fdatasync (shared with the requests answered together).
"""

from __future__ import annotations

import argparse
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.persist_chaos import ROOT, _client, _free_port


def _serve(port: int, extra: list[str]) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "worker", "serve-sqs", "--port", str(port), "--queue", "jobs"]
    proc = subprocess.Popen([*command, "--log-level", "warning", *extra], cwd=ROOT)
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError("serve-sqs ended at start") from None
            time.sleep(0.02)


def _load(url: str, until: float, counts: list[int], index: int) -> None:
    sqs: Any = _client(url)
    queue = f"{url}/000000000000/jobs"
    done = 0
    while time.monotonic() < until:
        sqs.send_message(QueueUrl=queue, MessageBody=f"c{index}")
        got = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=1)
        done += 2
        for message in got.get("Messages", []):
            sqs.delete_message(QueueUrl=queue, ReceiptHandle=message["ReceiptHandle"])
            done += 1
    counts[index] = done


def _measure(extra: list[str], clients: int, seconds: float) -> float:
    port = _free_port()
    proc = _serve(port, extra)
    try:
        url = f"http://127.0.0.1:{port}"
        counts = [0] * clients
        until = time.monotonic() + seconds
        threads = [
            threading.Thread(target=_load, args=(url, until, counts, i)) for i in range(clients)
        ]
        began = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return sum(counts) / (time.monotonic() - began)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        settings = {
            "memory only": [],
            "--persist": ["--persist", str(Path(tmp) / "state.json")],
        }
        rates = {
            name: _measure(extra, args.clients, args.seconds) for name, extra in settings.items()
        }
    print(f"serve-sqs, {args.clients} clients (send, receive, delete), {args.seconds} s each")
    for name, rate in rates.items():
        print(f"  {name:<12} {rate:8.0f} requests/s")
    print(f"  --persist / memory only: {rates['--persist'] / rates['memory only']:.2f}")


if __name__ == "__main__":
    main()
