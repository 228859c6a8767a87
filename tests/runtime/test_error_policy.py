"""What becomes of a message whose handler fails, signals, or cannot read it."""

from __future__ import annotations

import itertools
import math

import anyio
import pytest
from structlog.testing import capture_logs

from backends.memory import MemoryBackend
from tests.recording import RecordingBackend
from worker import (
    Backoff,
    CallNext,
    Discard,
    ErrorPolicy,
    LeaseConfig,
    Message,
    OnError,
    Outcome,
    QueueNotFound,
    RedrivePolicy,
    Retry,
    Worker,
    WorkerConfig,
)
from worker.testing import run_worker
from worker.types import OutgoingMessage, QueueSpec

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]

LEASE = LeaseConfig(visibility_s=30, extension_s=30, renew_margin_s=10)


def _app(max_in_flight: int = 1) -> Worker:
    return Worker(WorkerConfig(lease=LEASE, max_in_flight=max_in_flight, wait_s=20))


async def _backend_with_dlq(max_receive_count: int) -> RecordingBackend:
    backend = RecordingBackend()
    await backend.create_queue(QueueSpec("jobs-dlq"))
    await backend.create_queue(
        QueueSpec(
            "jobs", visibility_timeout_s=30, redrive=RedrivePolicy("jobs-dlq", max_receive_count)
        )
    )
    return backend


async def _prepare(backend: RecordingBackend, queue: str, count: int) -> list[str]:
    await backend.create_queue(QueueSpec(queue, visibility_timeout_s=30))
    return await _send(backend, queue, count)


async def _send(backend: RecordingBackend, queue: str, count: int) -> list[str]:
    ids = []
    for i in range(count):
        result = await backend.inner.send(queue, [OutgoingMessage(body=f'{{"n": {i}}}')])
        ids.append(result.message_ids["0"])
    return ids


async def test_release_now_redelivers_at_once_with_receive_count_2() -> None:
    app = _app()
    seen: list[tuple[int, float]] = []

    @app.handler("jobs", on_error="release")
    async def flaky(message: Message) -> None:
        seen.append((message.receive_count, anyio.current_time()))
        if message.receive_count == 1:
            raise RuntimeError("first try fails")

    backend = await _backend_with_dlq(5)
    async with run_worker(app, backend=backend) as harness:
        await harness.send("jobs", {"n": 1})
        records = await harness.wait_for_handled(2)
        await harness.wait_until_idle()
    assert [r.outcome for r in records] == [Outcome.FAILED, Outcome.SUCCEEDED]
    assert [count for count, _ in seen] == [1, 2]
    # Visibility 0: back well before the 30 s visibility timeout would have let it out.
    assert seen[1][1] - seen[0][1] < 1
    assert [call.visibility for call in backend.of("release")] == [(0,)]
    assert backend.inner.engine.counts("jobs").visible == 0


async def test_expire_lands_in_the_dlq_on_receive_max_plus_one() -> None:
    app = _app()
    seen: list[tuple[int, float]] = []

    @app.handler("jobs", on_error="expire")
    async def broken(message: Message) -> None:
        seen.append((message.receive_count, anyio.current_time()))
        raise RuntimeError("always fails")

    backend = await _backend_with_dlq(3)
    async with run_worker(app, backend=backend) as harness:
        await harness.send("jobs", {"n": 1})
        await harness.wait_for_handled(3)
        with anyio.fail_after(120):
            # The worker's 4th receive moves it to the DLQ instead of delivering it.
            dead: list[object] = []
            while not dead:
                dead = list(await backend.inner.receive("jobs-dlq", max_messages=1, wait_s=20))
    assert [count for count, _ in seen] == [1, 2, 3]
    # Each failure let the 30 s visibility lapse: no release, no extension after failing.
    gaps = [b - a for (_, a), (_, b) in itertools.pairwise(seen)]
    assert gaps == [pytest.approx(30, abs=0.1)] * 2
    assert backend.of("release") == []
    assert len(dead) == 1
    assert backend.inner.engine.counts("jobs").visible == 0


async def test_backoff_delays_follow_the_policy() -> None:
    app = _app()
    seen: list[float] = []
    policy = ErrorPolicy(on_error=OnError.BACKOFF, backoff=Backoff(base_s=10, factor=2, max_s=25))

    @app.handler("jobs", on_error=policy)
    async def flaky(message: Message) -> None:
        seen.append(anyio.current_time())
        if message.receive_count < 4:
            raise RuntimeError("not yet")

    backend = await _backend_with_dlq(10)
    async with run_worker(app, backend=backend) as harness:
        await harness.send("jobs", {"n": 1})
        await harness.wait_for_handled(4)
    gaps = [b - a for a, b in itertools.pairwise(seen)]
    assert gaps == [pytest.approx(g, abs=0.2) for g in (10, 20, 25)]
    assert [call.visibility for call in backend.of("release")] == [(10,), (20,), (25,)]


async def test_retry_and_discard_signals() -> None:
    app = _app()
    seen: list[tuple[str, int, float]] = []

    @app.handler("jobs")
    async def signals(message: Message) -> None:
        seen.append((message.body["kind"], message.receive_count, anyio.current_time()))
        if message.body["kind"] == "retry" and message.receive_count == 1:
            raise Retry(after_s=42)
        if message.body["kind"] == "discard":
            raise Discard("not for us")

    backend = await _backend_with_dlq(10)
    async with run_worker(app, backend=backend) as harness:
        await harness.send("jobs", {"kind": "retry"})
        await harness.send("jobs", {"kind": "discard"})
        records = await harness.wait_for_handled(3)
        await harness.wait_until_idle()
    outcomes = sorted(r.outcome.value for r in records)
    assert outcomes == ["discarded", "retry", "succeeded"]
    retry_times = [at for kind, _, at in seen if kind == "retry"]
    assert retry_times[1] - retry_times[0] == pytest.approx(42, abs=0.2)
    assert backend.inner.engine.counts("jobs").visible == 0  # the discarded one was deleted
    assert backend.inner.engine.counts("jobs").in_flight == 0


async def test_undecodable_body_is_failed_with_a_clear_log_line_and_the_worker_goes_on() -> None:
    app = _app()
    bodies: list[object] = []

    @app.handler("jobs", on_error="expire")
    async def handle(message: Message) -> None:
        bodies.append(message.body)

    backend = await _backend_with_dlq(1)
    secret = "card=4111111111111111 not json"
    with capture_logs() as logs:
        async with run_worker(app, backend=backend) as harness:
            await harness.send("jobs", secret)
            await harness.send("jobs", {"ok": True})
            records = await harness.wait_for_handled(2)
            await harness.wait_until_idle()
    assert [r.outcome for r in records] == [Outcome.FAILED, Outcome.SUCCEEDED]
    assert bodies == [{"ok": True}]
    [line] = [e for e in logs if e["event"] == "handler.undecodable_body"]
    assert line["log_level"] == "error" and "invalid JSON" in line["reason"]
    assert all(secret not in repr(entry) for entry in logs)  # never the body
    # Nothing lost: the bad message is still held by SQS rules (in flight until it lapses).
    assert backend.inner.engine.counts("jobs").in_flight == 1


async def test_raw_and_custom_decoders() -> None:
    app = _app()
    got: list[object] = []

    @app.handler("raw", decode="raw")
    async def raw(message: Message) -> None:
        got.append(message.body)

    @app.handler("upper", decode=str.upper)
    async def upper(message: Message) -> None:
        got.append(message.body)

    async with run_worker(app) as harness:
        await harness.send("raw", "plain text")
        await harness.send("upper", "shout")
        await harness.wait_for_handled(2)
    assert sorted(map(str, got)) == ["SHOUT", "plain text"]


async def test_unknown_queue_is_a_clear_error_before_anything_is_received() -> None:
    app = _app()

    @app.handler("missing")
    async def handle(message: Message) -> None:
        return None

    backend = MemoryBackend()
    with pytest.raises(QueueNotFound, match="missing"):
        async with run_worker(app, backend=backend, create_queues=False):
            pass


async def test_a_crashing_handler_never_stops_the_supervisor() -> None:
    app = Worker(WorkerConfig(lease=LEASE, max_in_flight=5))

    @app.handler("jobs")
    async def handle(message: Message) -> None:
        if message.body["n"] % 2:
            raise ValueError("odd")
        if message.body["n"] == 4:
            raise KeyError("four")

    async with run_worker(app) as harness:
        for n in range(10):
            await harness.send("jobs", {"n": n})
        records = await harness.wait_for_handled(10)
    assert sum(r.outcome is Outcome.FAILED for r in records) == 6
    assert sum(r.outcome is Outcome.SUCCEEDED for r in records) >= 4


async def test_sync_handlers_run_in_a_thread() -> None:
    import threading

    app = _app()
    threads: list[str] = []

    @app.handler("jobs")
    def handle(message: Message) -> None:
        threads.append(threading.current_thread().name)

    async with run_worker(app) as harness:
        await harness.send("jobs", {"n": 1})
        [record] = await harness.wait_for_handled(1)
    assert record.outcome is Outcome.SUCCEEDED
    assert threads and threads[0] != threading.main_thread().name


async def test_middleware_wraps_handlers_outermost_first() -> None:
    order: list[str] = []

    async def outer(message: Message, call_next: CallNext) -> None:
        order.append("outer-in")
        await call_next(message)
        order.append("outer-out")

    async def inner(message: Message, call_next: CallNext) -> None:
        order.append("inner-in")
        await call_next(message)
        order.append("inner-out")

    app = Worker(WorkerConfig(lease=LEASE, max_in_flight=1), middleware=[outer])

    @app.handler("jobs", middleware=[inner])
    async def handle(message: Message) -> None:
        order.append("handler")

    async with run_worker(app) as harness:
        await harness.send("jobs", {"n": 1})
        await harness.wait_for_handled(1)
    assert order == ["outer-in", "inner-in", "handler", "inner-out", "outer-out"]


async def test_a_backend_bug_on_any_call_never_stops_the_worker() -> None:
    app = _app()
    seen: list[int] = []

    @app.handler("jobs")
    async def job(message: Message) -> None:
        seen.append(message.receive_count)
        await anyio.sleep(40)  # one renewal at 20 s

    backend = await _backend_with_dlq(5)
    for operation in ("receive", "extend", "delete"):
        backend.failures[operation] = [RuntimeError(f"bug in {operation}")]
    with capture_logs() as logs:
        async with run_worker(app, backend=backend) as harness:
            await harness.send("jobs", {"n": 1})
            [record] = await harness.wait_for_handled(1)
            await harness.wait_until_idle()
    assert record.outcome is Outcome.SUCCEEDED and seen == [1]
    assert backend.inner.engine.counts("jobs").in_flight == 0  # deleted on the retry
    errors = [e for e in logs if e["event"] == "backend.unexpected_error"]
    assert sorted(e["operation"] for e in errors) == [
        "ChangeMessageVisibilityBatch",
        "DeleteMessageBatch",
        "ReceiveMessage",
    ]


async def test_each_handler_run_ends_with_a_debug_event_its_duration_in_milliseconds() -> None:
    app = _app()

    @app.handler("jobs")
    async def slow(message: Message) -> None:
        await anyio.sleep(1.23456)

    backend = MemoryBackend()
    with capture_logs() as logs:
        async with run_worker(app, backend=backend) as harness:
            await backend.send("jobs", [OutgoingMessage(body="{}")])
            await harness.wait_for_handled(1)
    [done] = [event for event in logs if event["event"] == "handler.done"]
    assert done == {
        "event": "handler.done",
        "log_level": "debug",
        "outcome": "succeeded",
        "action": "delete",
        "duration_s": 1.235,
    }


# Found by review: one handler raising Retry(after_s=inf) (or nan) takes the whole worker down.
async def test_retry_with_infinite_delay_does_not_stop_the_worker() -> None:
    app = _app(max_in_flight=2)
    ran: list[int] = []

    @app.handler("jobs")
    async def job(message: Message) -> None:
        ran.append(message.body["n"])
        if message.body["n"] == 0:
            raise Retry(after_s=math.inf)

    backend = RecordingBackend()
    await _prepare(backend, "jobs", 1)
    async with run_worker(app, backend=backend) as harness:
        await anyio.sleep(1)
        await backend.inner.send("jobs", [OutgoingMessage(body='{"n": 1}')])
        with anyio.fail_after(60):
            await harness.wait_for_handled(2)


async def test_a_retry_after_the_handler_cap_is_clamped_by_the_service_cap_only() -> None:
    """`Retry(after_s)` was clamped to the time left under the handler's own max_lease_s (a
    1 s cap made Retry(after_s=3600) a release at 0): the release may last until the
    service's cap, 12 h from the receive."""
    lease = LeaseConfig(visibility_s=30, max_lease_s=60)
    app = Worker(WorkerConfig(lease=lease, max_in_flight=1, wait_s=20))

    @app.handler("jobs")
    async def job(message: Message) -> None:
        await anyio.sleep(40)
        raise Retry(after_s=3_600)

    backend = RecordingBackend()
    await backend.create_queue(QueueSpec("jobs"))
    await _send(backend, "jobs", 1)
    async with run_worker(app, backend=backend) as harness:
        await harness.wait_for_handled(1)
        await harness.wait_until_idle()
    assert [c.visibility for c in backend.of("release")] == [(3_600,)]
