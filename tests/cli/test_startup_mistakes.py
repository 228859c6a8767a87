"""Start-up mistakes a new user makes, with real processes (issue 28, item 4).

Each one is one line on standard error naming the fix, with status 2 for configuration (an
AWS profile, region, endpoint or credentials, an app that does not parse) and 1 for the
queue service (nothing listening at the endpoint). A refused connection says so: at once on
a terminal, and on every retry (with its pause) when no person is watching (a pod).
"""

from __future__ import annotations

import os
import pty
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli.test_cli import APP, ROOT, Run, assert_one_error_line, child_env, lease_worker

pytestmark = pytest.mark.process

#: A worker on any backend (tests.apps.shutdown_app runs on the embedded engine only).
IDLE = "tests.apps.idle_app:app"
SQS = ("--backend", "sqs", "--log-format", "json")
#: Credentials and a region, so that only the mistake under test is left.
AWS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


def refused_url() -> str:
    """An endpoint where nothing listens: port 1 on loopback refuses at once."""
    return "http://127.0.0.1:1"


# -- configuration: status 2, one line naming the fix -----------------------------------


@pytest.mark.parametrize(
    ("variable", "fragments"),
    [
        ("AWS_PROFILE", ["AWS_PROFILE='nope'", "no such profile", "unset AWS_PROFILE"]),
        ("AWS_DEFAULT_PROFILE", ["AWS_DEFAULT_PROFILE='nope'", "no such profile"]),
    ],
)
def test_a_missing_aws_profile_is_one_line(variable: str, fragments: list[str]) -> None:
    # Was a 72-line botocore.exceptions.ProfileNotFound traceback, status 1.
    env = child_env(**AWS, AWS_REGION="us-east-1", **{variable: "nope"})
    run = lease_worker("run", IDLE, *SQS, env=env)
    assert_one_error_line(run, 2, *fragments)


def test_the_profiles_there_are_named(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text("[profile dev]\nregion = us-east-1\n[default]\nregion = us-east-1\n")
    env = child_env(**AWS, AWS_PROFILE="prod", AWS_CONFIG_FILE=str(config))
    run = lease_worker("run", IDLE, *SQS, env=env)
    assert_one_error_line(run, 2, "AWS_PROFILE='prod'", "default, dev")


def test_no_region_names_the_option_and_the_variable_not_a_keyword() -> None:
    run = lease_worker("run", IDLE, *SQS, env=child_env(**AWS))
    line = assert_one_error_line(run, 2, "--region", "AWS_REGION")
    assert "region=" not in line  # a library's keyword argument, not something a CLI user types


@pytest.mark.parametrize(
    ("args", "env", "fragments"),
    [
        (["--region", "us east"], {}, ["--region 'us east'", "e.g. us-east-1"]),
        ([], {"AWS_REGION": "us east"}, ["AWS_REGION='us east'", "e.g. us-east-1"]),
        ([], {"AWS_DEFAULT_REGION": "us east"}, ["AWS_DEFAULT_REGION='us east'"]),
    ],
)
def test_a_malformed_region_names_where_it_came_from(
    args: list[str], env: dict[str, str], fragments: list[str]
) -> None:
    run = lease_worker("run", IDLE, *SQS, *args, env=child_env(**AWS, **env))
    assert_one_error_line(run, 2, *fragments)


@pytest.mark.parametrize(
    ("args", "env", "fragments"),
    [
        (["--endpoint-url", "localhost:9324"], {}, ["--endpoint-url 'localhost:9324'", "http://"]),
        (["--endpoint-url", "http://[::1"], {}, ["--endpoint-url 'http://[::1'"]),
        ([], {"AWS_ENDPOINT_URL": "notaurl"}, ["AWS_ENDPOINT_URL='notaurl'", "http://"]),
        ([], {"AWS_ENDPOINT_URL_SQS": "http://[::1"}, ["AWS_ENDPOINT_URL_SQS='http://[::1'"]),
    ],
)
def test_a_malformed_endpoint_names_where_it_came_from(
    args: list[str], env: dict[str, str], fragments: list[str]
) -> None:
    env = child_env(**AWS, AWS_REGION="us-east-1", **env)
    run = lease_worker("run", IDLE, *SQS, *args, env=env)
    assert_one_error_line(run, 2, *fragments)


def test_half_a_key_pair_is_one_line() -> None:
    env = child_env(AWS_ACCESS_KEY_ID="testing", AWS_REGION="us-east-1")
    run = lease_worker("run", IDLE, *SQS, "--endpoint-url", refused_url(), env=env)
    assert_one_error_line(run, 2, "AWS_SECRET_ACCESS_KEY", "or neither")


def test_no_credentials_at_all_is_configuration() -> None:
    # Was status 1, as if the service had refused them. The endpoint listens (and never
    # answers): the credentials are missing before anything is sent.
    env = child_env(AWS_REGION="us-east-1", AWS_EC2_METADATA_DISABLED="true")
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        url = f"http://127.0.0.1:{listening.getsockname()[1]}"
        run = lease_worker("run", IDLE, *SQS, "--endpoint-url", url, env=env)
    assert_one_error_line(run, 2, "no AWS credentials", "AWS_ACCESS_KEY_ID", "AWS_PROFILE")


def test_an_aws_config_file_that_does_not_parse_is_one_line(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text("[default\nregion = us-east-1\n")
    env = child_env(**AWS, AWS_CONFIG_FILE=str(config))
    run = lease_worker("run", IDLE, *SQS, env=env)
    assert_one_error_line(run, 2, str(config), "AWS_CONFIG_FILE")


def test_a_missing_ca_bundle_is_one_line(tmp_path: Path) -> None:
    # botocore failed every call on it, and start-up retried for a minute.
    missing = str(tmp_path / "no-such-bundle.pem")
    env = child_env(**AWS, AWS_REGION="us-east-1", AWS_CA_BUNDLE=missing)
    run = lease_worker("run", IDLE, *SQS, env=env)
    assert_one_error_line(run, 2, f"AWS_CA_BUNDLE={missing!r}", "no such file")


def test_any_other_aws_setting_botocore_refuses_is_one_line() -> None:
    env = child_env(**AWS, AWS_REGION="us-east-1", AWS_DEFAULTS_MODE="weird")
    run = lease_worker("run", IDLE, *SQS, env=env)
    assert_one_error_line(run, 2, "AWS configuration", "weird")


def test_an_app_with_a_syntax_error_is_one_line_with_its_place(tmp_path: Path) -> None:
    # Was 25 lines of traceback through the loader and importlib.
    (tmp_path / "broken_app.py").write_text("from worker import Worker\n\napp = Worker(\n")
    done = subprocess.run(
        [sys.executable, "-P", "-m", "worker", "run", "broken_app:app"],
        cwd=tmp_path,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    run = Run(done.returncode, done.stdout, done.stderr)
    assert_one_error_line(run, 2, "APP='broken_app:app'", "broken_app.py", "line 3", "SyntaxError")


# -- the service: status 1; a refused connection says so --------------------------------


def on_a_terminal(*args: str, env: dict[str, str]) -> tuple[Run, float]:
    """`lease-worker` with standard input and output on a pseudo-terminal, as a person runs
    it; standard error stays a pipe, to be read. Returns the run and how long it took."""
    controller, terminal = pty.openpty()
    started = time.monotonic()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "worker", *args],
            cwd=ROOT,
            env=env,
            stdin=terminal,
            stdout=terminal,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        os.close(terminal)
        os.close(controller)
    return Run(done.returncode, "", done.stderr), time.monotonic() - started


def test_a_refused_connection_on_a_terminal_fails_in_seconds() -> None:
    # Was 65 s of retries, then "no answer in time".
    env = child_env(**AWS, AWS_REGION="us-east-1")
    run, took_s = on_a_terminal("run", IDLE, *SQS, "--endpoint-url", refused_url(), env=env)
    assert_one_error_line(run, 1, "connection refused", refused_url(), "--endpoint-url")
    assert "no answer in time" not in run.stderr
    assert took_s < 10


def test_a_refused_connection_on_smq_on_a_terminal_fails_in_seconds() -> None:
    env = child_env(ALIBABA_CLOUD_ACCESS_KEY_ID="a", ALIBABA_CLOUD_ACCESS_KEY_SECRET="b")
    args = ("run", IDLE, "--backend", "smq", "--endpoint-url", refused_url())
    run, took_s = on_a_terminal(*args, env=env)
    assert_one_error_line(run, 1, "connection refused", refused_url())
    assert took_s < 10


def test_a_refused_connection_in_a_pod_is_retried_saying_so() -> None:
    # No terminal: the service may be starting beside the worker. Start-up retries for
    # 12 call timeouts (3 s here), one warning a retry with its pause, then one line.
    env = child_env(**AWS, AWS_REGION="us-east-1", SHUTDOWN_APP_CALL_TIMEOUT_S="0.25")
    started = time.monotonic()
    run = lease_worker("run", APP, *SQS, "--endpoint-url", refused_url(), env=env)
    took_s = time.monotonic() - started
    retries = [event for event in run.events() if event["event"] == "queue_service.retrying"]
    assert [event["retry_in_s"] for event in retries] == [0.5, 1.0], run.stderr
    for number, event in enumerate(retries, start=1):
        assert event["level"] == "warning"
        assert (event["reason"], event["endpoint"]) == ("connection refused", refused_url())
        assert event["attempt"] == number
    assert_one_error_line(run, 1, "connection refused", "after 3 attempts")
    assert "no answer in time" not in run.stderr
    assert took_s < 15


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_ends_the_retries_with_one_line(signum: int) -> None:
    env = child_env(**AWS, AWS_REGION="us-east-1")
    command = [sys.executable, "-m", "worker", "run", IDLE, *SQS, "--endpoint-url", refused_url()]
    proc = subprocess.Popen(
        command,
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        lines = []
        for line in proc.stderr:
            lines.append(line)
            if '"queue_service.retrying"' in line:
                proc.send_signal(signum)
                break
        stderr = "".join(lines) + proc.communicate(timeout=30)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    run = Run(proc.returncode, "", stderr)
    assert_one_error_line(run, 1, "connection refused", refused_url())


def test_dlq_on_a_refused_endpoint_fails_at_once() -> None:
    env = child_env(**AWS, AWS_REGION="us-east-1")
    started = time.monotonic()
    run = lease_worker("dlq", "list", "--endpoint-url", refused_url(), env=env)
    assert_one_error_line(run, 1, "connection refused", refused_url())
    assert time.monotonic() - started < 10
