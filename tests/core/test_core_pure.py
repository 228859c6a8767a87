"""Pure parts of the core: the lease schedule, outcomes, config, registration, histogram."""

from __future__ import annotations

import math

import pytest

from worker import (
    Backoff,
    ConfigError,
    ErrorPolicy,
    LeaseConfig,
    Message,
    OnError,
    RegistrationError,
    ShutdownConfig,
    Worker,
    WorkerConfig,
)
from worker.core.histogram import DurationHistogram
from worker.core.preflight import check_queue
from worker.core.schedule import LeaseSchedule
from worker.core.settlement import Action, Outcome, Settlement, settlement_for
from worker.registry import HandlerSpec
from worker.types import QueueInfo, RedrivePolicy

# -- the lease schedule ---------------------------------------------------------------------


def test_schedule_takes_nothing_until_the_first_lease_is_due() -> None:
    schedule: LeaseSchedule[str] = LeaseSchedule()
    schedule.set("a", "q", 10.0)
    assert schedule.next_due() == 10.0
    assert schedule.pop_batch(9.9, window=5, limit=10) is None
    assert schedule.pop_batch(10.0, window=5, limit=10) == ("q", ["a"])
    assert len(schedule) == 0 and schedule.next_due() is None


def test_schedule_full_batch_waits_for_its_own_first_lease() -> None:
    schedule: LeaseSchedule[int] = LeaseSchedule()
    for i in range(12):
        schedule.set(i, "q", 100.0 + i)
    first = schedule.pop_batch(100.0, window=50, limit=10)
    assert first is not None and first[1] == list(range(10))
    assert schedule.pop_batch(100.0, window=50, limit=10) is None  # 10 is due at 110
    assert schedule.next_due() == 110.0


def test_schedule_coalesces_leases_due_within_the_window_up_to_the_limit() -> None:
    schedule: LeaseSchedule[int] = LeaseSchedule()
    for i in range(25):
        schedule.set(i, "q", 100.0 + i * 0.1)  # all within 2.5 s
    schedule.set(99, "q", 200.0)  # far outside the window
    batches = []
    while (batch := schedule.pop_batch(103.0, window=5, limit=10)) is not None:
        batches.append(batch[1])
    assert [len(b) for b in batches] == [10, 10, 5]
    assert [k for b in batches for k in b] == list(range(25))  # in due order
    assert schedule.next_due() == 200.0


def test_schedule_keeps_queues_apart() -> None:
    schedule: LeaseSchedule[str] = LeaseSchedule()
    schedule.set("a1", "a", 1.0)
    schedule.set("b1", "b", 1.0)
    first = schedule.pop_batch(1.0, window=5, limit=10)
    second = schedule.pop_batch(1.0, window=5, limit=10)
    assert first is not None and second is not None
    assert {first[0]: first[1], second[0]: second[1]} == {"a": ["a1"], "b": ["b1"]}


def test_schedule_reschedule_and_discard_are_lazy_but_exact() -> None:
    schedule: LeaseSchedule[str] = LeaseSchedule()
    schedule.set("a", "q", 1.0)
    schedule.set("a", "q", 50.0)  # moved later: the old entry must not fire
    schedule.set("b", "q", 2.0)
    schedule.discard("b")
    assert schedule.next_due() == 50.0
    assert schedule.pop_batch(10.0, window=0, limit=10) is None
    assert schedule.due_at("a") == 50.0 and "b" not in schedule
    assert schedule.pop_batch(50.0, window=0, limit=10) == ("q", ["a"])


def test_schedule_handles_100k_leases() -> None:
    schedule: LeaseSchedule[int] = LeaseSchedule()
    for i in range(100_000):
        schedule.set(i, "q", float(i % 1000))
    taken = 0
    while (batch := schedule.pop_batch(1000.0, window=0, limit=10)) is not None:
        assert len(batch[1]) <= 10
        taken += len(batch[1])
    assert taken == 100_000


# -- outcomes -------------------------------------------------------------------------------

RELEASE = ErrorPolicy(on_error=OnError.RELEASE)
BACKOFF = ErrorPolicy(on_error=OnError.BACKOFF, backoff=Backoff(base_s=10, factor=3, max_s=100))
EXPIRE = ErrorPolicy(on_error=OnError.EXPIRE)


@pytest.mark.parametrize("outcome", [Outcome.SUCCEEDED, Outcome.DISCARDED])
def test_success_and_discard_delete(outcome: Outcome) -> None:
    assert settlement_for(outcome, policy=EXPIRE, receive_count=1).action is Action.DELETE


def test_lost_lease_is_forgotten_whatever_the_policy() -> None:
    for policy in (RELEASE, BACKOFF, EXPIRE):
        assert (
            settlement_for(Outcome.LEASE_LOST, policy=policy, receive_count=3).action
            is Action.FORGET
        )


def test_failure_follows_the_policy() -> None:
    assert settlement_for(Outcome.FAILED, policy=RELEASE, receive_count=1) == Settlement(
        Action.RELEASE, 0
    )
    assert settlement_for(Outcome.FAILED, policy=EXPIRE, receive_count=1).action is Action.FORGET
    delays = [
        settlement_for(Outcome.FAILED, policy=BACKOFF, receive_count=n).visibility_s
        for n in (1, 2, 3, 4)
    ]
    assert delays == [10, 30, 90, 100]
    assert settlement_for(Outcome.TIMED_OUT, policy=BACKOFF, receive_count=2).visibility_s == 30


def test_shutdown_releases_at_once_even_under_expire() -> None:
    assert settlement_for(Outcome.SHUTDOWN, policy=EXPIRE, receive_count=1) == Settlement(
        Action.RELEASE, 0
    )


def test_release_respects_backend_minimum_and_the_cap() -> None:
    got = settlement_for(Outcome.SHUTDOWN, policy=RELEASE, receive_count=1, min_release_s=1)
    assert got == Settlement(Action.RELEASE, 1)
    capped = settlement_for(
        Outcome.RETRY, policy=RELEASE, receive_count=1, retry_after_s=900, cap_left_s=60.5
    )
    assert capped == Settlement(Action.RELEASE, 60)
    assert (
        settlement_for(
            Outcome.RETRY, policy=RELEASE, receive_count=1, retry_after_s=2.2
        ).visibility_s
        == 3
    )


def test_backoff_never_overflows() -> None:
    assert Backoff(base_s=1, factor=10, max_s=900).delay_s(10_000) == 900


# -- config ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"visibility_s": 0}, "visibility_s=0"),
        ({"visibility_s": 43_201}, "visibility_s=43201"),
        ({"extension_s": 2.5}, "extension_s=2.5"),
        ({"renew_margin_s": 30}, "renew_margin_s=30"),
        ({"max_lease_s": 50_000}, "12 h"),
        ({"renew_margin_s": -1}, "renew_margin_s=-1"),
        ({"retry_interval_s": math.nan}, "retry_interval_s=nan"),
        ({"adaptive": True, "adaptive_min_s": 5}, "renew_margin_s"),
        ({"adaptive_min_s": 100, "adaptive_max_s": 50}, "adaptive_min_s=100"),
    ],
)
def test_invalid_lease_config_names_the_setting(kwargs: dict[str, object], fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment.replace("(", r"\(")):
        LeaseConfig(**kwargs)  # type: ignore[arg-type]


def test_invalid_worker_config() -> None:
    with pytest.raises(ConfigError, match="max_in_flight=0"):
        WorkerConfig(max_in_flight=0)
    with pytest.raises(ConfigError, match="wait_s=-1"):
        WorkerConfig(wait_s=-1)
    with pytest.raises(ConfigError, match="grace_s=-1"):
        ShutdownConfig(grace_s=-1)
    with pytest.raises(ConfigError, match="on_error='sometimes'"):
        ErrorPolicy.parse("sometimes")


def test_config_is_frozen() -> None:
    config = LeaseConfig()
    with pytest.raises(AttributeError):
        config.visibility_s = 5  # type: ignore[misc]


# -- registration ---------------------------------------------------------------------------


async def _noop(message: Message) -> None:
    return None


def test_decorator_returns_the_function_unchanged() -> None:
    app = Worker()
    assert app.handler("orders")(_noop) is _noop
    spec = app.registry["orders"]
    assert spec.is_async and spec.policy.on_error is OnError.DEFAULT


def test_sync_handlers_and_async_callables_are_told_apart() -> None:
    class Callable:
        async def __call__(self, message: Message) -> None:
            return None

    def sync(message: Message) -> None:
        return None

    app = Worker()
    app.handler("a")(sync)
    app.handler("b")(Callable())
    assert not app.registry["a"].is_async and app.registry["b"].is_async


def test_registration_errors_are_clear() -> None:
    app = Worker()
    app.handler("orders")(_noop)
    with pytest.raises(RegistrationError, match="'orders' already has a handler"):
        app.handler("orders")(_noop)
    with pytest.raises(RegistrationError, match="must be callable"):
        app.handler("other")(42)
    with pytest.raises(RegistrationError, match="queue name"):
        app.handler("bad name!")
        app.handler("bad name!")(_noop)
    with pytest.raises(ConfigError, match="decode='yaml'"):
        app.handler("x", decode="yaml")(_noop)
    with pytest.raises(ConfigError, match="on_error='never'"):
        app.handler("y", on_error="never")(_noop)
    with pytest.raises(ConfigError, match="max_in_flight=0"):
        app.handler("z", max_in_flight=0)(_noop)
    assert app.registry.queues == ["orders"]  # nothing half-registered


def test_queue_may_be_a_url_or_fifo_name() -> None:
    app = Worker()
    app.handler("https://sqs.us-east-1.amazonaws.com/123456789012/orders")(_noop)
    app.handler("events.fifo")(_noop)
    assert len(app.registry) == 2


# -- histogram ------------------------------------------------------------------------------


def test_histogram_p99_is_clamped() -> None:
    histogram = DurationHistogram(min_s=10, max_s=600)
    assert histogram.percentile(99) == 10  # empty: the minimum
    for _ in range(98):
        histogram.add(1.0)
    histogram.add(45.2)
    histogram.add(10_000)
    assert histogram.percentile(50) == 10
    assert histogram.percentile(99) == 46
    assert histogram.percentile(100) == 600


# -- preflight ------------------------------------------------------------------------------


def _spec(on_error: ErrorPolicy | str) -> HandlerSpec:
    app = Worker()
    app.handler("q", on_error=on_error)(_noop)
    return app.registry["q"]


def _info(*, dlq: bool, fifo: bool = False, visibility: int = 30) -> QueueInfo:
    return QueueInfo(
        name="q",
        url="u",
        visibility_timeout_s=visibility,
        fifo=fifo,
        redrive=RedrivePolicy("q-dlq", 3) if dlq else None,
    )


def test_preflight_is_quiet_for_a_sound_setup() -> None:
    assert check_queue(_spec("release").policy, _info(dlq=True), LeaseConfig()) == []


def test_preflight_warns_about_expire_without_a_dlq() -> None:
    [warning] = check_queue(_spec("expire").policy, _info(dlq=False), LeaseConfig())
    assert "no dead-letter queue" in warning


def test_preflight_warns_when_the_dlq_comes_before_the_backoff_maximum() -> None:
    policy = ErrorPolicy(on_error=OnError.BACKOFF, backoff=Backoff(base_s=5, factor=2, max_s=900))
    [warning] = check_queue(_spec(policy).policy, _info(dlq=True), LeaseConfig())
    assert "maxReceiveCount=3" in warning and "20 s" in warning


def test_preflight_warns_about_backoff_without_a_dlq() -> None:
    # Defect: a backoff policy on a queue without a DLQ retried for ever, without a word.
    policy = ErrorPolicy(on_error=OnError.BACKOFF)
    [warning] = check_queue(_spec(policy).policy, _info(dlq=False), LeaseConfig())
    assert "no dead-letter queue" in warning and "'backoff'" in warning


def test_preflight_warns_about_a_visibility_timeout_within_the_margin() -> None:
    [warning] = check_queue(_spec("release").policy, _info(dlq=True, visibility=5), LeaseConfig())
    assert "VisibilityTimeout=5" in warning


def test_preflight_warns_about_expire_on_fifo() -> None:
    warnings = check_queue(_spec("expire").policy, _info(dlq=True, fifo=True), LeaseConfig())
    assert any("FIFO" in w for w in warnings)
