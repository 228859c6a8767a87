"""A rate limit as a schedule of grants: the generic cell rate algorithm (GCRA).

A limit of `per_s` messages a second with a `burst` is kept as one number, the theoretical
arrival time (TAT): when the next token would be free if tokens were taken at exactly the
limit. A request for `count` tokens is never refused: it is granted at the earliest time the
limit allows, and the TAT moves on by `count / per_s`. The caller waits until then and uses
its tokens without asking again, so each grant costs one decision (one Redis call when the
schedule is shared, `worker.runtime.rate_store`), however many processes compete: there is
no "denied, ask again" round.

Tokens granted and then not used (a receive that brought fewer messages) can be handed back
with `refund`, which moves the TAT back, never before `now`: a limit is never exceeded by a
refund, only a grant given back that nobody else took meanwhile.

Pure: the caller passes the time (seconds on any monotonic clock; for a shared schedule, the
server's clock).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["RateSchedule"]


@dataclass(slots=True)
class RateSchedule:
    """`per_s` tokens a second, up to `burst` at once after an idle spell."""

    per_s: float
    burst: int = 1
    #: The theoretical arrival time of the next token.
    tat: float = -math.inf

    def __post_init__(self) -> None:
        if not (math.isfinite(self.per_s) and self.per_s > 0):
            raise ValueError(f"per_s={self.per_s!r}: must be a number > 0")
        if self.burst < 1:
            raise ValueError(f"burst={self.burst!r}: must be >= 1")

    def grant(self, count: int, now: float) -> float:
        """Take `count` tokens; returns the time at which they may be used (>= `now`)."""
        interval = 1.0 / self.per_s
        start = max(self.tat, now)
        self.tat = start + count * interval
        # The burst lets the TAT run this far ahead of now before anyone has to wait.
        return max(now, self.tat - self.burst * interval)

    def refund(self, count: int, now: float) -> None:
        """Hand back `count` tokens granted and not used."""
        if count > 0:
            self.tat = max(now, self.tat - count / self.per_s)
