"""Configuration that used to be silently wrong (issue 28, item 5), with real processes
where it is a process's behaviour: a misspelt `LEASE_WORKER_*` variable, a bad value from
the environment, an abbreviated option."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cli.test_cli import APP, Run, assert_usage_error, child_env, lease_worker
from tests.cli.test_cli import run_app as run_app_polling_20_s
from worker.cli.main import build_parser
from worker.cli.processes import INDEX_VARIABLE

pytestmark = pytest.mark.process


def run_app(tmp_path: Path, *args: str, **env: str) -> tuple[Run, dict[str, Any]]:
    """`run_app` with 1 s long polls: a shutdown waits for the poll in flight."""
    return run_app_polling_20_s(tmp_path, *args, SHUTDOWN_APP_WAIT_S="1", **env)


def unknown_warnings(run: Run) -> list[dict[str, Any]]:
    return [event for event in run.events() if event["event"] == "config.unknown_variables"]


# -- a variable lease-worker does not read is named, once -------------------------------


def test_a_misspelt_variable_is_named_with_the_closest_known_name(tmp_path: Path) -> None:
    run, report = run_app(tmp_path, "--log-format", "json", LEASE_WORKER_MAX_INFLIGHT="3")
    [warning] = unknown_warnings(run)
    assert warning["level"] == "warning"
    assert warning["variables"] == ["LEASE_WORKER_MAX_INFLIGHT"]
    suggestion = "LEASE_WORKER_MAX_INFLIGHT (did you mean LEASE_WORKER_MAX_IN_FLIGHT?)"
    assert suggestion in warning["detail"]
    assert report["config"]["max_in_flight"] == 6  # the app's own: the variable did nothing


def test_every_unknown_variable_is_in_one_warning(tmp_path: Path) -> None:
    run, _ = run_app(
        tmp_path,
        "--log-format",
        "json",
        LEASE_WORKER_GRACE="5",
        LEASE_WORKER_VISIBILITY="60",
        LEASE_WORKER_ZZZ="1",
    )
    [warning] = unknown_warnings(run)
    assert warning["variables"] == [
        "LEASE_WORKER_GRACE",
        "LEASE_WORKER_VISIBILITY",
        "LEASE_WORKER_ZZZ",
    ]
    detail = warning["detail"]
    assert "LEASE_WORKER_GRACE (did you mean LEASE_WORKER_GRACE_S?)" in detail
    assert "LEASE_WORKER_VISIBILITY (did you mean LEASE_WORKER_VISIBILITY_S?)" in detail
    assert "LEASE_WORKER_ZZZ," not in detail and "LEASE_WORKER_ZZZ (" not in detail


def test_known_variables_give_no_warning(tmp_path: Path) -> None:
    run, _ = run_app(
        tmp_path,
        "--log-format",
        "json",
        LEASE_WORKER_GRACE_S="5",
        LEASE_WORKER_CONSOLE_TOKEN="t",
        LEASE_WORKER_JSON="json",
        LEASE_WORKER_LOG_LEVEL="info",
    )
    assert unknown_warnings(run) == []


def test_the_children_of_processes_do_not_repeat_the_warning(tmp_path: Path) -> None:
    env = {INDEX_VARIABLE: "0", "LEASE_WORKER_MAX_INFLIGHT": "3"}
    run, _ = run_app(tmp_path, "--log-format", "json", **env)
    assert unknown_warnings(run) == []


def test_other_commands_warn_too() -> None:
    env = child_env(LEASE_WORKER_REGOIN="us-east-1")
    run = lease_worker("dlq", "list", "--backend", "memory", env=env)
    assert run.returncode == 2  # dlq refuses the embedded engine; the warning came first
    assert "LEASE_WORKER_REGOIN (did you mean LEASE_WORKER_REGION?)" in run.stderr


# -- a bad value from the environment names the variable -------------------------------


@pytest.mark.parametrize(
    ("variable", "value", "error"),
    [
        ("MAX_IN_FLIGHT", "abc", "LEASE_WORKER_MAX_IN_FLIGHT='abc': expected an integer"),
        ("VISIBILITY_S", "1.5", "LEASE_WORKER_VISIBILITY_S='1.5': expected an integer"),
        ("GRACE_S", "soon", "LEASE_WORKER_GRACE_S='soon': expected a number"),
        ("OPS_PORT", "", "LEASE_WORKER_OPS_PORT='': expected an integer"),
    ],
)
def test_a_bad_value_from_the_environment_names_the_variable(
    variable: str, value: str, error: str
) -> None:
    run = lease_worker("run", APP, env=child_env(**{f"LEASE_WORKER_{variable}": value}))
    assert_usage_error(run, error)
    assert "argument --" not in run.stderr  # the flag was never typed


def test_a_bad_value_on_the_command_line_still_names_the_option() -> None:
    run = lease_worker("run", APP, "--max-in-flight", "abc")
    assert_usage_error(run, "argument --max-in-flight: invalid int value: 'abc'")


def test_the_command_line_overrides_a_bad_environment_value(tmp_path: Path) -> None:
    _, report = run_app(tmp_path, "--max-in-flight", "4", LEASE_WORKER_MAX_IN_FLIGHT="abc")
    assert report["config"]["max_in_flight"] == 4


def test_a_good_value_from_the_environment_still_applies(tmp_path: Path) -> None:
    _, report = run_app(tmp_path, LEASE_WORKER_MAX_IN_FLIGHT="7", LEASE_WORKER_GRACE_S="2.5")
    assert (report["config"]["max_in_flight"], report["config"]["grace_s"]) == (7, 2.5)


# -- no abbreviated options ------------------------------------------------------------


def test_an_abbreviated_option_is_refused() -> None:
    # argparse took `--visib 30` for `--visibility-s 30`: a typo could pick another option.
    assert_usage_error(lease_worker("run", APP, "--visib", "30"), "unrecognized arguments")


def test_an_abbreviated_option_of_a_nested_command_is_refused() -> None:
    run = lease_worker("dlq", "inspect", "jobs", "--bod")
    assert_usage_error(run, "unrecognized arguments: --bod")


def _parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                yield from _parsers(child)


def test_no_parser_takes_abbreviations() -> None:
    parsers = list(_parsers(build_parser()))
    assert len(parsers) > 10  # the commands and dlq's actions
    assert [parser.prog for parser in parsers if parser.allow_abbrev] == []
