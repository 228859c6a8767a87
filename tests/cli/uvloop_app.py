"""A worker for tests/cli/test_loop_cli.py: handlers outlive their visibility, so every lease
is renewed while they run.

    lease-worker run tests.cli.uvloop_app:app --backend sqs --endpoint-url URL --loop uvloop

At start-up it prints `loop=<the running loop's class> client=<lean|botocore>`; each handler
prints `handled <message id>` when it returns.
"""

from __future__ import annotations

import asyncio

import anyio

from worker import LeaseConfig, Message, Worker, WorkerConfig, WorkerContext

QUEUE = "uvloop-jobs"
#: Longer than the 2 s visibility: the keeper must renew each lease once at least.
WORK_S = 2.5

app = Worker(
    WorkerConfig(
        lease=LeaseConfig(visibility_s=2, extension_s=2, renew_margin_s=1.0),
        max_in_flight=10,
        wait_s=1,
    ),
    name="uvloop-test",
)


@app.on_startup
async def report(context: WorkerContext) -> None:
    loop = type(asyncio.get_running_loop())
    client = "lean" if getattr(context.backend, "_lean", None) is not None else "botocore"
    print(f"loop={loop.__module__}.{loop.__qualname__} client={client}", flush=True)


@app.handler(QUEUE, decode="raw")
async def work(message: Message) -> None:
    await anyio.sleep(WORK_S)
    print(f"handled {message.message_id}", flush=True)
