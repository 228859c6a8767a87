"""`lease-worker run --loop uvloop --sqs-client lean`: a real worker process on uvloop with the
lean SQS path, against our SQS endpoint (in a thread of this process); and the usage errors of
both options."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import boto3
import pytest

from backends.serve.sqs.endpoint import sqs_endpoint_in_thread
from tests.cli.uvloop_app import QUEUE
from worker.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
MESSAGES = 3
WAIT_S = 30.0


def _stats(url: str) -> dict[str, int]:
    with urllib.request.urlopen(f"{url}/_stats", timeout=5) as answer:
        requests: dict[str, int] = json.loads(answer.read())["requests"]
    return requests


@pytest.mark.process
@pytest.mark.timeout(60)
def test_a_worker_on_uvloop_with_the_lean_client_handles_and_renews() -> None:
    with sqs_endpoint_in_thread() as endpoint:
        sqs = boto3.client(
            "sqs",
            endpoint_url=endpoint.url,
            region_name="us-east-1",
            aws_access_key_id="x",
            aws_secret_access_key="x",
        )
        url = sqs.create_queue(QueueName=QUEUE)["QueueUrl"]
        sent = {
            sqs.send_message(QueueUrl=url, MessageBody=f"m{i}")["MessageId"]
            for i in range(MESSAGES)
        }
        env = {k: v for k, v in os.environ.items() if not k.startswith("LEASE_WORKER_")}
        env.update(AWS_ACCESS_KEY_ID="x", AWS_SECRET_ACCESS_KEY="x", PYTHONUNBUFFERED="1")
        proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "worker", "run", "tests.cli.uvloop_app:app"),
                *("--backend", "sqs", "--endpoint-url", endpoint.url, "--region", "us-east-1"),
                *("--loop", "uvloop", "--sqs-client", "lean", "--log-level", "warning"),
            ],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            assert proc.stdout is not None
            first = proc.stdout.readline().strip()
            handled = [proc.stdout.readline().split()[-1] for _ in range(MESSAGES)]
        finally:
            proc.terminate()
            status = proc.wait(timeout=WAIT_S)
        stats = _stats(endpoint.url)
        attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]

    assert first == "loop=uvloop.Loop client=lean"
    assert sorted(handled) == sorted(sent)
    assert status == 0
    # Each lease outlived its 2 s visibility: renewed (in batches) at least once, and no
    # message came back (a lapse would show a second receive of it).
    assert stats["ChangeMessageVisibilityBatch"] >= 1
    assert stats["DeleteMessageBatch"] >= 1
    assert attributes["ApproximateNumberOfMessages"] == "0"
    assert attributes["ApproximateNumberOfMessagesNotVisible"] == "0"


def test_loop_uvloop_without_uvloop_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # as if it were not installed
    status = main(["run", "tests.apps.idle_app:app", "--loop", "uvloop"])
    assert status == 2
    assert capsys.readouterr().err == (
        "lease-worker: error: --loop uvloop: uvloop is not installed "
        "(pip install 'lease-worker[fast]')\n"
    )


def test_sqs_client_is_refused_on_the_embedded_engine(capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["run", "tests.apps.idle_app:app", "--sqs-client", "lean"])
    assert status == 2
    assert capsys.readouterr().err == (
        "lease-worker: error: --sqs-client: not used by --backend memory (the embedded engine)\n"
    )


def test_sqs_client_from_the_environment_is_checked(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LEASE_WORKER_SQS_CLIENT", "fast")
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "tests.apps.idle_app:app", "--backend", "sqs"])
    assert exit_info.value.code == 2
    assert "LEASE_WORKER_SQS_CLIENT='fast': choose from botocore, lean" in capsys.readouterr().err
