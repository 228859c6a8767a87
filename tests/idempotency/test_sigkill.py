"""Must-show 3 with real processes: a worker SIGKILLed mid-handler is taken over by another
one visibility timeout and the takeover grace later, not after a fixed long TTL.

Two `lease-worker` processes run `tests.idempotency.sigkill_app` against moto's SQS and a
real redis-server, with 4 s leases. Worker A starts the message's handler (60 s of work)
and is SIGKILLed; worker B, already polling, gets the message once A's last renewal runs
out, finds A's claim stale (A's heartbeat ran out with it), waits out the takeover grace
(A could be alive and cut off by a store outage, holding a completion), takes it over and
completes it. The delay from the kill to B's start is printed (`pytest -s`) and bounded: at
most one visibility and the grace, plus the rounding of one release and a long poll's
wake-up.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import boto3
import pytest
import redis

from tests.idempotency.conftest import RedisServer
from tests.moto_server import MOTO_ACCESS_KEY, MOTO_REGION, MOTO_SECRET_KEY, MotoServer

pytestmark = [pytest.mark.process, pytest.mark.timeout(60)]

ROOT = Path(__file__).resolve().parents[2]
VISIBILITY_S = 4
LEASE_ARGS = ("--visibility-s", "4", "--extension-s", "4", "--renew-margin-s", "2")
#: Two rounded-up seconds of one release (the claim's heartbeat may outlast the lease by a
#: beat's phase) and a second for the long poll and the processes.
SLACK_S = 3.0
#: The takeover grace with these settings: the margin (2 s), a store call's timeout (5 s, the
#: default) and a second.
GRACE_S = 8.0
WAIT_S = 30.0

Spawn = Callable[[str, dict[str, str]], "subprocess.Popen[bytes]"]


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {WAIT_S:.0f} s")
        time.sleep(0.02)


def runs(out: Path) -> list[tuple[str, str, float, int]]:
    """(kind, worker, time, receive count) of each line the handlers wrote."""
    if not out.exists():
        return []
    lines = [line.split() for line in out.read_text().splitlines()]
    return [(kind, who, float(at), int(count)) for kind, who, at, count in lines]


def logged(path: Path, event: str) -> bool:
    return any(
        json.loads(line).get("event") == event
        for line in path.read_text().splitlines()
        if line.startswith("{")
    )


@pytest.fixture
def spawn(tmp_path: Path, moto_server: MotoServer) -> Iterator[Spawn]:
    started: list[subprocess.Popen[bytes]] = []

    def start(worker: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
        command = [
            sys.executable, "-m", "worker", "run", "tests.idempotency.sigkill_app:app",
            "--backend", "sqs", "--endpoint-url", moto_server.endpoint_url,
            "--region", MOTO_REGION, "--log-format", "json", "--log-level", "info", *LEASE_ARGS,
        ]  # fmt: skip
        child_env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "LEASE_"))}
        child_env |= env | {
            "IDEM_APP_WORKER": worker,
            "AWS_ACCESS_KEY_ID": MOTO_ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": MOTO_SECRET_KEY,
            "AWS_CONFIG_FILE": str(tmp_path / "no-aws-config"),
            "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "no-aws-credentials"),
            "AWS_EC2_METADATA_DISABLED": "true",
        }
        with (tmp_path / f"{worker}.log").open("wb") as stderr:
            process = subprocess.Popen(
                command, cwd=ROOT, env=child_env, stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=stderr,
            )  # fmt: skip
        started.append(process)
        return process

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=10)


def test_a_sigkilled_worker_is_taken_over_about_one_visibility_later(
    tmp_path: Path,
    moto_server: MotoServer,
    redis_server: RedisServer,
    spawn: Spawn,
) -> None:
    queue, prefix = f"idem-kill-{uuid.uuid4().hex[:10]}", f"kill-{uuid.uuid4().hex}:"
    out = tmp_path / "runs"
    sqs = boto3.client(
        "sqs",
        endpoint_url=moto_server.endpoint_url,
        region_name=MOTO_REGION,
        aws_access_key_id=MOTO_ACCESS_KEY,
        aws_secret_access_key=MOTO_SECRET_KEY,
    )
    url = sqs.create_queue(QueueName=queue, Attributes={"VisibilityTimeout": str(VISIBILITY_S)})
    env = {"IDEM_APP_QUEUE": queue, "IDEM_APP_OUT": str(out), "IDEM_APP_PREFIX": prefix}
    env["IDEM_APP_REDIS_URL"] = redis_server.url
    a = spawn("a", env | {"IDEM_APP_WORK_S": "60"})
    message_id = sqs.send_message(QueueUrl=url["QueueUrl"], MessageBody='{"n": 1}')["MessageId"]
    wait_until(lambda: [r[1] for r in runs(out)] == ["a"], "worker a starts the handler")
    b = spawn("b", env | {"IDEM_APP_WORK_S": "0.2"})
    wait_until(lambda: logged(tmp_path / "b.log", "worker.started"), "worker b is ready")

    killed_at = time.time()
    a.send_signal(signal.SIGKILL)
    assert a.wait(timeout=10) == -signal.SIGKILL
    wait_until(lambda: ("end", "b") in {(r[0], r[1]) for r in runs(out)}, "worker b completes")

    [(_, _, b_started, b_count)] = [r for r in runs(out) if r[:2] == ("start", "b")]
    delay = b_started - killed_at
    print(f"takeover delay after SIGKILL: {delay:.2f} s; visibility {VISIBILITY_S} s")
    assert GRACE_S < delay <= VISIBILITY_S + GRACE_S + SLACK_S
    assert b_count >= 2
    assert logged(tmp_path / "b.log", "idempotency.took_over")
    stored = redis.Redis.from_url(redis_server.url).get(f"{prefix}key:{queue}:{message_id}")
    assert stored is not None and json.loads(stored)["state"] == "completed"
    b.send_signal(signal.SIGTERM)
    assert b.wait(timeout=20) == 0
