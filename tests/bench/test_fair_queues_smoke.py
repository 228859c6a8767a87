"""bench.fair_queues at smoke size (virtual time): the three runs, and the fair queue's point."""

from __future__ import annotations

from bench.fair_queues import QUIET, Setup, run, table


def test_fair_queues_at_smoke_size() -> None:
    setup = Setup(slots=100, quiet=25, bursts=3)
    alone, fair, unfair = run(setup)
    per_run = len(QUIET) * 25 * 3
    assert (len(alone.quiet), len(fair.quiet), len(unfair.quiet)) == (per_run,) * 3
    assert (len(alone.noisy), len(fair.noisy), len(unfair.noisy)) == (0, 750, 750)
    # Quiet tenants jump the noisy backlog only on the fair queue.
    assert fair.median() < unfair.median() / 2
    assert fair.median("noisy") > unfair.median("noisy")
    assert table(setup, [alone, fair, unfair])[-1].startswith("goal: fair ÷ alone ≤ 2: ")
