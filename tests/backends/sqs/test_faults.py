"""Faults between the worker and SQS: throttling, 5xx, resets, timeouts, a partition.

A worker runs in this process (`run_worker` with an `SqsBackend`) against moto's server
through `tests.fault_proxy`, in real time: visibility 6 s, renewal margin 4 s, handlers of
6.5 s, so every lease needs a renewal while they run. Each test drives the fault window from
what happened: it starts `LEAD_S` before the first renewal is due (read from the handlers'
own leases) and ends `FAULT_S` after it, so the fault lasts less than the margin and the
renewal is sure to meet it (the proxy's records say so).

"No lease lapsed" is watched from the outside: a second client, straight to moto, polls the
queue's visible count while the handlers run; a lapse shows as a visible message. Every
handler run is counted, and the worker must still take a new message afterwards.

A partition longer than the margin: the leases lapse, the metric counts them
(`reason="lapsed"`), the handlers are cancelled, and once the network heals the messages
come back and are handled: nothing is lost.

Timeouts: a request that is never answered (blackhole) must be given up and retried within
the margin, though the client's read timeout is above the 20 s long poll; and a renewal whose
answer comes after the deadline (latency) cannot be trusted, since SQS may have handed the
message to another consumer meanwhile: the lease is lost and its handler stopped.

The worker's client runs with the default client (`DEFAULT_SQS_CLIENT`, the lean path)
everywhere, and with the opt-out (`client="botocore"`) on one test of each kind of fault (an
error answer, a reset, a blackhole, a late answer), to keep the suite's time: each test here
is several seconds of real time.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import anyio
import pytest

from backends.sqs import SqsBackend, SqsSettings
from backends.sqs.settings import DEFAULT_SQS_CLIENT, SqsClientKind
from tests.fault_proxy import Fault, FaultProxy
from tests.moto_server import MOTO_ACCESS_KEY, MOTO_REGION, MOTO_SECRET_KEY, MotoServer, start_moto
from worker import (
    LeaseConfig,
    Message,
    Metrics,
    Outcome,
    OutgoingMessage,
    ShutdownConfig,
    Worker,
    WorkerConfig,
)
from worker.testing import run_worker
from worker.types import QueueSpec

pytestmark = pytest.mark.asyncio

VISIBILITY_S = 6
MARGIN_S = 4.0
WORK_S = 6.5
MESSAGES = 5
#: The fault starts this long before the first renewal is due, and ends FAULT_S after it.
LEAD_S = 0.5
FAULT_S = 2.0
RENEW = "ChangeMessageVisibilityBatch"

LEASE = LeaseConfig(
    visibility_s=VISIBILITY_S,
    extension_s=VISIBILITY_S,
    renew_margin_s=MARGIN_S,
    retry_interval_s=0.5,
    coalesce_window_s=1.0,
)
CONFIG = WorkerConfig(
    lease=LEASE,
    max_in_flight=10,
    wait_s=2,
    receive_backoff_s=0.2,
    receive_backoff_max_s=1.0,
    shutdown=ShutdownConfig(grace_s=2.0, flush_timeout_s=3.0),
)


def _settings(endpoint_url: str, client: SqsClientKind = DEFAULT_SQS_CLIENT) -> SqsSettings:
    # Two attempts, the second after at most 1 s (standard mode's backoff), and then the
    # lease keeper's own retries every 0.5 s: all inside the 4 s margin. The read timeout
    # cannot go below 20 s (long polls): a request that is never answered is given up by the
    # runtime's own per-call deadline (a renewal's: a third of the margin), not by botocore.
    return SqsSettings(
        region=MOTO_REGION,
        endpoint_url=endpoint_url,
        access_key_id=MOTO_ACCESS_KEY,
        secret_access_key=MOTO_SECRET_KEY,
        max_attempts=2,
        connect_timeout_s=1.0,
        read_timeout_s=21.0,
        client=client,
    )


@pytest.fixture(scope="module")
def moto() -> Iterator[MotoServer]:
    with start_moto() as server:
        yield server


@dataclass
class Rig:
    """moto behind the fault proxy, a client straight to moto and the worker's client."""

    direct: SqsBackend
    proxy: FaultProxy
    through_proxy: SqsBackend


@asynccontextmanager
async def rig(moto: MotoServer, client: SqsClientKind = DEFAULT_SQS_CLIENT) -> AsyncIterator[Rig]:
    """`client`: the worker's client (the one through the proxy)."""
    # Entered in the test's own task (not a fixture): the proxy's task group must be left
    # by the task that entered it.
    async with (
        FaultProxy.running(moto.port) as proxy,
        _connected(moto.endpoint_url) as direct,
        _connected(proxy.endpoint_url, client) as through_proxy,
    ):
        yield Rig(direct, proxy, through_proxy)


@asynccontextmanager
async def _connected(
    endpoint_url: str, client: SqsClientKind = DEFAULT_SQS_CLIENT
) -> AsyncIterator[SqsBackend]:
    backend = await SqsBackend.connect(_settings(endpoint_url, client))
    try:
        yield backend
    finally:
        await backend.aclose()


async def _queue_with(direct: SqsBackend, bodies: list[dict[str, float]]) -> tuple[str, set[str]]:
    queue = f"faults-{uuid.uuid4().hex[:12]}"
    await direct.create_queue(QueueSpec(queue, visibility_timeout_s=VISIBILITY_S))
    result = await direct.send(
        queue, [OutgoingMessage(entry_id=str(i), body=json.dumps(b)) for i, b in enumerate(bodies)]
    )
    assert not result.failed
    return queue, set(result.message_ids.values())


def _total(metrics: Metrics, name: str) -> float:
    """A counter summed over all its labels."""
    return sum(
        sample.value
        for family in metrics.registry.collect()
        for sample in family.samples
        if sample.name == name
    )


def _by_label(metrics: Metrics, name: str, label: str) -> dict[str, float]:
    return {
        sample.labels[label]: sample.value
        for family in metrics.registry.collect()
        for sample in family.samples
        if sample.name == name
    }


@dataclass
class Watcher:
    """Polls the queue's visible count from outside the worker; a lapsed lease shows there.

    On the first visible message it cancels `scope` (the test's wait), so a lapse fails the
    test at once instead of after the rest of the run.
    """

    backend: SqsBackend
    queue: str
    scope: anyio.CancelScope
    polls: int = 0
    most_visible: int = 0
    least_in_flight: int | None = None

    async def run(self) -> None:
        while True:
            info = await self.backend.queue_info(self.queue)
            self.polls += 1
            self.most_visible = max(self.most_visible, info.approximate_visible)
            if self.least_in_flight is None or info.approximate_in_flight < self.least_in_flight:
                self.least_in_flight = info.approximate_in_flight
            if info.approximate_visible:
                self.scope.cancel()
                return
            await anyio.sleep(0.2)


class Handlers:
    """The app's handler: counts runs per message, notes lease deadlines, reports starts."""

    def __init__(self, expected: int) -> None:
        self.runs: Counter[str] = Counter()
        self.deadlines: list[float] = []
        self.expected = expected
        self.all_started = anyio.Event()

    async def __call__(self, message: Message) -> None:
        self.runs[message.message_id] += 1
        self.deadlines.append(message.lease.deadline)
        if len(self.runs) >= self.expected:
            self.all_started.set()
        work_s = message.body["first_s"] if message.receive_count == 1 else message.body["then_s"]
        await anyio.sleep(work_s)


FAULTS_SHORTER_THAN_THE_MARGIN = [
    pytest.param(Fault.throttling(), "RequestThrottled", "lean", id="throttling-400"),
    pytest.param(Fault.internal_error(), "InternalError", "lean", id="http-500"),
    pytest.param(Fault.unavailable(), "ServiceUnavailable", "lean", id="http-503"),
    pytest.param(Fault.reset(), None, "lean", id="connection-reset"),
    pytest.param(
        Fault.throttling(ops=[RENEW]), "RequestThrottled", "lean", id="renewals-only-throttled"
    ),
    pytest.param(Fault.blackhole(), "Timeout", "lean", id="timeout-blackhole"),
    # The opt-out (plain aiobotocore): one fault of each kind.
    pytest.param(Fault.throttling(), "RequestThrottled", "botocore", id="botocore-throttling-400"),
    pytest.param(Fault.reset(), None, "botocore", id="botocore-connection-reset"),
    pytest.param(Fault.blackhole(), "Timeout", "botocore", id="botocore-timeout-blackhole"),
]


@pytest.mark.parametrize(("fault", "code", "client"), FAULTS_SHORTER_THAN_THE_MARGIN)
async def test_a_fault_shorter_than_the_margin_lapses_no_lease_and_loses_nothing(
    moto: MotoServer, fault: Fault, code: str | None, client: SqsClientKind
) -> None:
    async with rig(moto, client) as r:
        await _shorter_than_the_margin(r.direct, r.proxy, r.through_proxy, fault, code)


async def _shorter_than_the_margin(
    direct: SqsBackend,
    proxy: FaultProxy,
    through_proxy: SqsBackend,
    fault: Fault,
    code: str | None,
) -> None:
    body = {"first_s": WORK_S, "then_s": WORK_S}
    queue, sent = await _queue_with(direct, [body] * MESSAGES)
    app = Worker(CONFIG)
    handlers = Handlers(MESSAGES)
    app.handler(queue)(handlers)

    async with run_worker(app, backend=through_proxy, create_queues=False) as harness:
        with anyio.fail_after(10):
            await handlers.all_started.wait()
        async with anyio.create_task_group() as tasks:
            watcher = Watcher(direct, queue, tasks.cancel_scope)
            tasks.start_soon(watcher.run)
            fault_s = await _fault_around_first_renewal(proxy, fault, min(handlers.deadlines))
            with anyio.fail_after(WORK_S + 10):
                await harness.wait_for_handled(MESSAGES)
            tasks.cancel_scope.cancel()
        lost = _total(harness.metrics, "lease_worker_leases_lost_total")
        assert watcher.most_visible == 0, (
            f"{watcher.most_visible} leases lapsed (messages visible at SQS) during {fault}; "
            f"the worker counted {lost:.0f} lost"
        )
        records = list(harness.handled)
        # The worker is still running and takes new work.
        extra = await harness.send(queue, {"first_s": 0.1, "then_s": 0.1})
        with anyio.fail_after(10):
            await harness.wait_for_handled(MESSAGES + 1)
        assert not harness.supervisor.stopping
        metrics = harness.metrics

    failures = _by_label(metrics, "lease_worker_lease_renewal_failures_total", "code")
    print(
        f"\n{fault}: fault {fault_s:.2f} s (margin {MARGIN_S} s); faulted requests "
        f"{proxy.count(faulted=True)} ({proxy.count(RENEW, faulted=True)} renewals); "
        f"renewal failures {failures}; renewals "
        f"{_total(metrics, 'lease_worker_lease_renewals_total'):.0f}; "
        f"watcher polls {watcher.polls}"
    )
    assert fault_s < MARGIN_S
    assert proxy.count(RENEW, faulted=True) >= 1, "the fault never met a renewal"
    assert sum(failures.values()) >= 1
    if code is not None:
        assert set(failures) == {code}
    assert watcher.least_in_flight == MESSAGES
    assert [r.outcome for r in records] == [Outcome.SUCCEEDED] * MESSAGES
    assert handlers.runs == Counter(dict.fromkeys(sent | {extra}, 1)), "a message ran twice"
    assert _total(metrics, "lease_worker_messages_received_total") == MESSAGES + 1
    assert _total(metrics, "lease_worker_leases_lost_total") == 0
    assert _total(metrics, "lease_worker_lease_renewals_total") >= MESSAGES
    await _assert_empty(direct, queue)


async def _fault_around_first_renewal(proxy: FaultProxy, fault: Fault, deadline: float) -> float:
    """Inject `fault` LEAD_S before the first renewal is due, heal FAULT_S after; its length."""
    renewal_due = deadline - MARGIN_S
    await anyio.sleep_until(renewal_due - LEAD_S)
    injected = anyio.current_time()
    proxy.inject(fault)
    with anyio.fail_after(LEAD_S + MARGIN_S):
        await proxy.wait_for(RENEW, faulted=True)
    await anyio.sleep_until(renewal_due + FAULT_S)
    proxy.heal()
    return anyio.current_time() - injected


async def _assert_empty(direct: SqsBackend, queue: str) -> None:
    info = await direct.queue_info(queue)
    assert (info.approximate_visible, info.approximate_in_flight) == (0, 0), info


async def test_a_partition_longer_than_the_margin_counts_lapses_and_loses_nothing(
    moto: MotoServer,
) -> None:
    async with rig(moto) as r:
        await _partition(r.direct, r.proxy, r.through_proxy)


async def _partition(direct: SqsBackend, proxy: FaultProxy, through_proxy: SqsBackend) -> None:
    # First delivery: far longer than the partition; the redelivery after it: short.
    body = {"first_s": 60.0, "then_s": 0.2}
    queue, sent = await _queue_with(direct, [body] * MESSAGES)
    app = Worker(CONFIG)
    handlers = Handlers(MESSAGES)
    app.handler(queue)(handlers)

    async with run_worker(app, backend=through_proxy, create_queues=False) as harness:
        with anyio.fail_after(10):
            await handlers.all_started.wait()
        renewal_due = min(handlers.deadlines) - MARGIN_S
        await anyio.sleep_until(renewal_due - LEAD_S)
        partitioned = anyio.current_time()
        proxy.inject(Fault.reset())
        # Until every lease is lost: the handlers are cancelled at their deadlines.
        with anyio.fail_after(VISIBILITY_S + 5):
            lost = await harness.wait_for_handled(MESSAGES)
        partition_s = anyio.current_time() - partitioned
        proxy.heal()
        with anyio.fail_after(20):
            records = await harness.wait_for_handled(2 * MESSAGES)
        assert not harness.supervisor.stopping
        metrics = harness.metrics

    lapsed = metrics.value("lease_worker_leases_lost_total", queue=queue, reason="lapsed")
    print(
        f"\npartition: {partition_s:.2f} s (margin {MARGIN_S} s); lapsed {lapsed:.0f}; "
        f"faulted requests {proxy.count(faulted=True)}; renewal failures "
        f"{_by_label(metrics, 'lease_worker_lease_renewal_failures_total', 'code')}"
    )
    assert partition_s > MARGIN_S
    assert [r.outcome for r in lost] == [Outcome.LEASE_LOST] * MESSAGES
    assert lapsed == MESSAGES
    assert _total(metrics, "lease_worker_leases_lost_total") == MESSAGES
    # Nothing lost: each message came back and was handled once more, successfully.
    again = records[MESSAGES:]
    assert [r.outcome for r in again] == [Outcome.SUCCEEDED] * MESSAGES
    assert {r.message.message_id for r in again} == sent
    assert all(r.message.receive_count == 2 for r in again)
    assert handlers.runs == Counter(dict.fromkeys(sent, 2))
    await _assert_empty(direct, queue)


@pytest.mark.parametrize("client", ["botocore", "lean"])
async def test_a_renewal_answered_after_the_deadline_loses_the_lease(
    moto: MotoServer, client: SqsClientKind
) -> None:
    async with rig(moto, client) as r:
        await _late_answer(r.direct, r.proxy, r.through_proxy)


async def _late_answer(direct: SqsBackend, proxy: FaultProxy, through_proxy: SqsBackend) -> None:
    count = 3
    # Longer than the late answer takes: a keeper that notices has time to cancel.
    body = {"first_s": 8.5, "then_s": 8.5}
    queue, sent = await _queue_with(direct, [body] * count)
    # The worker's slots stay full, so its own receiver cannot take the messages back.
    app = Worker(dataclasses.replace(CONFIG, max_in_flight=count))
    handlers = Handlers(count)
    app.handler(queue)(handlers)
    other = OtherConsumer(direct, queue)

    async with run_worker(app, backend=through_proxy, create_queues=False) as harness:
        with anyio.fail_after(10):
            await handlers.all_started.wait()
        deadline = min(handlers.deadlines)
        # Every renewal reaches SQS (and its answer the worker) 1 s after the deadline.
        proxy.inject(Fault.latency(MARGIN_S + 1.0, ops=[RENEW]))
        async with anyio.create_task_group() as tasks:
            # Meanwhile another consumer takes whatever SQS shows again.
            tasks.start_soon(other.run)
            with anyio.fail_after(15):
                records = await harness.wait_for_handled(count)
            noticed_s = anyio.current_time() - deadline
            tasks.cancel_scope.cancel()
        proxy.heal()
        metrics = harness.metrics

    outcomes = [r.outcome for r in records]
    lost = _total(metrics, "lease_worker_leases_lost_total")
    print(
        f"\nlate answers: handlers ended {noticed_s:.2f} s after the deadline with {outcomes}; "
        f"leases lost {lost:.0f}; another consumer took {len(other.taken)} of them"
    )
    assert proxy.count(RENEW, faulted=True) >= 1
    # The answer came after the deadline: the lease cannot be trusted, the handler stops.
    assert outcomes == [Outcome.LEASE_LOST] * count, "handlers ran on without their leases"
    assert lost == count
    assert noticed_s < 1.5, "the lapse was noticed late"
    assert other.taken <= sent


@dataclass
class OtherConsumer:
    """Receives from the queue straight from moto, as another worker would; keeps what came."""

    backend: SqsBackend
    queue: str
    taken: set[str] = dataclasses.field(default_factory=set)

    async def run(self) -> None:
        while True:
            messages = await self.backend.receive(
                self.queue, max_messages=10, wait_s=1, visibility_s=60
            )
            self.taken.update(message.message_id for message in messages)
