"""Issue 27, defect 4: a shutdown no longer strands what a long poll in flight already took.

Receiving used to stop by cancelling the long polls. A poll whose answer was on its way
back (the service had already handed its messages out) was thrown away, and those messages
stayed invisible for the whole `visibility_s` after the worker exited. Now no new poll
starts, the polls in flight are waited for within the grace, and what they bring is
released at once (the backend's shortest release, `Limits.min_release_visibility_s`), its
handlers never run. What cannot be done: an answer that comes after the grace (or never)
holds handles the worker never sees; its messages stay invisible until the visibility
asked for at receive runs out (`shutdown.receive_cut_short`).

`HeldAnswers` is a fake around the real engine, as `tests.recording` is: each receive lands
on the engine (which hands its messages out there and then), and the answer is held
`hold_s` on its way back. Virtual time (looptime): every time below is exact.
"""

from __future__ import annotations

from collections.abc import MutableMapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import anyio
import pytest
from structlog.testing import capture_logs

from backends.memory import MemoryBackend, MemoryEngine
from backends.memory.dialects import SMQ_DIALECT
from tests.recording import RecordingBackend
from worker import LeaseConfig, Limits, Message, Outcome, ShutdownConfig, Worker, WorkerConfig
from worker.clock import LoopClock
from worker.testing import WorkerHarness, run_worker
from worker.types import OutgoingMessage, QueueSpec, ReceivedMessage

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]

WAIT_S, GRACE_S, FLUSH_S, HOLD_S = 20, 10.0, 4.0, 2.0
LEASE = LeaseConfig(visibility_s=30, extension_s=30, renew_margin_s=10)


@dataclass
class HeldAnswers(RecordingBackend):
    """Each receive that got messages lands on the engine, then its answer is held `hold_s`
    before it reaches the worker."""

    hold_s: float = HOLD_S
    #: (queue, message ids) of each receive the engine answered with messages.
    landed: list[tuple[str, list[str]]] = field(default_factory=list)
    _changed: anyio.Event = field(default_factory=anyio.Event)

    async def receive(
        self, queue: str, *, max_messages: int, wait_s: float, visibility_s: int | None = None
    ) -> Sequence[ReceivedMessage]:
        got = await super().receive(
            queue, max_messages=max_messages, wait_s=wait_s, visibility_s=visibility_s
        )
        if got:
            self.landed.append((queue, [m.message_id for m in got]))
            self._changed.set()
            await anyio.sleep(self.hold_s)  # the answer on its way back
        return got

    @property
    def limits(self) -> Limits:
        # A service over a network: a poll's answer may be on its way when it is cancelled.
        return replace(self.inner.limits, cancelled_receive_takes_nothing=False)

    async def wait_landed(self, count: int) -> None:
        while len(self.landed) < count:
            self._changed = anyio.Event()
            await self._changed.wait()


class Runs(list[str]):
    """The message ids whose handler started; `wait(n)` returns once n have."""

    def __init__(self) -> None:
        super().__init__()
        self._changed = anyio.Event()

    def started(self, message_id: str) -> None:
        self.append(message_id)
        self._changed.set()

    async def wait(self, count: int) -> None:
        while len(self) < count:
            self._changed = anyio.Event()
            await self._changed.wait()


def _app(*, grace_s: float = GRACE_S, queues: Sequence[str] = ("jobs",)) -> tuple[Worker, Runs]:
    shutdown = ShutdownConfig(grace_s=grace_s, flush_timeout_s=FLUSH_S)
    app = Worker(WorkerConfig(lease=LEASE, max_in_flight=10, wait_s=WAIT_S, shutdown=shutdown))
    ran = Runs()

    async def handle(message: Message) -> None:
        ran.started(message.message_id)
        await anyio.sleep(5)

    for queue in queues:
        app.handler(queue)(handle)
    return app, ran


async def _backend(*queues: str, inner: MemoryBackend | None = None) -> HeldAnswers:
    backend = HeldAnswers(inner or MemoryBackend())
    for queue in queues:
        await backend.create_queue(QueueSpec(queue, visibility_timeout_s=30))
    return backend


async def _send(backend: HeldAnswers, queue: str, count: int) -> list[str]:
    """`count` messages in one call: a poll waiting on the queue takes them all at once."""
    batch = [OutgoingMessage(entry_id=str(n), body=f'{{"n": {n}}}') for n in range(count)]
    result = await backend.inner.send(queue, batch)
    return [result.message_ids[str(n)] for n in range(count)]


def _counts(backend: HeldAnswers, queue: str = "jobs") -> tuple[int, int, int]:
    counts = backend.inner.engine.counts(queue)
    return counts.visible, counts.in_flight, counts.delayed


def _events(logs: list[MutableMapping[str, Any]], name: str) -> list[MutableMapping[str, Any]]:
    return [e for e in logs if e["event"] == name]


async def _shut_down_once_landed(
    harness: WorkerHarness, backend: HeldAnswers, landed: int, *, hurry: bool = False
) -> float:
    """Wait until `landed` receives got their messages (their answers now on the way), then
    request the shutdown (twice with `hurry`); returns when it was requested."""
    await backend.wait_landed(landed)
    requested_at = anyio.current_time()
    harness.shutdown()
    if hurry:
        harness.shutdown()
    return requested_at


async def test_what_a_poll_in_flight_took_is_released_at_once_and_not_run() -> None:
    app, ran = _app()
    backend = await _backend("jobs")
    with capture_logs() as logs, anyio.fail_after(GRACE_S + FLUSH_S + 1):
        async with run_worker(app, backend=backend) as harness:
            ids = await _send(backend, "jobs", 3)  # the waiting poll takes all three
            requested_at = await _shut_down_once_landed(harness, backend, 1)
    took = anyio.current_time() - requested_at
    # Visible again right after the worker returned: none stranded for visibility_s.
    assert _counts(backend) == (3, 0, 0)
    assert backend.landed == [("jobs", ids)]
    assert ran == [] and harness.handled == []
    assert [call.visibility for call in backend.of("release")] == [(0, 0, 0)]
    assert backend.of("delete") == []
    # The answer arrived HOLD_S after the request; the release went out with the flush.
    assert took == pytest.approx(HOLD_S, abs=0.1)
    assert [e["messages"] for e in _events(logs, "shutdown.released_unhandled")] == [3]
    assert _events(logs, "shutdown.receive_cut_short") == []
    assert len(backend.of("receive")) == 1  # no poll started after the request


async def test_handlers_drain_while_a_poll_in_flight_is_waited_for_and_released() -> None:
    app, ran = _app()
    backend = await _backend("jobs")
    with anyio.fail_after(GRACE_S + FLUSH_S + 1):
        async with run_worker(app, backend=backend) as harness:
            [first] = await _send(backend, "jobs", 1)
            await ran.wait(1)  # its handler runs 5 s; the next poll waits on the queue
            later = await _send(backend, "jobs", 2)
            requested_at = await _shut_down_once_landed(harness, backend, 2)
    took = anyio.current_time() - requested_at
    assert ran == [first]
    assert [(h.message.message_id, h.outcome) for h in harness.handled] == [
        (first, Outcome.SUCCEEDED)
    ]
    assert backend.landed == [("jobs", [first]), ("jobs", later)]
    assert _counts(backend) == (2, 0, 0)  # the first deleted, the later two visible again
    assert [call.visibility for call in backend.of("release")] == [(0, 0)]
    assert [call.entries for call in backend.of("delete")] == [1]
    assert took < GRACE_S


async def test_every_queues_poll_in_flight_is_waited_for() -> None:
    app, ran = _app(queues=("a", "b"))
    backend = await _backend("a", "b")
    async with run_worker(app, backend=backend) as harness:
        ids = {"a": await _send(backend, "a", 2)}
        await backend.wait_landed(1)
        ids["b"] = await _send(backend, "b", 3)  # while a's answer is still on its way
        await _shut_down_once_landed(harness, backend, 2)
    assert ran == []
    assert backend.landed == [("a", ids["a"]), ("b", ids["b"])]
    assert (_counts(backend, "a"), _counts(backend, "b")) == ((2, 0, 0), (3, 0, 0))


async def test_on_smq_what_a_poll_in_flight_took_is_released_with_the_shortest_visibility() -> None:
    app, ran = _app()
    engine = MemoryEngine(LoopClock(), dialect=SMQ_DIALECT)
    backend = await _backend("jobs", inner=MemoryBackend(engine))
    async with run_worker(app, backend=backend) as harness:
        ids = await _send(backend, "jobs", 3)
        await _shut_down_once_landed(harness, backend, 1)
    returned_at = anyio.current_time()
    assert ran == []
    assert [call.visibility for call in backend.of("release")] == [(1,)] * 3  # SMQ: 1 s, one a call
    for message_id in ids:
        snapshot = engine.peek("jobs", message_id)
        assert snapshot is not None and snapshot.receive_count == 1
        assert snapshot.visible_at <= returned_at + 1


# What cannot be done: the handles of an answer that arrives after the grace never reach
# the worker, so nothing can release those messages; they come back at their visibility.
async def test_an_answer_later_than_the_grace_is_cut_short_and_its_messages_lapse() -> None:
    app, ran = _app()
    backend = await _backend("jobs")
    backend.hold_s = 3600
    with capture_logs() as logs, anyio.fail_after(GRACE_S + FLUSH_S + 1):
        async with run_worker(app, backend=backend) as harness:
            await _send(backend, "jobs", 3)
            requested_at = await _shut_down_once_landed(harness, backend, 1)
    assert anyio.current_time() - requested_at == pytest.approx(GRACE_S, abs=0.1)
    assert [e["polls"] for e in _events(logs, "shutdown.receive_cut_short")] == [1]
    assert _events(logs, "shutdown.released_unhandled") == []
    assert ran == [] and backend.of("release") == []
    assert _counts(backend) == (0, 3, 0)  # until the visibility asked for at receive
    [(_, landed_at)] = [(c.operation, c.at) for c in backend.of("receive")]
    await anyio.sleep(landed_at + LEASE.visibility_s - anyio.current_time())
    assert _counts(backend) == (3, 0, 0)


async def test_a_second_request_cuts_the_wait_for_the_polls_short() -> None:
    app, _ = _app(grace_s=120)
    backend = await _backend("jobs")
    with capture_logs() as logs, anyio.fail_after(1):
        async with run_worker(app, backend=backend) as harness:
            await _send(backend, "jobs", 3)
            requested_at = await _shut_down_once_landed(harness, backend, 1, hurry=True)
    assert anyio.current_time() - requested_at == pytest.approx(0, abs=0.1)
    assert [e["polls"] for e in _events(logs, "shutdown.receive_cut_short")] == [1]
    assert _counts(backend) == (0, 3, 0)


async def test_an_idle_poll_is_waited_for_until_its_wait_ends_within_the_grace() -> None:
    app, _ = _app(grace_s=30)
    backend = await _backend("jobs")
    with capture_logs() as logs:
        async with run_worker(app, backend=backend) as harness:
            [poll] = backend.of("receive")
            harness.shutdown()
    # An empty long poll cannot be told from one whose answer is on its way.
    assert anyio.current_time() - poll.at == pytest.approx(WAIT_S, abs=0.1)
    assert len(backend.of("receive")) == 1
    assert _events(logs, "shutdown.receive_cut_short") == []
    assert _counts(backend) == (0, 0, 0)
