"""What the flow-control benches share: a serve-sqs with one queue filled, and workers
(`lease-worker run bench.apps.flow_app:app`, real processes) that write a line per message
handled (bench/apps/flow_app.py), read back as `Handled` rows."""

from __future__ import annotations

import json
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench import _harness

__all__ = ["Handled", "read_handled", "send_tenants", "workers"]

APP = "bench.apps.flow_app:app"


@dataclass(frozen=True, slots=True)
class Handled:
    at: float
    ok: bool
    tenant: str
    sent: float
    inside: int
    message_id: str = ""


def read_handled(paths: Sequence[Path]) -> list[Handled]:
    rows = []
    for path in paths:
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            at, outcome, tenant, sent, inside, *message_id = line.split()
            rows.append(
                Handled(float(at), outcome == "ok", tenant, float(sent), int(inside), *message_id)
            )
    return sorted(rows, key=lambda row: row.at)


@contextmanager
def workers(
    server: _harness.Server,
    queue: str,
    count: int,
    options: Sequence[str],
    env: Mapping[str, str] | None = None,
    *,
    each: Callable[[int], Sequence[str]] | None = None,
    processes: list[_harness.Process] | None = None,
) -> Iterator[list[Path]]:
    """`count` worker processes on `queue`, ready (each said so); yields their output files.
    `each(i)`: options of process i alone; `processes`: filled with the processes."""
    directory = Path(tempfile.mkdtemp(prefix="flow-bench-"))
    outs = [directory / f"worker-{index}.log" for index in range(count)]
    command = [sys.executable, "-m", "worker", "run", APP, "--backend", "sqs"]
    command += ["--endpoint-url", server.url, "--region", "us-east-1", "--log-level", "warning"]
    with ExitStack() as stack:
        started = [
            stack.enter_context(
                _harness.started(
                    [*command, *options, *(each(index) if each else ())],
                    env={"FLOW_QUEUE": queue, "FLOW_OUT": str(out), **(env or {})},
                )
            )
            for index, out in enumerate(outs)
        ]
        if processes is not None:
            processes.extend(started)
        deadline = time.monotonic() + 60
        for process in started:
            while not process.ready.wait(0.1):
                if process.exited() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"a worker did not start: {process.stderr_tail()}")
        yield outs


def send_tenants(
    server: _harness.Server, url: str, tenants: Sequence[str], group_ids: bool
) -> None:
    """One message per entry of `tenants`, its body naming the tenant and the send time (with
    `group_ids`, the tenant is also the MessageGroupId: a fair queue's tenant)."""
    for start in range(0, len(tenants), 10):
        entries = []
        for index, tenant in enumerate(tenants[start : start + 10]):
            entry = {
                "Id": str(index),
                "MessageBody": json.dumps({"tenant": tenant, "t": time.time()}),
            }
            if group_ids:
                entry["MessageGroupId"] = tenant
            entries.append(entry)
        answer = server.sqs.call("SendMessageBatch", QueueUrl=url, Entries=entries)
        if answer.get("Failed"):
            raise RuntimeError(f"SendMessageBatch: {answer['Failed'][0]}")


def create_queue(server: _harness.Server, name: str) -> str:
    url: str = server.sqs.call("CreateQueue", QueueName=name)["QueueUrl"]
    return url


def wait_for(paths: Sequence[Path], count: int, deadline_s: float) -> list[Handled]:
    """Wait until `count` messages were handled (ok), or `deadline_s` passed."""
    end = time.monotonic() + deadline_s
    while True:
        rows = read_handled(paths)
        if sum(row.ok for row in rows) >= count or time.monotonic() > end:
            return rows
        time.sleep(0.25)
