"""bench/flow_rate.py --restart: when the fleet is back at the shared limit, on made-up
handled times (the bench itself runs real processes and a real redis-server)."""

from __future__ import annotations

import pytest

from bench.flow_rate import back_at, over_after


def _steady(start: float, end: float, per_s: float) -> list[float]:
    """Messages evenly `1 / per_s` apart from `start` to `end`."""
    count = round((end - start) * per_s)
    return [start + index / per_s for index in range(count)]


def test_the_fleet_is_back_once_no_window_holds_more_than_the_limit() -> None:
    """50 a second, 150 (three processes alone) from 5 s to 8.2 s, then 50 again: back at
    8.2 s less what a burst hides (10 messages over the limit, at 100 a second over it)."""
    times = _steady(0, 5, 50) + _steady(5, 8.2, 150) + _steady(8.2, 20, 50)
    assert back_at(times, 4.0, 60) == pytest.approx(8.2 - 0.1, abs=1 / 150)


def test_messages_over_the_limit_are_those_beyond_a_burst_and_the_rate() -> None:
    """From 8.0 s: 0.2 s at 150 a second (30 where the limit allows 10 and a burst of 10),
    then 50 a second: 10 over."""
    times = _steady(0, 8.2, 150) + _steady(8.2, 20, 50)
    assert over_after(times, 8.0, 10.0, 50, 10) == 10
    assert over_after(_steady(0, 20, 50), 8.0, 10.0, 50, 10) == 0


def test_a_burst_within_the_limit_s_own_most_does_not_count() -> None:
    """A burst of 10 at once, then 50 a second: never more than 60 in a second."""
    times = [3.0] * 10 + _steady(3.0, 10, 50)
    assert back_at(times, 2.0, 60) == 2.0
