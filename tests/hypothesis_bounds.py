"""`bounded(examples, thorough)`: the hypothesis settings of the project's property tests.

Each property test runs `examples` examples by default (kept small: the whole suite has a
time budget) and `thorough` with `LEASE_WORKER_HYPOTHESIS=thorough` (for a change to what
the test guards); no deadline (a loaded CI machine is slow, not wrong), and none of the
health checks that object to slow generation or to function-scoped fixtures."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

__all__ = ["bounded"]


def bounded(examples: int, thorough: int) -> settings:
    return settings(
        max_examples=thorough
        if os.environ.get("LEASE_WORKER_HYPOTHESIS") == "thorough"
        else examples,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
