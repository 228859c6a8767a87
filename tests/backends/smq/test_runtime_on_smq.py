"""The whole runtime on `SmqBackend` against serve-smq (must-show 1 and 2 of the SMQ issue):
a handler running 10x the visibility timeout, and a delete racing an extension."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import anyio
import pytest

from backends.smq import SmqBackend
from tests.backends.smq.serving import smq_pair
from worker import LeaseConfig, Message, Outcome, Worker, WorkerConfig
from worker.testing import run_worker
from worker.types import BatchResult, Deletion, OutgoingMessage, QueueSpec, VisibilityChange

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]

LEASE = LeaseConfig(visibility_s=30, extension_s=30, renew_margin_s=10, coalesce_window_s=5)


def _app(max_in_flight: int) -> Worker:
    return Worker(WorkerConfig(lease=LEASE, max_in_flight=max_in_flight, wait_s=20))


def _log_handles(
    backend: SmqBackend, sent: list[tuple[str, str]], answered: dict[str, str]
) -> None:
    """Record every handle the worker sends, and the new handle SMQ answers for each
    extended one (`answered`: old -> new)."""
    extend, delete = backend.extend, backend.delete

    async def logged_extend(queue: str, entries: Sequence[VisibilityChange]) -> BatchResult:
        sent.extend(("extend", e.receipt_handle) for e in entries)
        result = await extend(queue, entries)
        for entry in entries:
            if entry.entry_id in result.new_handles:
                answered[entry.receipt_handle] = result.new_handles[entry.entry_id]
        return result

    async def logged_delete(queue: str, entries: Sequence[Deletion]) -> BatchResult:
        sent.extend(("delete", e.receipt_handle) for e in entries)
        return await delete(queue, entries)

    backend.extend = logged_extend  # type: ignore[method-assign]
    backend.delete = logged_delete  # type: ignore[method-assign]


async def test_a_handler_at_10x_the_visibility_is_never_redelivered() -> None:
    app = _app(max_in_flight=3)
    starts: Counter[str] = Counter()

    @app.handler("jobs")
    async def job(message: Message) -> None:
        starts[message.message_id] += 1
        await anyio.sleep(295)  # ~10x the 30 s visibility timeout

    sent: list[tuple[str, str]] = []
    answered: dict[str, str] = {}
    async with smq_pair() as (backend, engine):
        engine.create_queue(QueueSpec("jobs", visibility_timeout_s=30))
        result = await backend.send(
            "jobs", [OutgoingMessage(body=f'{{"n": {i}}}', entry_id=str(i)) for i in range(3)]
        )
        ids = sorted(result.message_ids.values())
        _log_handles(backend, sent, answered)
        async with run_worker(app, backend=backend) as harness:
            handled = await harness.wait_for_handled(3)
            await harness.wait_until_idle()
        assert engine.counts("jobs").visible + engine.counts("jobs").in_flight == 0
        by_worker = list(sent)
        # A superseded handle is refused by the engine behind serve-smq.
        first_extension = next(h for op, h in by_worker if op == "extend")
        refused = await backend.delete("jobs", [Deletion("x", first_extension)])
    assert [h.outcome for h in handled] == [Outcome.SUCCEEDED] * 3
    assert starts == Counter(dict.fromkeys(ids, 1))
    assert [f.code for f in refused.failed] == ["ReceiptHandleIsInvalid"]
    for message_id in ids:
        chain = [(op, h) for op, h in by_worker if h.endswith(message_id)]
        # 14 extensions (at 20, 40, ... 280 s), one lease a call, then one delete.
        assert [op for op, _ in chain] == ["extend"] * 14 + ["delete"]
        handles = [h for _, h in chain]
        # Each call used the handle the previous extension answered.
        assert [answered[h] for h in handles[:-1]] == handles[1:]
        assert len(set(handles)) == 15
    assert (
        harness.metrics.value(
            "lease_worker_lease_renewal_failures_total",
            queue="jobs",
            code="ReceiptHandleIsInvalid",
        )
        == 0
    )


async def test_a_handler_finishing_during_an_extension_is_deleted_once_with_the_newest_handle() -> (
    None
):
    app = _app(max_in_flight=1)
    finish = anyio.Event()

    @app.handler("jobs")
    async def job(message: Message) -> None:
        await finish.wait()

    sent: list[tuple[str, str]] = []
    answered: dict[str, str] = {}
    async with smq_pair() as (backend, engine):
        engine.create_queue(QueueSpec("jobs", visibility_timeout_s=30))
        await backend.send("jobs", [OutgoingMessage(body="{}")])
        _log_handles(backend, sent, answered)
        extend = backend.extend

        async def slow_extend(queue: str, entries: Sequence[VisibilityChange]) -> BatchResult:
            finish.set()  # the handler ends while this extension is on the wire
            await anyio.sleep(2)
            return await extend(queue, entries)

        backend.extend = slow_extend  # type: ignore[method-assign]
        async with run_worker(app, backend=backend) as harness:
            [record] = await harness.wait_for_handled(1)
            await harness.wait_until_idle()
        counts = engine.counts("jobs")
    assert record.outcome is Outcome.SUCCEEDED
    assert [op for op, _ in sent] == ["extend", "delete"]
    assert sent[1][1] == answered[sent[0][1]]  # deleted with the extension's new handle
    assert (counts.visible, counts.in_flight, counts.delayed) == (0, 0, 0)
    assert (
        harness.metrics.value("lease_worker_leases_lost_total", queue="jobs", reason="lapsed") == 0
    )
