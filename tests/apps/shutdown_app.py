"""A worker application for the process tests, configured from `SHUTDOWN_APP_*` variables.

Run it as `python -m worker run tests.apps.shutdown_app:app --backend memory`. Its start-up
hook creates the queue (unless `SHUTDOWN_APP_CREATE=0`, which leaves it to the CLI) and sends
`SHUTDOWN_APP_MESSAGES` messages. The first `SHUTDOWN_APP_MEDIUM` handlers to start take
`SHUTDOWN_APP_MEDIUM_S` seconds, every later one `SHUTDOWN_APP_LONG_S`; each logs
`app.handler_started`, then `app.handler_finished` or `app.handler_cancelled`. With
`SHUTDOWN_APP_SYNC=1` the handler is a synchronous function (it sleeps in a worker thread).
`SHUTDOWN_APP_SWALLOW=once` makes the async handler catch its cancellation and then await a
long rollback (`app.handler_rolling_back`); `=always` makes it swallow every cancellation
(`app.handler_swallowed` each time) and go on waiting. `SHUTDOWN_APP_POISON=1` makes the
first handler to start end with `sys.exit(0)`. `SHUTDOWN_APP_ON_ERROR` is the handler's
error policy, `SHUTDOWN_APP_FLUSH_S` the shutdown's flush timeout, `SHUTDOWN_APP_CALL_TIMEOUT_S`
the worker's call timeout, `SHUTDOWN_APP_WAIT_S` its long polls' wait (20 s by default; a
shutdown waits for the poll in flight, within the grace).

A background task holds on until the worker cancels it, after the final flush, and then
writes a JSON report to `SHUTDOWN_APP_REPORT`: the engine's counts, each sent message's
state, and the settings the worker ran with. `SHUTDOWN_APP_SELF_STOP=1` makes that task ask
for a shutdown as soon as it starts; `SHUTDOWN_APP_DELETE_QUEUE=1` makes it delete the queue
instead, which the receiver meets as a fatal error. `SHUTDOWN_APP_CRASH_AFTER=N` makes
another background task raise RuntimeError once N handlers have started.

`SHUTDOWN_APP_EXIT_WAIT=PATH` makes the process log `app.exiting` at interpreter exit (an
`atexit` hook, after the worker and its event loop are gone) and then wait, at most 30 s,
for the file PATH to exist: a window in which a test can signal the exiting process.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import anyio
import structlog

from backends.memory import MemoryBackend
from worker import (
    Message,
    OutgoingMessage,
    ShutdownConfig,
    Worker,
    WorkerConfig,
    WorkerContext,
)
from worker.types import QueueSpec

QUEUE = "shutdown-test"
NOT_A_WORKER = "a string, not a Worker"


def _env(name: str, default: str) -> str:
    return os.environ.get("SHUTDOWN_APP_" + name, default)


@dataclass(frozen=True, slots=True)
class Settings:
    report: str = _env("REPORT", "")
    messages: int = int(_env("MESSAGES", "20"))
    medium: int = int(_env("MEDIUM", "3"))
    medium_s: float = float(_env("MEDIUM_S", "1.0"))
    long_s: float = float(_env("LONG_S", "3600"))
    create: bool = _env("CREATE", "1") == "1"
    self_stop: bool = _env("SELF_STOP", "0") == "1"
    delete_queue: bool = _env("DELETE_QUEUE", "0") == "1"
    sync: bool = _env("SYNC", "0") == "1"
    swallow: str = _env("SWALLOW", "")
    poison: bool = _env("POISON", "0") == "1"
    crash_after: int = int(_env("CRASH_AFTER", "0"))
    exit_wait: str = _env("EXIT_WAIT", "")


@dataclass(slots=True)
class State:
    sent: list[str] = field(default_factory=list)
    started: int = 0
    #: Set at the end of a test run (atexit), so that a swallowing handler can end.
    exiting: bool = False
    #: Set once `CRASH_AFTER` handlers have started.
    crash_due: anyio.Event | None = None


settings = Settings()
state = State()
log = structlog.get_logger("tests.apps.shutdown_app")

app = Worker(
    WorkerConfig(
        max_in_flight=int(_env("MAX_IN_FLIGHT", "6")),
        shutdown=ShutdownConfig(
            grace_s=float(_env("GRACE_S", "30")), flush_timeout_s=float(_env("FLUSH_S", "10"))
        ),
        call_timeout_s=float(_env("CALL_TIMEOUT_S", "5")),
        wait_s=int(_env("WAIT_S", "20")),
    ),
    name="shutdown-app",
)
#: An app with no handler at all, which the worker refuses to run.
empty = Worker(name="empty")


@app.on_startup
async def seed(context: WorkerContext) -> None:
    backend = context.backend
    if not settings.messages and not settings.create:
        return  # nothing to do: any backend will do
    assert isinstance(backend, MemoryBackend), "this app runs on --backend memory only"
    if settings.create:
        await backend.create_queue(
            QueueSpec(QUEUE, visibility_timeout_s=app.config.lease.visibility_s)
        )
    for start in range(0, settings.messages, 10):
        batch = [
            OutgoingMessage(entry_id=str(n), body=json.dumps({"n": n}))
            for n in range(start, min(start + 10, settings.messages))
        ]
        result = await backend.send(QUEUE, batch)
        assert not result.failed, result.failed
        state.sent.extend(result.message_ids[entry.entry_id] for entry in batch)
    log.info("app.seeded", messages=len(state.sent))


def _start(message: Message) -> tuple[str, int, float]:
    index = state.started
    state.started += 1
    if state.crash_due is not None and state.started >= settings.crash_after:
        state.crash_due.set()
    kind = "medium" if index < settings.medium else "long"
    log.info("app.handler_started", kind=kind, index=index, receive_count=message.receive_count)
    return kind, index, settings.medium_s if kind == "medium" else settings.long_s


async def handle(message: Message) -> None:
    kind, index, duration_s = _start(message)
    if settings.poison and index == 0:
        sys.exit(0)
    try:
        await anyio.sleep(duration_s)
    except anyio.get_cancelled_exc_class():
        log.info("app.handler_cancelled", kind=kind, index=index)
        if settings.swallow == "once":
            log.info("app.handler_rolling_back", kind=kind, index=index)
            await anyio.sleep(settings.long_s)  # a rollback that takes its time
        elif settings.swallow == "always":
            await _swallow_forever(kind, index)
        raise
    log.info("app.handler_finished", kind=kind, index=index)


async def _swallow_forever(kind: str, index: int) -> None:
    while not state.exiting:
        try:
            await anyio.sleep(settings.long_s)
        except anyio.get_cancelled_exc_class():
            log.info("app.handler_swallowed", kind=kind, index=index)


def handle_in_thread(message: Message) -> None:
    """The synchronous form: the runtime runs it in a worker thread and cannot stop it."""
    kind, index, duration_s = _start(message)
    if settings.poison and index == 0:
        sys.exit(0)
    time.sleep(duration_s)
    log.info("app.handler_finished", kind=kind, index=index)


app.handler(QUEUE, on_error=_env("ON_ERROR", "release"))(
    handle_in_thread if settings.sync else handle
)


@app.background
async def crash(context: WorkerContext) -> None:
    if not settings.crash_after:
        return
    state.crash_due = anyio.Event()
    if state.started < settings.crash_after:
        await state.crash_due.wait()
    raise RuntimeError("the app's background task failed")


def _wait_at_exit(path: str) -> None:
    state.exiting = True
    log.info("app.exiting")
    deadline = time.monotonic() + 30
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.01)


if settings.exit_wait:
    atexit.register(_wait_at_exit, settings.exit_wait)


@app.background
async def report(context: WorkerContext) -> None:
    if settings.delete_queue:
        assert isinstance(context.backend, MemoryBackend)
        await context.backend.delete_queue(QUEUE)
    if settings.self_stop:
        context.request_shutdown()
    try:
        await anyio.sleep_forever()
    finally:
        # Cancelled after the final flush: the engine now holds what the worker left behind.
        with anyio.CancelScope(shield=True):
            if settings.report:
                text = json.dumps(_report(context), indent=2)
                await anyio.Path(settings.report).write_text(text)


def _report(context: WorkerContext) -> dict[str, Any]:
    backend = context.backend
    assert isinstance(backend, MemoryBackend)
    engine = backend.engine
    lease, shutdown = app.config.lease, app.config.shutdown
    result: dict[str, Any] = {
        "now": engine.clock.now(),
        "started": state.started,
        "config": {
            "max_in_flight": app.config.max_in_flight,
            "grace_s": shutdown.grace_s,
            "visibility_s": lease.visibility_s,
            "extension_s": lease.extension_s,
            "renew_margin_s": lease.renew_margin_s,
            "max_lease_s": lease.max_lease_s,
            "adaptive": lease.adaptive,
        },
    }
    if QUEUE not in engine.list_queues():
        return result | {"queue": None}
    counts = engine.counts(QUEUE)
    result["queue"] = {
        "visible": counts.visible,
        "in_flight": counts.in_flight,
        "delayed": counts.delayed,
    }
    messages: dict[str, dict[str, Any] | None] = {}
    for message_id in state.sent:
        snapshot = engine.peek(QUEUE, message_id)
        messages[message_id] = (
            None
            if snapshot is None
            else {
                "state": snapshot.state.value,
                "receive_count": snapshot.receive_count,
                "visible_at": snapshot.visible_at,
            }
        )
    result["messages"] = messages
    return result
