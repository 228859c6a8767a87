"""`serve-sqs --persist PATH` as real processes: state survives a stop and a crash; every
answered change is journaled before its answer, so a SIGKILL right after it loses nothing;
handles issued after a restart never repeat earlier ones; a torn journal tail is ignored; a
file that does not read stops the start."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config

from backends.memory import MemoryEngine
from backends.serve.sqs.journal import read as read_journal
from backends.serve.sqs.persist import save_snapshot
from tests.backends.serve.test_bad_requests import ROOT, WAIT_S, free_port
from tests.json_log import JsonLog
from worker.clock import ManualClock

pytestmark = pytest.mark.process


class Serving:
    def __init__(self, state: Path, *extra: str) -> None:
        self.port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("LEASE_WORKER_")}
        command = [sys.executable, "-m", "worker", "serve-sqs", "--log-format", "json"]
        self.proc = subprocess.Popen(
            [*command, "--port", str(self.port), "--persist", str(state), *extra],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.log = JsonLog(self.proc, WAIT_S)
        self.url = f"http://127.0.0.1:{self.port}"

    def started(self) -> Any:
        self.log.next(lambda e: e.get("event") == "sqs_endpoint.started", "the start")
        return boto3.client(
            "sqs",
            endpoint_url=self.url,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            config=Config(retries={"total_max_attempts": 1}),
        )

    def stop(self, signum: int = signal.SIGTERM) -> int:
        self.proc.send_signal(signum)
        return self.proc.wait(timeout=WAIT_S)


@pytest.fixture
def servers() -> Iterator[list[Serving]]:
    started: list[Serving] = []
    yield started
    for server in started:
        if server.proc.poll() is None:
            server.proc.kill()
            server.proc.wait(timeout=WAIT_S)


def test_state_survives_a_stop_and_a_crash(tmp_path: Path, servers: list[Serving]) -> None:
    state = tmp_path / "state.json"
    servers.append(Serving(state, "--queue", "jobs"))
    sqs = servers[-1].started()
    url = sqs.get_queue_url(QueueName="jobs")["QueueUrl"]
    sqs.tag_queue(QueueUrl=url, Tags={"team": "a"})
    sent = sqs.send_message(QueueUrl=url, MessageBody="kept")["MessageId"]
    assert servers[-1].stop() == 0

    servers.append(Serving(state, "--queue", "jobs", "--persist-every", "0.1"))
    sqs = servers[-1].started()
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"team": "a"}
    [message] = sqs.receive_message(QueueUrl=url)["Messages"]
    assert (message["MessageId"], message["Body"]) == (sent, "kept")
    sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    second = sqs.send_message(QueueUrl=url, MessageBody="after")["MessageId"]
    deadline = time.monotonic() + WAIT_S
    while second not in state.read_text():  # the periodic write, not the one at stop
        assert time.monotonic() < deadline, "no periodic write"
        time.sleep(0.05)
    servers[-1].stop(signal.SIGKILL)

    servers.append(Serving(state))
    sqs = servers[-1].started()
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert [m["MessageId"] for m in got] == [second]
    assert not list(tmp_path.glob(".*.tmp"))  # atomic writes leave no temporary behind


def _start_refused(state: Path) -> subprocess.CompletedProcess[str]:
    """`serve-sqs --persist state` run to its end: for starts that must be refused."""
    return subprocess.run(
        [sys.executable, "-m", "worker", "serve-sqs", "--port", "0", "--persist", str(state)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        check=False,
    )


def test_a_snapshot_that_does_not_read_stops_the_start(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    state.write_text('{"format": "lease-worker-engine/1", "queues": [{}]}')
    done = _start_refused(state)
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("lease-worker: error: ") and str(state) in line


def test_the_snapshot_is_readable_by_its_owner_only(tmp_path: Path) -> None:
    # It holds every body: once it was written with the umask's 0644, for any local user.
    old_umask = os.umask(0o022)
    try:
        path = tmp_path / "state.json"
        save_snapshot(MemoryEngine(ManualClock()), path)
    finally:
        os.umask(old_umask)
    assert path.stat().st_mode & 0o777 == 0o600


def test_a_sigkill_right_after_the_answers_loses_nothing_and_handles_never_repeat(
    tmp_path: Path, servers: list[Serving]
) -> None:
    # Before the journal: everything after the last periodic snapshot was lost (here, with
    # an hour between snapshots, every send), and the restored handle counter handed out
    # the same handles again.
    state = tmp_path / "state.json"
    servers.append(Serving(state, "--queue", "jobs", "--persist-every", "3600"))
    sqs = servers[-1].started()
    url = sqs.get_queue_url(QueueName="jobs")["QueueUrl"]
    entries = [{"Id": str(i), "MessageBody": f"m{i}"} for i in range(10)]
    sent = sqs.send_message_batch(QueueUrl=url, Entries=entries)
    assert len(sent["Successful"]) == 10
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"VisibilityTimeout": "1"})
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=4, VisibilityTimeout=600)
    [deleted, extended, *held] = got["Messages"]
    sqs.delete_message(QueueUrl=url, ReceiptHandle=deleted["ReceiptHandle"])
    sqs.change_message_visibility(
        QueueUrl=url, ReceiptHandle=extended["ReceiptHandle"], VisibilityTimeout=0
    )
    servers[-1].stop(signal.SIGKILL)  # right after the last answer

    servers.append(Serving(state))
    sqs = servers[-1].started()
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert attributes["VisibilityTimeout"] == "1"
    assert attributes["ApproximateNumberOfMessagesNotVisible"] == "2"  # `held`, in flight
    again = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    ids = {m["MessageId"] for m in again}
    assert len(again) == 7 and deleted["MessageId"] not in ids and extended["MessageId"] in ids
    assert {m["MessageId"] for m in held}.isdisjoint(ids)
    # The holders from before the crash still hold theirs: their handles are the latest.
    for message in held:
        sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    before = {m["ReceiptHandle"] for m in got["Messages"]}
    assert before.isdisjoint(m["ReceiptHandle"] for m in again)
    assert (
        sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"][
            "ApproximateNumberOfMessagesNotVisible"
        ]
        == "7"
    )


def test_a_torn_journal_tail_is_ignored(tmp_path: Path, servers: list[Serving]) -> None:
    state = tmp_path / "state.json"
    servers.append(Serving(state, "--queue", "jobs", "--persist-every", "3600"))
    sqs = servers[-1].started()
    url = sqs.get_queue_url(QueueName="jobs")["QueueUrl"]
    kept = sqs.send_message(QueueUrl=url, MessageBody="kept")["MessageId"]
    servers[-1].stop(signal.SIGKILL)
    journal = tmp_path / "state.json.journal"
    with journal.open("ab") as file:  # a write cut short by the crash
        file.write(b'0badc0de [2,{"queues":{"jobs":{"put":[')

    servers.append(Serving(state))
    sqs = servers[-1].started()
    [torn] = [e for e in servers[-1].log.events if e["event"] == "sqs_endpoint.journal_torn"]
    assert torn["bytes"] == 38
    assert journal.stat().st_size == 0  # folded into the snapshot at start, the tail gone
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert [m["MessageId"] for m in got] == [kept]
    after = read_journal(journal)  # new records follow whole records, not the torn tail
    assert (len(after.records), after.ignored_bytes) == (1, 0)


def test_a_second_server_on_the_same_path_refuses_to_start(
    tmp_path: Path, servers: list[Serving]
) -> None:
    # A restart overlap: both appended to and emptied the same journal.
    state = tmp_path / "state.json"
    servers.append(Serving(state, "--queue", "jobs"))
    sqs = servers[-1].started()
    url = sqs.get_queue_url(QueueName="jobs")["QueueUrl"]
    sent = sqs.send_message(QueueUrl=url, MessageBody="first's")["MessageId"]
    second = _start_refused(state)
    assert second.returncode == 1
    pid = servers[0].proc.pid
    assert second.stderr.strip().splitlines() == [
        f"lease-worker: error: --persist {state}: in use by another process (pid {pid}) "
        f"holding {state}.lock"
    ]
    [got] = sqs.receive_message(QueueUrl=url)["Messages"]  # the first serves on, untouched
    assert got["MessageId"] == sent
    assert servers[0].stop() == 0


def test_a_persist_file_that_cannot_be_written_says_so(tmp_path: Path) -> None:
    # It said "cannot serve on 127.0.0.1:0", as if the port were the problem.
    state = tmp_path / "missing" / "state.json"
    done = _start_refused(state)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"lease-worker: error: --persist {state}: No such file or directory: {state}.lock"
    ]


def test_a_sigkill_during_a_fold_loses_nothing(tmp_path: Path, servers: list[Serving]) -> None:
    # Folds back to back (a few MB of state each), sends answered while they write; killed
    # while a fold's journal segment is on disk, mid-fold.
    state = tmp_path / "state.json"
    servers.append(Serving(state, "--queue", "jobs", "--persist-every", "0.01"))
    sqs = servers[-1].started()
    url = sqs.get_queue_url(QueueName="jobs")["QueueUrl"]
    sent = {
        sqs.send_message(QueueUrl=url, MessageBody=f"{i:03d}" + "x" * 200_000)["MessageId"]
        for i in range(20)
    }
    deadline = time.monotonic() + WAIT_S
    while not list(tmp_path.glob("state.json.journal.*")):
        assert time.monotonic() < deadline, "no fold seen"
        sent.add(sqs.send_message(QueueUrl=url, MessageBody="small")["MessageId"])
    servers[-1].stop(signal.SIGKILL)

    servers.append(Serving(state))
    sqs = servers[-1].started()
    got: set[str] = set()
    while batch := sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages"):
        got.update(m["MessageId"] for m in batch)
    assert got == sent
