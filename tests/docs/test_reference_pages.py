"""The generated reference pages are current, and their generators read the code right.

`python -m docs.gen` writes docs/reference/{cli,config,logs,metrics}.md; a change to an
option, a setting, a metric or a log call without rerunning it fails here, as a stale
deploy/grafana/lease-worker.json fails tests/ops.
"""

from __future__ import annotations

import argparse
import re

import anyio
import pytest
import structlog
from structlog.testing import capture_logs

from docs.gen import logs_page
from docs.gen.__main__ import PAGES, REFERENCE, stale
from docs.gen.cli_page import commands
from docs.gen.environment import clean_environment
from tests.docs.blocks import ROOT
from worker import LeaseConfig, Message, Retry, ShutdownConfig, Worker, WorkerConfig
from worker.cli.main import build_parser
from worker.testing import run_worker


def test_the_generated_pages_are_current() -> None:
    assert stale() == [], "run python -m docs.gen and commit docs/reference/"


def _row(page: str, first_cell: str) -> list[str]:
    text = (REFERENCE / page).read_text()
    [line] = [line for line in text.splitlines() if line.startswith(f"| {first_cell} |")]
    return [cell.strip() for cell in line.strip("|").split(" | ")]


def test_the_cli_page_names_the_environment_variable_of_exactly_the_options_that_read_one() -> None:
    text = PAGES["cli.md"]()
    start, end = text.index("## `lease-worker serve-sqs`"), text.index("## `lease-worker dlq`")
    rows = {
        line.split(" | ")[0]: line
        for line in text[start:end].splitlines()
        if line.startswith("| `-")
    }
    assert "LEASE_WORKER" not in rows["| `--port`"]  # a plain argparse option: no variable
    assert "`LEASE_WORKER_LOG_LEVEL`" in rows["| `--log-level`"]
    run = text[text.index("## `lease-worker run`") : text.index("## `lease-worker serve-sqs`")]
    assert "| `--adaptive` | switch | `LEASE_WORKER_ADAPTIVE` |" in run
    assert "| `--processes` | `N` | `LEASE_WORKER_PROCESSES` | `1` |" in run


def test_the_config_page_quotes_the_rules_the_classes_enforce() -> None:
    visibility = _row("config.md", "`visibility_s`")
    assert visibility[2:5] == [
        "`30`",
        "must be a whole number of seconds from 1 to 43200",
        "`--visibility-s`",
    ]
    wait = _row("config.md", "`wait_s`")
    assert wait[3] == "must be a whole number >= 0; SQS: at most 20; SMQ: at most 30"
    assert _row("config.md", "`extension_s`")[2] == "worked out (`30` by default)"


def test_the_log_scan_reads_every_log_call() -> None:
    scan = logs_page.scan()
    assert scan.unresolved == []
    assert set(logs_page.NEVER_LOGGED) <= set(scan.events)  # the exclusions are not stale
    assert {"lease.lost", "settle.delete_failed", "sqs_endpoint.started"} <= set(scan.events)


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_every_event_a_running_worker_logs_is_on_the_logs_page() -> None:
    app = Worker(
        WorkerConfig(
            wait_s=1,
            lease=LeaseConfig(visibility_s=6),
            shutdown=ShutdownConfig(grace_s=5, flush_timeout_s=2),
        )
    )

    @app.handler("orders", on_error="backoff")
    async def handle(message: Message) -> None:
        if message.body["n"] == 0:
            raise Retry(after_s=30)
        if message.body["n"] == 1:
            raise ValueError("a failure")
        await anyio.sleep(20)  # renewed three times

    # Debug lines too, whatever level an earlier test configured (a filtering wrapper
    # class drops them before capture_logs sees them); the loggers are made after this.
    saved = structlog.get_config()
    structlog.reset_defaults()
    try:
        with capture_logs() as logs:
            async with run_worker(app) as harness:
                for n in range(3):
                    await harness.send("orders", {"n": n})
                with anyio.fail_after(60):
                    await harness.wait_for_handled(3)
    finally:
        structlog.configure(**saved)
    seen = {entry["event"] for entry in logs}
    assert {"worker.started", "handler.retry", "handler.failed", "shutdown.complete"} <= seen
    assert "lease.renewed" in seen
    assert seen - set(logs_page.scan().events) == set()


def test_every_metric_the_dashboard_and_the_alerts_query_is_on_the_metrics_page() -> None:
    page = (REFERENCE / "metrics.md").read_text()
    listed = set(re.findall(r"^\| `(lease_worker_\w+)`", page, re.MULTILINE))
    stems = {re.sub(r"_(total|bucket|sum|count)$", "", name) for name in listed}
    for source in ("deploy/prometheus/alerts.yaml", "deploy/grafana/lease-worker.json"):
        # Not recorded series (`level:lease_worker_...:operation`): the rules make those.
        used = set(re.findall(r"(?<![:\w])lease_worker_\w+", (ROOT / source).read_text()))
        unknown = {n for n in used if re.sub(r"_(total|bucket|sum|count)$", "", n) not in stems}
        assert unknown == set(), source


def _said_and_real_defaults() -> list[tuple[str, str, str, object]]:
    """(command, option, the default its help states, the parser's default), where both
    exist and disagree: the CLI page shows both, and one of them would be false."""
    with clean_environment():
        parser = build_parser()
    found = []
    for command in commands(parser):
        for action in command.parser._actions:
            said = re.search(r"\(default:? ([^);]+)", action.help or "")
            if said is None or action.default in (None, argparse.SUPPRESS):
                continue
            value = re.split(r"[:,]", said.group(1))[0].strip()
            if not _same(value, action.default):
                found.append((command.name, action.option_strings[-1], value, action.default))
    return found


def _same(said: str, default: object) -> bool:
    try:
        return float(said) == float(str(default))
    except ValueError:
        return said == str(default)


def test_every_default_an_options_help_states_is_the_parsers_default() -> None:
    assert _said_and_real_defaults() == []
