"""The CLI's logging: no locals and bounded exceptions, in both formats (issue 12, defect 14).

Defect 14, "Logs leak message bodies": the JSON renderer wrote every traceback's frame locals
(a handler's `body`, a synchronous handler's `secret`), an exception's text went out whole
(a 1 MB message made a 1 MB line), and standard library records came out as plain text in
the JSON stream, or not at all.

The unit tests configure logging in this process and read standard error; the canary tests
run the real command on `tests.apps.canary_app`, whose messages take every handler failure
path with a canary body and a canary secret in their locals, and count the canaries in the
whole of its standard error.
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path
from typing import Any, Literal

import pytest
import structlog

from worker.cli.logging import LogFormat, configure_logging
from worker.runtime.log_context import REDACTED

ROOT = Path(__file__).resolve().parents[2]
FORMATS: tuple[LogFormat, ...] = ("json", "console")
#: What one event may take, exception included, whatever the exception's size: a few KB.
EVENT_BOUND = 10_000
#: A console line's start: timestamp, [level], event.
CONSOLE_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\S+ \[(\w+)\s*\] (\S+)")
TIMEOUT_S = 60

Event = dict[str, Any]


def canary(kind: str) -> str:
    # Made at run time: a traceback quotes source lines, so a canary in the source would leak.
    return f"{kind}-{uuid.uuid4().hex}"


def events_of(text: str, fmt: LogFormat) -> list[str]:
    """Standard error cut into events: JSON lines, or console lines with what follows them."""
    if fmt == "json":
        return text.splitlines()
    events: list[str] = []
    for line in text.splitlines():
        if CONSOLE_LINE.match(line) or not events:
            events.append(line)
        else:
            events[-1] += "\n" + line
    return events


def fail_with_locals(body: dict[str, str], secret: str) -> None:
    message = {"body": body, "secret": secret}
    assert message
    raise RuntimeError("handler failed")


def fail_huge(size: int) -> None:
    raise RuntimeError("huge " + "x" * size)


@pytest.mark.parametrize("fmt", FORMATS)
def test_defect_14_structlog_exception_shows_no_locals(
    fmt: LogFormat, capsys: pytest.CaptureFixture[str]
) -> None:
    body, secret = canary("body"), canary("secret")
    configure_logging(fmt=fmt)
    try:
        fail_with_locals({"canary": body}, secret)
    except RuntimeError:
        structlog.get_logger("test").exception("handler.failed", handler="fail_with_locals")
    err = capsys.readouterr().err
    assert (err.count(body), err.count(secret)) == (0, 0)
    (event,) = events_of(err, fmt)  # one line in JSON, traceback included
    assert "handler.failed" in event
    text = json.loads(event)["exception"] if fmt == "json" else event
    assert 'raise RuntimeError("handler failed")' in text  # the traceback is all there
    assert "RuntimeError: handler failed" in text


@pytest.mark.parametrize("fmt", FORMATS)
def test_defect_14_stdlib_exception_shows_no_locals(
    fmt: LogFormat, capsys: pytest.CaptureFixture[str]
) -> None:
    body, secret = canary("body"), canary("secret")
    configure_logging(fmt=fmt)
    try:
        fail_with_locals({"canary": body}, secret)
    except RuntimeError:
        logging.getLogger("someone.app").exception("handler failed in %s", "fail_with_locals")
    err = capsys.readouterr().err
    assert (err.count(body), err.count(secret)) == (0, 0)
    (event,) = events_of(err, fmt)
    assert "handler failed in fail_with_locals" in event
    assert "RuntimeError: handler failed" in event


@pytest.mark.parametrize("fmt", FORMATS)
def test_defect_14_a_1mb_exception_message_is_cut(
    fmt: LogFormat, capsys: pytest.CaptureFixture[str]
) -> None:
    configure_logging(fmt=fmt)
    try:
        fail_huge(1_000_000)
    except RuntimeError:
        structlog.get_logger("test").exception("handler.failed")
        logging.getLogger("someone.app").exception("handler failed")
    events = events_of(capsys.readouterr().err, fmt)
    assert len(events) == 2
    for event in events:
        assert len(event) < EVENT_BOUND
        assert "RuntimeError: huge xxxx" in event
        assert "characters cut" in event


@pytest.mark.parametrize("fmt", FORMATS)
def test_defect_14_error_and_reason_fields_are_cut(
    fmt: LogFormat, capsys: pytest.CaptureFixture[str]
) -> None:
    configure_logging(fmt=fmt)
    log = structlog.get_logger("test")
    log.error("backend.failed", error="e" * 1_000_000)
    log.info("handler.retry", reason="r" * 1_000_000)
    logging.getLogger("someone.app").warning("a long text: %s", "t" * 1_000_000)
    events = events_of(capsys.readouterr().err, fmt)
    assert len(events) == 3
    assert [len(event) < 3_000 for event in events] == [True, True, True]


def test_defect_14_a_long_chain_and_a_large_group_are_bounded(
    capsys: pytest.CaptureFixture[str],
) -> None:
    configure_logging(fmt="json")
    members = [ValueError(f"member {n} " + "m" * 100_000) for n in range(200)]
    try:
        try:
            raise ExceptionGroup("many failures", members)
        except ExceptionGroup as group:
            raise RuntimeError("y" * 1_000_000) from group
    except RuntimeError:
        structlog.get_logger("test").exception("supervisor.crashed")
    (line,) = capsys.readouterr().err.splitlines()
    assert len(line) < EVENT_BOUND
    exception = json.loads(line)["exception"]
    assert "RuntimeError: yyyy" in exception  # the exception logged is never the part cut
    assert "ExceptionGroup: many failures" in exception


def test_defect_14_stdlib_records_are_json_lines(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging(fmt="json", level="debug")  # botocore's INFO lines: at debug only
    logging.getLogger("botocore.credentials").info("Found credentials in %s", "environment")
    logging.getLogger("asyncio").warning("Executing %s took %.3f seconds", "<Task>", 0.25)
    lines = capsys.readouterr().err.splitlines()
    events = [json.loads(line) for line in lines]
    assert [(e["event"], e["level"], e["logger"]) for e in events] == [
        ("Found credentials in environment", "info", "botocore.credentials"),
        ("Executing <Task> took 0.250 seconds", "warning", "asyncio"),
    ]
    assert all("timestamp" in event for event in events)


def test_defect_14_stdlib_records_take_the_console_format(
    capsys: pytest.CaptureFixture[str],
) -> None:
    configure_logging(fmt="console")
    structlog.get_logger("test").warning("worker.started", queues=["jobs"])
    logging.getLogger("aiohttp.client").warning("Unclosed client session")
    matches = [CONSOLE_LINE.match(line) for line in capsys.readouterr().err.splitlines()]
    assert [(m.group(1), m.group(2)) if m else None for m in matches] == [
        ("warning", "worker.started"),
        ("warning", "Unclosed"),
    ]


@pytest.mark.parametrize("fmt", FORMATS)
def test_contextvars_reach_structlog_and_stdlib_lines(
    fmt: LogFormat, capsys: pytest.CaptureFixture[str]
) -> None:
    configure_logging(fmt=fmt)
    with structlog.contextvars.bound_contextvars(queue="orders", message_id="m-1"):
        structlog.get_logger("test").info("app.shipped")
        logging.getLogger("someone.app").info("shipped with logging")
    events = events_of(capsys.readouterr().err, fmt)
    assert len(events) == 2
    for event in events:
        if fmt == "json":
            fields = json.loads(event)
            assert (fields["queue"], fields["message_id"]) == ("orders", "m-1")
        else:
            assert "queue=orders" in event and "message_id=m-1" in event


def test_level_filters_structlog_and_stdlib(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging(fmt="json", level="warning")
    log, stdlib_log = structlog.get_logger("test"), logging.getLogger("someone.app")
    log.info("dropped.structlog")
    stdlib_log.info("dropped.stdlib")
    log.warning("kept.structlog")
    stdlib_log.warning("kept.stdlib")
    events = [json.loads(line)["event"] for line in capsys.readouterr().err.splitlines()]
    assert events == ["kept.structlog", "kept.stdlib"]


def test_botocore_debug_records_stay_out_at_debug(capsys: pytest.CaptureFixture[str]) -> None:
    body = canary("body")
    configure_logging(fmt="json", level="debug")
    logging.getLogger("botocore.parsers").debug("Response body:\n%s", body)
    logging.getLogger("aiobotocore.endpoint").debug("Making request with body %s", body)
    structlog.get_logger("test").debug("lease.renewed")
    events = [json.loads(line)["event"] for line in capsys.readouterr().err.splitlines()]
    assert events == ["lease.renewed"]


def test_an_unformattable_stdlib_record_is_one_json_line() -> None:
    # In a child: pytest's own log handler turns a logging error into a test failure.
    body = canary("body")
    code = (
        "import logging; from worker.cli.logging import configure_logging; "
        "configure_logging(fmt='json'); "
        f"logging.getLogger('someone.app').info('count %d', {body!r})"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT_S
    )
    (line,) = done.stderr.splitlines()
    assert body not in line
    assert json.loads(line)["event"].startswith("log.unformattable_record (TypeError at ")


# The acceptance check: the real command, every handler failure path.

#: Events the canary run must log, with their exact counts.
EXPECTED = {
    # canary-async, canary-sync, canary-middleware, canary-huge, canary-quoted,
    # canary-keyerror
    "handler.failed": 6,
    "handler.undecodable_body": 1,
    "handler.retry": 1,
    "handler.discarded": 1,
    "lease.max_lease_reached": 1,
    # the stdlib record of canary-stdlib
    "app.stdlib_logged": 1,
    # canary-keyerror's stdlib record (its canary scrubbed from the message)
    "app.key_missing": 1,
}


def run_canary_app(fmt: LogFormat | Literal["auto"]) -> tuple[str, str, str]:
    """Run the canary app to its own shutdown; (standard error, body canary, secret canary)."""
    body, secret = canary("body"), canary("secret")
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("LEASE_WORKER_", "CANARY_APP_"))
    }
    env |= {"CANARY_APP_BODY": body, "CANARY_APP_SECRET": secret}
    command = [sys.executable, "-m", "worker", "run", "tests.apps.canary_app:app"]
    done = subprocess.run(
        [*command, "--backend", "memory", "--log-format", fmt],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr[-5_000:]
    return done.stderr, body, secret


def counted(names: list[str]) -> dict[str, int]:
    counts = Counter(name for name in names if name in EXPECTED)
    return dict(counts)


@pytest.mark.process
def test_defect_14_canary_run_json_leaks_nothing() -> None:
    err, body, secret = run_canary_app("json")
    assert (err.count(body), err.count(secret)) == (0, 0)
    lines = err.splitlines()
    assert max(len(line) for line in lines) < EVENT_BOUND
    events: list[Event] = [json.loads(line) for line in lines]  # every line is one object
    names = [event["event"].split(" ")[0] for event in events]
    assert counted(names) == EXPECTED
    failed = [event for event in events if event["event"] == "handler.failed"]
    assert sorted(event["queue"] for event in failed) == [
        "canary-async",
        "canary-huge",
        "canary-keyerror",
        "canary-middleware",
        "canary-quoted",
        "canary-sync",
    ]
    assert all(event["message_id"] and "Traceback" in event["exception"] for event in failed)
    (stdlib,) = [event for event in events if event["event"].startswith("app.stdlib_logged")]
    assert (stdlib["level"], stdlib["logger"], stdlib["queue"]) == (
        "error",
        "tests.apps.canary_app",
        "canary-stdlib",
    )
    assert "KeyError: 'missing field'" in stdlib["exception"]


@pytest.mark.process
def test_defect_14_canary_run_console_leaks_nothing() -> None:
    err, body, secret = run_canary_app("console")
    assert (err.count(body), err.count(secret)) == (0, 0)
    events = events_of(err, "console")
    assert max(len(event) for event in events) < EVENT_BOUND
    matches = [CONSOLE_LINE.match(event) for event in events]
    assert None not in matches  # the stdlib record too has the console format
    names = [match.group(2) for match in matches if match]
    assert counted(names) == EXPECTED
    assert sum("Traceback (most recent call last)" in event for event in events) == 7


@pytest.mark.process
def test_canary_run_auto_leaks_nothing() -> None:
    """Issue 28 (3), the third format: `auto` (JSON here, standard error not a terminal);
    exception texts that quote the body (`int(body["canary"])`, a KeyError) included."""
    err, body, secret = run_canary_app("auto")
    assert (err.count(body), err.count(secret)) == (0, 0)
    events = [json.loads(line) for line in err.splitlines()]
    names = [event["event"].split(" ")[0] for event in events]
    assert counted(names) == EXPECTED
    quoted = [event for event in events if event.get("queue") == "canary-quoted"]
    assert any("invalid literal for int()" in event.get("exception", "") for event in quoted)
    assert all(REDACTED in event["exception"] for event in quoted if "exception" in event)
