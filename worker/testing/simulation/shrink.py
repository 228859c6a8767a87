"""`shrink(schedule, fails)`: the smallest schedule found that still fails the same way.

Greedy, one part at a time (FoundationDB and TigerBeetle minimise their failing seeds the
same way, by taking schedule parts out and keeping what still fails): a signal, a stall, a
call's fate, a message, or one run's drawn duration and failure (made a quick success). A
pass goes from the last part to the first, so that taking one away never renumbers a part
not yet tried; passes repeat until one takes nothing away, or the budget of runs is spent.
The shrunk schedule is a plain value: `Schedule.to_json` writes it for an exact replay.
"""

from __future__ import annotations

from collections.abc import Callable

from worker.testing.simulation.schedule import Schedule

__all__ = ["shrink"]


def shrink(
    schedule: Schedule, fails: Callable[[Schedule], bool], *, budget: int = 3000
) -> Schedule:
    """Take parts out of `schedule` while `fails` still holds, within `budget` runs."""
    current = schedule
    while budget > 0:
        smaller = False
        for kind, index in reversed(current.parts()):
            if budget <= 0:
                break
            candidate = current.without(kind, index)
            budget -= 1
            if fails(candidate):
                current, smaller = candidate, True
        if not smaller:
            break
    return current
