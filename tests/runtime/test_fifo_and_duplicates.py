"""FIFO groups in order under failure, and no message handled twice at once in a process.

A copy received while its message is held is adopted, not run: the delete follows the newest
receipt handle, even one that replaced the old while the delete was on the wire.
"""

from __future__ import annotations

from collections import Counter

import anyio
import pytest
from structlog.testing import capture_logs

from tests.recording import RecordingBackend
from tests.runtime.wire import WireBackend
from worker import LeaseConfig, Message, Outcome, OutgoingMessage, Worker, WorkerConfig
from worker.testing import run_worker
from worker.types import QueueSpec

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]

LEASE = LeaseConfig(visibility_s=30, extension_s=30, renew_margin_s=10)


async def _fifo_backend(groups: dict[str, int]) -> RecordingBackend:
    backend = RecordingBackend()
    await backend.create_queue(QueueSpec("jobs.fifo", visibility_timeout_s=30))
    for group, count in groups.items():
        for n in range(1, count + 1):
            body = f'{{"group": "{group}", "n": {n}}}'
            result = await backend.inner.send(
                "jobs.fifo",
                [OutgoingMessage(body=body, group_id=group, deduplication_id=f"{group}-{n}")],
            )
            assert not result.failed
    return backend


async def _send(backend: RecordingBackend, queue: str, count: int) -> list[str]:
    ids = []
    for i in range(count):
        result = await backend.inner.send(queue, [OutgoingMessage(body=f'{{"n": {i}}}')])
        ids.append(result.message_ids["0"])
    return ids


async def test_fifo_groups_run_in_order_one_at_a_time_and_side_by_side() -> None:
    app = Worker(WorkerConfig(lease=LEASE, max_in_flight=10))
    running: Counter[str] = Counter()
    most: Counter[str] = Counter()
    done: list[tuple[str, int]] = []
    events: list[tuple[str, str, float]] = []

    @app.handler("jobs.fifo")
    async def job(message: Message) -> None:
        group = message.body["group"]
        running[group] += 1
        most[group] = max(most[group], running[group])
        events.append(("start", group, anyio.current_time()))
        await anyio.sleep(10)
        done.append((group, message.body["n"]))
        running[group] -= 1

    backend = await _fifo_backend({"a": 5, "b": 5})
    async with run_worker(app, backend=backend) as harness:
        await harness.wait_for_handled(10)
        await harness.wait_until_idle()
    assert [n for g, n in done if g == "a"] == [1, 2, 3, 4, 5]
    assert [n for g, n in done if g == "b"] == [1, 2, 3, 4, 5]
    assert most == Counter({"a": 1, "b": 1})
    starts = {(g, t) for kind, g, t in events if kind == "start"}
    assert ("a", 0.0) in starts and ("b", 0.0) in starts  # groups side by side
    assert backend.inner.engine.counts("jobs.fifo").visible == 0


async def test_a_failure_releases_the_rest_of_its_group_so_order_is_kept() -> None:
    app = Worker(WorkerConfig(lease=LEASE, max_in_flight=10))
    attempts: list[tuple[str, int, int]] = []
    failed_once: set[int] = set()

    @app.handler("jobs.fifo", on_error="release")
    async def job(message: Message) -> None:
        group, n = message.body["group"], message.body["n"]
        attempts.append((group, n, message.receive_count))
        await anyio.sleep(1)
        if group == "a" and n == 2 and n not in failed_once:
            failed_once.add(n)
            raise RuntimeError("a2 fails once")

    backend = await _fifo_backend({"a": 4, "b": 3})
    async with run_worker(app, backend=backend) as harness:
        records = await harness.wait_for_handled(10)  # 7 + a2's failure + a3, a4 skipped
        await harness.wait_until_idle()
    outcomes = Counter(r.outcome for r in records)
    assert outcomes[Outcome.FAILED] == 1 and outcomes[Outcome.SKIPPED] == 2
    a_runs = [(n, count) for g, n, count in attempts if g == "a"]
    # a3 and a4 were not run before a2 succeeded; then a2, a3, a4 again in order.
    assert a_runs == [(1, 1), (2, 1), (2, 2), (3, 2), (4, 2)]
    assert [n for g, n, _ in attempts if g == "b"] == [1, 2, 3]  # b went on, untouched
    released = [call for call in backend.of("release")]
    assert sorted(v for call in released for v in call.visibility) == [0, 0, 0]
    assert backend.inner.engine.counts("jobs.fifo").visible == 0


async def test_a_message_received_again_while_held_is_not_run_twice() -> None:
    app = Worker(WorkerConfig(lease=LEASE, max_in_flight=5, wait_s=20))
    runs: Counter[str] = Counter()
    started = anyio.Event()

    @app.handler("jobs")
    async def job(message: Message) -> None:
        runs[message.message_id] += 1
        started.set()
        await anyio.sleep(100)

    backend = RecordingBackend()
    await backend.create_queue(QueueSpec("jobs", visibility_timeout_s=30))
    result = await backend.inner.send("jobs", [OutgoingMessage(body="{}")])
    message_id = result.message_ids["0"]
    with capture_logs() as logs:
        async with run_worker(app, backend=backend) as harness:
            await started.wait()
            # The lease lapses behind the worker's back; the worker's own receiver gets it again.
            backend.inner.engine.expire("jobs", message_id)
            [record] = await harness.wait_for_handled(1)
            await harness.wait_until_idle()
    assert runs == Counter({message_id: 1})
    [adopted] = [e for e in logs if e["event"] == "message.received_while_held"]
    assert adopted["receive_count"] == 2
    assert record.outcome is Outcome.SUCCEEDED
    assert len(backend.of("receive")) >= 2
    # Deleted with the newest handle: gone from the queue.
    assert backend.inner.engine.peek("jobs", message_id) is None
    lost = harness.metrics.value(
        "lease_worker_leases_lost_total", queue="jobs", reason="ReceiptHandleIsInvalid"
    )
    assert lost == 0


async def test_a_delete_follows_a_handle_replaced_while_it_was_on_the_wire() -> None:
    """Defect 4: a second copy of a message adopted while its delete was on the wire gave
    the lease a new handle; the delete (old handle) was refused and the message ran twice."""
    lease = LeaseConfig(visibility_s=30, extension_s=30, renew_margin_s=10)
    app = Worker(WorkerConfig(lease=lease, max_in_flight=2, wait_s=20, call_timeout_s=5))
    starts: Counter[str] = Counter()

    @app.handler("jobs")
    async def job(message: Message) -> None:
        starts[message.message_id] += 1
        await anyio.sleep(5)

    backend = WireBackend(latency={"delete": 3.0})
    await backend.create_queue(QueueSpec("jobs", visibility_timeout_s=30))
    [message_id] = await _send(backend, "jobs", 1)
    async with run_worker(app, backend=backend) as harness:
        await harness.wait_for_handled(1)
        # The delete is on the wire now: the message lapses behind the worker's back and the
        # worker's own receiver gets it again, adopting the new handle.
        await anyio.sleep(1)
        backend.inner.engine.expire("jobs", message_id)
        await harness.wait_until_idle()
        await anyio.sleep(100)
    assert starts == Counter({message_id: 1})
    assert backend.inner.engine.peek("jobs", message_id) is None
