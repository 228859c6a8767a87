"""A worker application whose messages take every handler failure path with a canary aboard.

Run it as `python -m worker run tests.apps.canary_app:app --backend memory` with
`CANARY_APP_BODY` and `CANARY_APP_SECRET` set to two random strings. The canaries live only
in the environment, the message bodies and the handlers' local variables (never in this
source, which tracebacks quote), so any appearance of them in the log is a leak.

A background task sends one message to each queue below and, once the worker has counted
an outcome for every one of them (its own `messages_handled` metric), asks for a shutdown.
Every handler holds the decoded body in `body` and the secret in `secret`:

- `canary-async`: an async handler raises;
- `canary-sync`: a synchronous `def` handler raises (in its worker thread);
- `canary-undecodable`: the body is not JSON (and quotes both canaries), so decoding fails;
- `canary-middleware`: the handler's middleware raises before the handler runs;
- `canary-retry` / `canary-discard`: the handler raises `Retry` / `Discard`;
- `canary-timeout`: the handler waits until the lease's cap (`max_lease_s`) cancels it;
- `canary-stdlib`: the handler logs a caught error with stdlib `logging` and `exc_info`;
- `canary-huge`: an async handler raises an exception whose message is 1 MB long;
- `canary-quoted`: an async handler's `int(body["canary"])` raises a ValueError whose
  message quotes the canary (issue 28, 3);
- `canary-keyerror`: a synchronous handler's `{}[body["canary"]]` raises a KeyError whose
  message is the canary, and a stdlib `logging` call formats it into its own message.

Each queue is created by the app with a dead-letter queue after one receive, so no message
comes back (a release or a Retry sends it there instead) and each queue gives exactly one
outcome in a run. Leases are short (visibility 1 s, cap `MAX_LEASE_S`) so that the cap
cancels the `canary-timeout` handler about half a second after its receive.
"""

from __future__ import annotations

import json
import logging
import os

import anyio
from prometheus_client import CollectorRegistry

from backends.memory import MemoryBackend
from worker import (
    Discard,
    LeaseConfig,
    Message,
    OutgoingMessage,
    Retry,
    Worker,
    WorkerConfig,
    WorkerContext,
)
from worker.middleware import CallNext
from worker.types import QueueSpec, RedrivePolicy

#: How long a handler may hold its message: the timeout path costs this much of the run.
MAX_LEASE_S = 1.0
#: Size of the exception message raised on `canary-huge`.
HUGE = 1_000_000
#: Bound on the wait for every outcome: past it the app shuts down anyway (and the test fails).
WAIT_S = 30.0

QUEUES = (
    "canary-async",
    "canary-sync",
    "canary-undecodable",
    "canary-middleware",
    "canary-retry",
    "canary-discard",
    "canary-timeout",
    "canary-stdlib",
    "canary-huge",
    "canary-quoted",
    "canary-keyerror",
)

DEAD_LETTERS = "canary-dlq"

app = Worker(
    WorkerConfig(
        lease=LeaseConfig(
            visibility_s=1, extension_s=1, renew_margin_s=0.5, max_lease_s=MAX_LEASE_S
        )
    ),
    name="canary-app",
)
stdlib_log = logging.getLogger("tests.apps.canary_app")


def _secret() -> str:
    return os.environ["CANARY_APP_SECRET"]


def _body() -> str:
    return os.environ["CANARY_APP_BODY"]


@app.handler("canary-async")
async def fail_async(message: Message) -> None:
    body, secret = message.body, _secret()
    assert body["canary"] and secret
    raise RuntimeError("async handler failed")


@app.handler("canary-sync")
def fail_sync(message: Message) -> None:
    body, secret = message.body, _secret()
    assert body["canary"] and secret
    raise ValueError("sync handler failed")


@app.handler("canary-undecodable")
async def never_called(message: Message) -> None:
    raise AssertionError("an undecodable body reached its handler")


async def failing_middleware(message: Message, call_next: CallNext) -> None:
    body, secret = message.body, _secret()
    assert body["canary"] and secret
    raise LookupError("middleware failed")


@app.handler("canary-middleware", middleware=[failing_middleware])
async def behind_middleware(message: Message) -> None:
    raise AssertionError("the middleware should have failed first")


@app.handler("canary-retry")
async def retry(message: Message) -> None:
    body, secret = message.body, _secret()
    assert body["canary"] and secret
    raise Retry(after_s=3600, reason="asked to retry")


@app.handler("canary-discard")
async def discard(message: Message) -> None:
    body, secret = message.body, _secret()
    assert body["canary"] and secret
    raise Discard(reason="asked to discard")


@app.handler("canary-timeout")
async def time_out(message: Message) -> None:
    body, secret = message.body, _secret()
    assert body["canary"] and secret
    await anyio.sleep_forever()


@app.handler("canary-stdlib")
async def log_with_stdlib(message: Message) -> None:
    body, secret = message.body, _secret()
    try:
        raise KeyError("missing field")
    except KeyError:
        stdlib_log.exception("app.stdlib_logged %s", "with exc_info")
    assert body["canary"] and secret


@app.handler("canary-huge")
async def fail_huge(message: Message) -> None:
    body, secret = message.body, _secret()
    assert body["canary"] and secret
    raise RuntimeError("huge " + "x" * HUGE)


@app.handler("canary-quoted")
async def quote_in_exception(message: Message) -> None:
    int(message.body["canary"])  # ValueError: invalid literal for int() ...: '<the canary>'


@app.handler("canary-keyerror")
def quote_in_key_error(message: Message) -> None:
    try:
        {}[message.body["canary"]]  # KeyError: '<the canary>'
    except KeyError as error:
        stdlib_log.warning("app.key_missing %s", error)
        raise


@app.on_startup
async def create_queues(context: WorkerContext) -> None:
    backend = context.backend
    assert isinstance(backend, MemoryBackend), "this app runs on --backend memory only"
    await backend.create_queue(QueueSpec(DEAD_LETTERS))
    for queue in QUEUES:
        redrive = RedrivePolicy(DEAD_LETTERS, max_receive_count=1)
        await backend.create_queue(QueueSpec(queue, visibility_timeout_s=1, redrive=redrive))


@app.background
async def send_and_stop(context: WorkerContext) -> None:
    for queue in QUEUES:
        body = json.dumps({"canary": _body()})
        if queue == "canary-undecodable":
            body = "{not json " + _body() + " " + _secret()
        result = await context.backend.send(queue, [OutgoingMessage(body=body)])
        assert not result.failed, result.failed
    with anyio.move_on_after(WAIT_S):
        # A condition watched, not a delay to let things settle: metrics have no event.
        while _handled(context.registry) < len(QUEUES):  # noqa: ASYNC110
            await anyio.sleep(0.02)
    context.request_shutdown()


def _handled(registry: CollectorRegistry) -> float:
    """Outcomes the worker counted so far, all queues together."""
    return sum(
        sample.value
        for metric in registry.collect()
        if metric.name == "lease_worker_messages_handled"
        for sample in metric.samples
        if sample.name.endswith("_total")
    )
