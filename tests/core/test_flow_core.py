"""The pure parts of flow control: the rate schedule (GCRA) and the adaptive limit."""

from __future__ import annotations

import pytest

from worker.core.concurrency import ConcurrencyLimit
from worker.core.rate import RateSchedule


def test_a_schedule_grants_its_burst_at_once_then_one_token_per_interval() -> None:
    schedule = RateSchedule(per_s=10, burst=5)
    assert schedule.grant(5, now=100.0) == 100.0
    # The bucket is empty: the next token comes 0.1 s later, the tenth after 1 s.
    assert schedule.grant(1, now=100.0) == pytest.approx(100.1)
    assert schedule.grant(9, now=100.0) == pytest.approx(101.0)


def test_a_grant_larger_than_the_burst_waits_for_the_rest() -> None:
    schedule = RateSchedule(per_s=50, burst=1)
    assert schedule.grant(10, now=0.0) == pytest.approx(9 / 50)


def test_over_a_long_run_the_schedule_grants_exactly_the_rate_plus_the_burst() -> None:
    schedule = RateSchedule(per_s=50, burst=10)
    now, granted = 0.0, 0
    while True:
        at = schedule.grant(10, now)
        if at > 60.0 + 1e-9:
            break
        now, granted = at, granted + 10
    assert granted == 50 * 60 + 10


def test_an_idle_spell_restores_the_burst_and_no_more() -> None:
    schedule = RateSchedule(per_s=10, burst=3)
    schedule.grant(3, now=0.0)
    assert schedule.grant(3, now=60.0) == 60.0
    assert schedule.grant(1, now=60.0) == pytest.approx(60.1)


def test_a_refund_gives_back_unused_tokens_but_never_time_already_past() -> None:
    schedule = RateSchedule(per_s=10, burst=1)
    assert schedule.grant(10, now=0.0) == pytest.approx(0.9)
    schedule.refund(5, now=0.0)  # the receive brought 5 of the 10
    assert schedule.grant(1, now=0.0) == pytest.approx(0.5)
    schedule.refund(1000, now=2.0)
    assert schedule.tat == 2.0


@pytest.mark.parametrize(("per_s", "burst"), [(0, 1), (-1, 1), (float("nan"), 1), (1, 0)])
def test_a_schedule_refuses_nonsense(per_s: float, burst: int) -> None:
    with pytest.raises(ValueError):
        RateSchedule(per_s=per_s, burst=burst)


def _settle(limit: ConcurrencyLimit, *, capacity: int, base_s: float, rounds: int) -> list[int]:
    """A downstream that serves `capacity` at once: beyond that, requests queue and each one
    takes proportionally longer. Every handler the limit allows is busy (a full backlog).
    Returns the limit after each round, but for the probe windows."""
    seen = []
    for _ in range(rounds):
        running = limit.current
        duration = base_s * max(1.0, running / capacity)
        for _ in range(running):
            limit.record(duration, failed=False, running=running)
        if not limit.probing:
            seen.append(limit.current)
    return seen


def test_the_adaptive_limit_settles_just_above_what_the_downstream_serves() -> None:
    limit = ConcurrencyLimit(largest=100, initial=5)
    seen = _settle(limit, capacity=20, base_s=0.1, rounds=400)
    assert max(seen[:10]) < 20  # it starts low and grows by one a window
    assert all(20 <= value <= 30 for value in seen[-100:]), seen[-100:]


def test_a_probe_window_runs_under_what_the_downstream_serves_and_resumes() -> None:
    limit = ConcurrencyLimit(largest=100, initial=5, probe_every=10)
    _settle(limit, capacity=20, base_s=0.1, rounds=300)
    probes = []
    for _ in range(200):
        running = limit.current
        if limit.probing:
            probes.append(running)
        for _ in range(running):
            limit.record(0.1 * max(1.0, running / 20), failed=False, running=running)
    assert probes, "no probe window in 200 rounds"
    while limit.probing:
        limit.record(0.1, failed=False, running=limit.current)
    assert all(15 <= value < 20 for value in probes), probes
    assert 20 <= limit.current <= 30


def test_a_downstream_slower_for_good_is_learned_by_the_probes() -> None:
    limit = ConcurrencyLimit(largest=100, initial=5)
    _settle(limit, capacity=20, base_s=0.1, rounds=300)
    seen = _settle(limit, capacity=20, base_s=0.3, rounds=600)
    assert all(20 <= value <= 30 for value in seen[-100:]), seen[-100:]


def test_the_adaptive_limit_never_passes_max_in_flight() -> None:
    limit = ConcurrencyLimit(largest=12, initial=1)
    seen = _settle(limit, capacity=50, base_s=0.1, rounds=200)
    assert max(seen) == 12
    assert seen[-1] == 12


def test_a_failure_cuts_the_limit_by_the_backoff_factor() -> None:
    limit = ConcurrencyLimit(largest=100, initial=40)
    for index in range(40):
        limit.record(0.1, failed=index == 7, running=40)
    assert limit.current == 36


def test_the_limit_does_not_grow_while_most_of_it_is_unused() -> None:
    limit = ConcurrencyLimit(largest=100, initial=20)
    for _ in range(200):
        limit.record(0.1, failed=False, running=3)
    assert limit.current == 20


def test_the_limit_comes_back_after_the_downstream_recovers() -> None:
    limit = ConcurrencyLimit(largest=100, initial=30)
    for _ in range(30):
        for _ in range(limit.current):
            limit.record(0.1, failed=True, running=limit.current)
    low = limit.current
    assert low == 1
    seen = _settle(limit, capacity=20, base_s=0.1, rounds=200)
    assert 20 <= seen[-1] <= 30


@pytest.mark.parametrize(
    "options",
    [
        {"largest": 0},
        {"largest": 5, "smallest": 6},
        {"largest": 5, "backoff": 1.0},
        {"largest": 5, "alpha": 7, "beta": 6},
    ],
)
def test_an_adaptive_limit_refuses_nonsense(options: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        ConcurrencyLimit(**options)  # type: ignore[arg-type]
