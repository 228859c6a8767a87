"""bench.flow_fleet at smoke size: real worker processes against a real serve-sqs, on a queue
that dead-letters after 2 receives. What it checks holds at any size (nothing in the
dead-letter queue, nothing run twice, the cap held in each process); the times it reports
are the bench's to judge."""

from __future__ import annotations

import argparse

from bench.flow_fleet import Run, one


def _args(**changes: object) -> argparse.Namespace:
    values = {"busy": 40, "per_quiet": 2, "cap": 2, "work_s": 0.05, "workers": 2, "hold": None}
    return argparse.Namespace(**{**values, "deadline_s": 60.0, **changes})


def test_a_capped_busy_tenant_on_a_fair_queue_loses_nothing_and_runs_nothing_twice() -> None:
    result = one(Run("fair queue", busy=True, max_receive_count=2), _args())
    assert (result.sent, result.handled, result.twice, result.dead) == (58, 58, 0, 0)
    assert result.busy_most == 2
    assert len(result.quiet) == 18


def test_a_tenant_key_that_raises_still_caps_every_message_as_one_tenant() -> None:
    result = one(
        Run("body key", busy=True, max_receive_count=2),
        _args(),
        key="raises",
        busy=12,
        quiet_each=0,
        work_s=0.2,
    )
    assert (result.sent, result.handled, result.twice, result.dead) == (12, 12, 0, 0)
    assert sum(result.key_errors) == 12  # every message, counted once
    assert result.busy_most <= 2  # the fallback tenant "<key failed>" is capped
    # One warning (within the minute) in each process whose key failed, none elsewhere.
    assert [min(errors, 1) for errors in result.key_errors] == result.key_warnings
