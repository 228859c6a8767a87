"""Table 4: requests per message for long handlers (virtual time), 30 s visibility timeout.

lease-worker is run for real on the in-memory engine under looptime, fixed and adaptive
extension, with messages arriving in waves (max_in_flight = messages / 4). The peers are
modelled from their documented heartbeat: one ChangeMessageVisibility call per message
every `heartbeat_s` (sqs-consumer's heartbeatInterval, Shoryuken's auto_visibility_timeout,
taskiq-aio-sqs), with receives and deletes counted as lease-worker makes them, so that the
column compares extension strategies and nothing else.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

import anyio

from bench._common import fill, run_async, run_until_handled
from bench._counting import CountingBackend
from worker import LeaseConfig, Message, Worker, WorkerConfig
from worker.cli.logging import configure_logging
from worker.types import QueueSpec

VISIBILITY_S = 30
MARGIN_S = 10


@dataclass(frozen=True, slots=True)
class Row:
    handler_min: int
    fixed: float
    adaptive: float
    heartbeat: float
    fixed_extends: float
    adaptive_extends: float
    heartbeat_extends: float


async def _run(count: int, duration_s: float, adaptive: bool) -> tuple[float, float]:
    lease = LeaseConfig(
        visibility_s=VISIBILITY_S,
        extension_s=VISIBILITY_S,
        renew_margin_s=MARGIN_S,
        adaptive=adaptive,
        adaptive_min_s=VISIBILITY_S,
        adaptive_max_s=600,
    )
    app = Worker(WorkerConfig(lease=lease, max_in_flight=max(1, count // 4), wait_s=20))

    @app.handler("long")
    async def work(message: Message) -> None:
        await anyio.sleep(duration_s)

    backend = CountingBackend()
    await backend.create_queue(QueueSpec("long"))
    await fill(backend, "long", count)
    await run_until_handled(app, backend, count)
    total = sum(backend.calls.values())
    return total / count, backend.calls["extend"] / count


def heartbeat_requests(
    duration_s: float, *, heartbeat_s: float, receive_and_delete: float
) -> tuple[float, float]:
    extends = math.floor(duration_s / heartbeat_s)
    return receive_and_delete + extends, float(extends)


def run(count: int, minutes: tuple[int, ...] = (2, 10, 60)) -> list[Row]:
    rows = []
    for handler_min in minutes:
        duration = handler_min * 60.0
        fixed, fixed_ext = run_async(_run, count, duration, False, virtual_time=True)
        adaptive, adaptive_ext = run_async(_run, count, duration, True, virtual_time=True)
        heartbeat, heartbeat_ext = heartbeat_requests(
            duration, heartbeat_s=VISIBILITY_S - MARGIN_S, receive_and_delete=fixed - fixed_ext
        )
        rows.append(
            Row(handler_min, fixed, adaptive, heartbeat, fixed_ext, adaptive_ext, heartbeat_ext)
        )
    return rows


def main() -> None:
    configure_logging(level="warning")
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=400)
    rows = run(parser.parse_args().messages)
    print("handler  lease-worker fixed  adaptive  per-message heartbeat   (requests/message)")
    for row in rows:
        cells = f"{row.fixed:>18.2f}  {row.adaptive:>8.2f}  {row.heartbeat:>21.2f}"
        print(f"{row.handler_min:>4} min  {cells}")


if __name__ == "__main__":
    main()
