"""`lease-worker dlq` as a user runs it, against `lease-worker serve-sqs` (real processes):
list, inspect (SQS cannot peek: it says the receive count went up), redrive, tasks, purge's
confirmation; and the embedded backend refused with one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.cli.test_serve_sqs_cli import ROOT, WAIT_S, Endpoint, client, free_port

pytestmark = [pytest.mark.process, pytest.mark.timeout(90)]


@pytest.fixture(scope="module")
def endpoint() -> Iterator[tuple[str, Any]]:
    served = Endpoint("--port", str(free_port()))
    try:
        url = served.event("sqs_endpoint.started")["url"]
        yield url, client(url)
    finally:
        served.stop()


def dlq(url: str, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("LEASE_WORKER_", "AWS_"))},
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "us-east-1",
    }
    return subprocess.run(
        [sys.executable, "-P", "-m", "worker", "dlq", *args, "--endpoint-url", url],
        cwd=ROOT,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        check=False,
    )


def dead_lettered(sqs: Any, name: str) -> tuple[str, str, str]:
    """Queue `name` with one message in its dead-letter queue `name`-dlq."""
    dlq_url = sqs.create_queue(QueueName=f"{name}-dlq")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])
    policy = {"deadLetterTargetArn": arn["Attributes"]["QueueArn"], "maxReceiveCount": 1}
    url = sqs.create_queue(QueueName=name, Attributes={"RedrivePolicy": json.dumps(policy)})[
        "QueueUrl"
    ]
    message_id = sqs.send_message(QueueUrl=url, MessageBody="poison")["MessageId"]
    sqs.receive_message(QueueUrl=url, VisibilityTimeout=0)
    assert "Messages" not in sqs.receive_message(QueueUrl=url)  # moved on this receive
    return url, dlq_url, message_id


def test_list_inspect_redrive_and_tasks(endpoint: tuple[str, Any]) -> None:
    url, sqs = endpoint
    queue_url, _, message_id = dead_lettered(sqs, "orders")

    listed = dlq(url, "list", "--json")
    assert listed.returncode == 0, listed.stderr
    [found] = [q for q in json.loads(listed.stdout) if q["name"] == "orders-dlq"]
    assert (found["sources"], found["visible"]) == (["orders"], 1)

    inspected = dlq(url, "inspect", "orders-dlq")
    assert inspected.returncode == 0, inspected.stderr
    assert "SQS cannot peek" in inspected.stdout and message_id in inspected.stdout
    assert "poison" not in inspected.stdout  # bodies only with --bodies
    with_bodies = dlq(url, "inspect", "orders-dlq", "--bodies", "--json")
    [shown] = json.loads(with_bodies.stdout)["messages"]
    assert shown["body"] == "poison"
    assert shown["receive_count"] == 3  # once in orders, then once for each inspect

    moved = dlq(url, "redrive", "orders-dlq", "--rate", "50")
    assert moved.returncode == 0, moved.stderr
    assert moved.stdout.startswith("move task started: ")
    back = sqs.receive_message(QueueUrl=queue_url, WaitTimeSeconds=5)["Messages"]
    assert [m["Body"] for m in back] == ["poison"] and back[0]["MessageId"] != message_id
    tasks = dlq(url, "tasks", "orders-dlq")
    assert tasks.stdout.startswith("COMPLETED: orders-dlq -> its source, moved 1 of 1")


def test_purge_asks_for_the_name_and_deletes_nothing_without_it(endpoint: tuple[str, Any]) -> None:
    url, sqs = endpoint
    _, dlq_url, _ = dead_lettered(sqs, "invoices")
    refused = dlq(url, "purge", "invoices-dlq", "--confirm", "invoices")
    assert refused.returncode == 2 and "not confirmed" in refused.stderr
    count = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["All"])["Attributes"]
    assert count["ApproximateNumberOfMessages"] == "1"
    assert dlq(url, "purge", "invoices-dlq", "--confirm", "invoices-dlq").returncode == 0


def test_unknown_queue_and_embedded_backend_are_one_line(endpoint: tuple[str, Any]) -> None:
    url, _ = endpoint
    missing = dlq(url, "inspect", "nope")
    assert missing.returncode == 1 and missing.stderr.count("\n") == 1
    assert "lease-worker: error:" in missing.stderr and "Traceback" not in missing.stderr
    embedded = dlq(url, "list", "--backend", "memory")
    assert embedded.returncode == 2 and "serve-sqs" in embedded.stderr
