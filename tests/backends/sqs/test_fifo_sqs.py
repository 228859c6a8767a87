"""FIFO groups on moto's server, through `SqsBackend`, in real time.

The worker-level FIFO guarantees that `tests/test_fifo_and_duplicates.py` checks on the
in-memory engine, held here against a real SQS API (moto): the messages of one group run in
the order sent, one at a time; groups run side by side; when a message of a group does not
succeed, the later messages of that group already received are released at once (visibility
0), not run, so the group comes back in its order. Handlers take a fraction of a second.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import anyio
import pytest

from backends.sqs import SqsBackend, SqsSettings
from tests.moto_server import MOTO_ACCESS_KEY, MOTO_REGION, MOTO_SECRET_KEY, MotoServer
from worker import LeaseConfig, Message, Outcome, OutgoingMessage, Worker, WorkerConfig
from worker.core.settlement import Action
from worker.testing import Handled, run_worker
from worker.types import QueueSpec

pytestmark = pytest.mark.asyncio

LEASE = LeaseConfig(visibility_s=10, extension_s=10, renew_margin_s=4)
CONFIG = WorkerConfig(lease=LEASE, max_in_flight=10, wait_s=2)
WORK_S = 0.3
#: Bound on each test's wait for its handlers: a few seconds of work, with ample room.
WAIT_S = 30.0


@pytest.fixture
def moto(moto_server: MotoServer) -> MotoServer:
    return moto_server


@asynccontextmanager
async def sqs(moto: MotoServer) -> AsyncIterator[SqsBackend]:
    settings = SqsSettings(
        region=MOTO_REGION,
        endpoint_url=moto.endpoint_url,
        access_key_id=MOTO_ACCESS_KEY,
        secret_access_key=MOTO_SECRET_KEY,
        max_attempts=2,
        connect_timeout_s=2.0,
        read_timeout_s=25.0,
    )
    backend = await SqsBackend.connect(settings)
    try:
        yield backend
    finally:
        await backend.aclose()


async def _fifo_queue(backend: SqsBackend, groups: dict[str, int]) -> str:
    """A new FIFO queue holding `count` messages per group, the groups interleaved."""
    queue = f"fifo-{uuid.uuid4().hex[:12]}.fifo"
    await backend.create_queue(QueueSpec(queue, visibility_timeout_s=LEASE.visibility_s))
    longest = max(groups.values())
    messages = [
        OutgoingMessage(
            entry_id=f"{group}{n}",
            body=json.dumps({"group": group, "n": n}),
            group_id=group,
            deduplication_id=f"{group}-{n}",
        )
        for n in range(1, longest + 1)
        for group, count in groups.items()
        if n <= count
    ]
    for start in range(0, len(messages), 10):
        result = await backend.send(queue, messages[start : start + 10])
        assert not result.failed, result.failed
    return queue


@dataclass(frozen=True, slots=True)
class Run:
    group: str
    n: int
    receive_count: int
    started: float
    ended: float


async def _assert_empty(backend: SqsBackend, queue: str) -> None:
    info = await backend.queue_info(queue)
    assert (info.approximate_visible, info.approximate_in_flight) == (0, 0), info


async def test_groups_run_in_order_one_at_a_time_and_side_by_side(moto: MotoServer) -> None:
    app = Worker(CONFIG)
    running: Counter[str] = Counter()
    most: Counter[str] = Counter()
    runs: list[Run] = []
    groups = {"a": 4, "b": 4, "c": 4}

    async with sqs(moto) as backend:
        queue = await _fifo_queue(backend, groups)

        @app.handler(queue)
        async def job(message: Message) -> None:
            group, n = message.body["group"], message.body["n"]
            running[group] += 1
            most[group] = max(most[group], running[group])
            started = anyio.current_time()
            await anyio.sleep(WORK_S)
            running[group] -= 1
            runs.append(Run(group, n, message.receive_count, started, anyio.current_time()))

        began = anyio.current_time()
        async with run_worker(app, backend=backend, create_queues=False) as harness:
            with anyio.fail_after(WAIT_S):
                records = await harness.wait_for_handled(12)
                await harness.wait_until_idle()
            # Handled, not stopped: a stop waits for the long poll on the wire (issue 27).
            took = anyio.current_time() - began
        await _assert_empty(backend, queue)

    print(f"\nFIFO on moto: 3 groups x 4 messages in {took:.2f} s (each handler {WORK_S} s)")
    assert [r.outcome for r in records] == [Outcome.SUCCEEDED] * 12
    for group in groups:
        assert [run.n for run in runs if run.group == group] == [1, 2, 3, 4]
    assert most == Counter(dict.fromkeys(groups, 1))
    assert all(run.receive_count == 1 for run in runs), "a message was delivered twice"
    # Side by side: every group's first message started before any group's first one ended.
    firsts = [run for run in runs if run.n == 1]
    assert max(run.started for run in firsts) < min(run.ended for run in firsts)
    # So the whole took about a group's length, not the sum of all three.
    assert took < 3 * 4 * WORK_S


async def test_a_failure_releases_the_rest_of_its_group_so_order_is_kept(
    moto: MotoServer,
) -> None:
    app = Worker(CONFIG)
    attempts: list[tuple[str, int, int]] = []
    failed_once: set[tuple[str, int]] = set()

    async with sqs(moto) as backend:
        queue = await _fifo_queue(backend, {"a": 4, "b": 3})

        @app.handler(queue, on_error="release")
        async def job(message: Message) -> None:
            group, n = message.body["group"], message.body["n"]
            attempts.append((group, n, message.receive_count))
            await anyio.sleep(WORK_S)
            if (group, n) == ("a", 2) and (group, n) not in failed_once:
                failed_once.add((group, n))
                raise RuntimeError("a2 fails once")

        async with run_worker(app, backend=backend, create_queues=False) as harness:
            with anyio.fail_after(WAIT_S):
                # 7 successes + a2's failure + a3 and a4 released unrun.
                records = await harness.wait_for_handled(10)
                await harness.wait_until_idle()
        await _assert_empty(backend, queue)

    outcomes = Counter(r.outcome for r in records)
    assert outcomes == Counter({Outcome.SUCCEEDED: 7, Outcome.FAILED: 1, Outcome.SKIPPED: 2})
    a_runs = [(n, count) for group, n, count in attempts if group == "a"]
    # a3 and a4 were not run before a2 succeeded; then a2, a3, a4 again, in order.
    assert a_runs == [(1, 1), (2, 1), (2, 2), (3, 2), (4, 2)]
    assert [(n, count) for group, n, count in attempts if group == "b"] == [(1, 1), (2, 1), (3, 1)]
    released = [r for r in records if r.outcome in {Outcome.FAILED, Outcome.SKIPPED}]
    assert {_label(r) for r in released} == {"a2", "a3", "a4"}
    for record in released:
        assert record.settlement.action is Action.RELEASE
        assert record.settlement.visibility_s == 0


def _label(record: Handled) -> str:
    body = record.message.body
    return f"{body['group']}{body['n']}"
