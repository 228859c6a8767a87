"""A handler's log context is structlog's own: bound per task, seen and changed by
structlog's contextvars API as if `bind_contextvars` had bound it."""

from __future__ import annotations

import contextvars
from typing import Any

import pytest
import structlog

from worker import Message, Worker, WorkerConfig
from worker.runtime.log_context import (
    REDACTED,
    bind_body,
    bind_message,
    scrub,
    structlog_variables,
)
from worker.testing import run_worker


def test_the_variables_are_structlogs_own() -> None:
    variables = structlog_variables()
    assert variables is not None
    queue, message_id = variables
    assert (queue.name, message_id.name) == ("structlog_queue", "structlog_message_id")

    def bound_by_structlog() -> set[contextvars.ContextVar[Any]]:
        structlog.contextvars.bind_contextvars(queue="q", message_id="m")
        return set(contextvars.copy_context())

    assert {queue, message_id} <= contextvars.Context().run(bound_by_structlog)


def test_bound_it_is_what_structlog_would_have_bound_and_clear_clears_it() -> None:
    def bind_and_read() -> tuple[dict[str, Any], dict[str, Any]]:
        bind_message("jobs", "m-1")
        bound = structlog.contextvars.get_contextvars()
        merged = structlog.contextvars.merge_contextvars(None, "info", {"event": "x"})
        structlog.contextvars.clear_contextvars()
        return bound, {**merged, "after_clear": structlog.contextvars.get_contextvars()}

    bound, merged = contextvars.Context().run(bind_and_read)
    assert bound == {"queue": "jobs", "message_id": "m-1"}
    assert merged == {"event": "x", "queue": "jobs", "message_id": "m-1", "after_clear": {}}
    assert "queue" not in structlog.contextvars.get_contextvars()  # nothing leaked out


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_each_handler_sees_its_own_message_in_the_log_context() -> None:
    app = Worker(WorkerConfig(max_in_flight=3, wait_s=1))
    seen: dict[str, dict[str, Any]] = {}

    @app.handler("jobs")
    async def handler(message: Message) -> None:
        seen[message.message_id] = structlog.contextvars.get_contextvars()

    async with run_worker(app) as harness:
        ids = [await harness.send("jobs", {"n": n}) for n in range(3)]
        await harness.wait_for_handled(3)
    assert seen == {i: {"queue": "jobs", "message_id": i} for i in ids}


def test_scrub_takes_the_bound_bodys_values_out_of_a_text() -> None:
    """Issue 28 (3): an exception's message may quote a value of the body."""

    def scrubbed(body: str, text: str) -> str:
        def run() -> str:
            bind_body(body)
            return scrub(text)

        return contextvars.Context().run(run)

    body = '{"card": "4111-1111", "amount": 1234567, "n": 42, "ok": "yes", "nested": ["secret"]}'
    text = "invalid literal for int() with base 10: '4111-1111'; 1234567 at line 42; secret; yes"
    assert scrubbed(body, text) == (
        f"invalid literal for int() with base 10: '{REDACTED}'; {REDACTED} at line 42; "
        f"{REDACTED}; yes"  # short values and numbers stay: they would wreck every text
    )
    assert scrubbed("not json: hunter2 pw", "login failed for hunter2") == (
        f"login failed for {REDACTED}"
    )
    assert scrub("nothing bound here: 4111-1111") == "nothing bound here: 4111-1111"
