"""The default error policy (issue 28, item 1): the first retry at once, then a jittered backoff.

The default released every failure with visibility 0, so a message that always fails looped
as fast as the service answered on a queue without a dead-letter queue (3,604 receives in
192 s). Explicit policies keep their meaning; every policy warns, in one line, on a queue
without a dead-letter queue.
"""

from __future__ import annotations

import pytest

from worker import Backoff, ErrorPolicy, LeaseConfig, Message, OnError, Worker
from worker.core.preflight import check_queue
from worker.core.settlement import Action, Outcome, Settlement, default_delay_s, settlement_for
from worker.types import QueueInfo, RedrivePolicy

DEFAULT = ErrorPolicy()


def _delays(
    message_id: str,
    counts: range,
    *,
    min_release_s: int = 0,
    max_visibility_s: int = 43_200,
    cap_left_s: float = 43_200.0,
) -> list[int]:
    return [
        settlement_for(
            Outcome.FAILED,
            policy=DEFAULT,
            receive_count=n,
            message_id=message_id,
            min_release_s=min_release_s,
            max_visibility_s=max_visibility_s,
            cap_left_s=cap_left_s,
        ).visibility_s
        for n in counts
    ]


async def _noop(message: Message) -> None:
    return None


def test_the_default_policy_is_neither_release_nor_explicit_backoff() -> None:
    app = Worker()
    app.handler("q")(_noop)
    assert app.registry["q"].policy == ErrorPolicy(on_error=OnError.DEFAULT, backoff=Backoff())
    assert ErrorPolicy.parse("default") == DEFAULT
    assert DEFAULT.on_error is OnError.DEFAULT


def test_first_retry_at_once_then_backoff_one_receive_behind_cut_by_up_to_half() -> None:
    assert _delays("m-1", range(1, 2)) == [0]
    for message_id in ("m-1", "m-2", "m-3", "a" * 80):
        for n in range(2, 14):
            full = Backoff().delay_s(n - 1)  # 5, 10, 20 ... 900
            got = default_delay_s(DEFAULT, n, message_id)
            assert full / 2 < got <= full, (message_id, n)
    # Released for whole seconds, rounded up.
    assert _delays("m-1", range(1, 6)) == [0, 3, 10, 20, 21]


def test_the_jitter_is_the_same_on_every_run_and_differs_between_messages() -> None:
    assert _delays("m-1", range(1, 12)) == _delays("m-1", range(1, 12))
    second_retries = {default_delay_s(DEFAULT, 2, f"m-{i}") for i in range(50)}
    assert len(second_retries) == 50  # messages that failed together come back apart
    assert min(second_retries) < 3.0 and max(second_retries) > 4.5


def test_at_most_ten_receives_in_a_minute_whatever_the_jitter() -> None:
    for i in range(200):
        at, receives = 0.0, 1
        while True:
            at += _delays(f"m-{i}", range(receives, receives + 1))[0]
            if at > 60:
                break
            receives += 1
        assert receives <= 6, i


def test_the_default_schedule_follows_the_policys_backoff() -> None:
    policy = ErrorPolicy(backoff=Backoff(base_s=2, factor=3, max_s=10))
    for n, full in ((2, 2), (3, 6), (4, 10), (40, 10)):
        assert full / 2 < default_delay_s(policy, n, "m") <= full


def test_the_default_is_capped_by_the_queues_limits() -> None:
    far = range(12, 15)  # the schedule is at 450-900 s here
    assert _delays("m-1", far, cap_left_s=100.7) == [100, 100, 100]
    assert _delays("m-1", far, max_visibility_s=60) == [60, 60, 60]
    # SMQ's shortest release is 1 s: the immediate retry is 1 s there.
    assert _delays("m-1", range(1, 2), min_release_s=1) == [1]


def test_shutdown_skipped_and_retry_are_unchanged_under_the_default() -> None:
    for outcome in (Outcome.SHUTDOWN, Outcome.SKIPPED):
        assert settlement_for(outcome, policy=DEFAULT, receive_count=5) == Settlement(
            Action.RELEASE, 0
        )
    retry = settlement_for(Outcome.RETRY, policy=DEFAULT, receive_count=5, retry_after_s=7)
    assert retry == Settlement(Action.RELEASE, 7)
    timed_out = settlement_for(Outcome.TIMED_OUT, policy=DEFAULT, receive_count=1)
    assert timed_out == Settlement(Action.RELEASE, 0)


@pytest.mark.parametrize("receive_count", [1, 2, 5, 40])
def test_explicit_policies_keep_their_meaning(receive_count: int) -> None:
    def failed(policy: ErrorPolicy) -> Settlement:
        return settlement_for(
            Outcome.FAILED, policy=policy, receive_count=receive_count, message_id="m-1"
        )

    assert failed(ErrorPolicy.parse("release")) == Settlement(Action.RELEASE, 0)
    assert failed(ErrorPolicy.parse("expire")).action is Action.FORGET
    backoff = Backoff().delay_s(receive_count)  # 5, 10, 40, 900: no jitter, not shifted
    assert failed(ErrorPolicy.parse("backoff")) == Settlement(Action.RELEASE, int(backoff))


# -- the start-up warning -------------------------------------------------------------------


def _info(*, dlq: bool) -> QueueInfo:
    redrive = RedrivePolicy("jobs-dlq", 3) if dlq else None
    return QueueInfo(name="jobs", url="u", visibility_timeout_s=30, redrive=redrive)


NO_DLQ = (
    "queue 'jobs' has no dead-letter queue: a message that always fails is received again "
    "and again until the retention period ends (error policy {}); give the queue a "
    "RedrivePolicy (a dead-letter queue and maxReceiveCount)"
)


@pytest.mark.parametrize(
    ("policy", "pace"),
    [
        (ErrorPolicy(), "'default': backing off to once every 450-900 s"),
        (ErrorPolicy.parse("release"), "'release': at once, as fast as the service answers"),
        (ErrorPolicy.parse("backoff"), "'backoff': backing off to once every 900 s"),
        (ErrorPolicy.parse("expire"), "'expire': each time its visibility lapses"),
        (
            ErrorPolicy(on_error=OnError.BACKOFF, backoff=Backoff(max_s=0)),
            "'backoff': at once, as fast as the service answers",
        ),
    ],
)
def test_every_policy_warns_in_one_line_on_a_queue_without_a_dlq(
    policy: ErrorPolicy, pace: str
) -> None:
    assert check_queue(policy, _info(dlq=False), LeaseConfig()) == [NO_DLQ.format(pace)]


def test_the_default_policy_does_not_warn_on_a_queue_with_a_dlq() -> None:
    # examples/hello.py: maxReceiveCount=3, the default policy. 'backoff' would warn that the
    # DLQ comes before its schedule's maximum; the default's schedule is not the user's choice.
    assert check_queue(ErrorPolicy(), _info(dlq=True), LeaseConfig()) == []
