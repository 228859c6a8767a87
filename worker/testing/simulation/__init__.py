"""Deterministic simulation of a fleet of workers: the real runtime, on one virtual clock,
against the in-memory engine, every call's fate, stalls and signals drawn from one seed.

::

    from worker.testing.simulation import draw, simulate

    result = simulate(draw(seed=31))
    assert not result.violations, result.violations

- `draw(seed)` gives a `Schedule` (`schedule`): a plain value, written out with `to_json`.
- `simulate(schedule)` runs it (`world`) on a `SimLoop` (`loop`: virtual time, processes
  stalled one by one) over a simulated `Network` (`network`), and checks the `History`
  (`history`: the rules a run must keep, judged by the engine's own state).
- `shrink(schedule, fails)` takes parts away while the failure holds (`shrink`).
- `python -m bench.simulate --seeds N` runs as many seeds as you like on every core.
"""

from worker.testing.simulation.history import History, Violation
from worker.testing.simulation.loop import SimLoop
from worker.testing.simulation.schedule import Attempt, Fault, Schedule, draw
from worker.testing.simulation.shrink import shrink
from worker.testing.simulation.world import Result, simulate

__all__ = (
    "Attempt",
    "Fault",
    "History",
    "Result",
    "Schedule",
    "SimLoop",
    "Violation",
    "draw",
    "shrink",
    "simulate",
)
