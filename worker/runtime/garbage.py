"""`collect_less`: the garbage collector set for a worker process that holds many messages.

CPython starts a young-generation collection every 700 net allocations, and a full one
whenever a quarter more objects have survived than were long-lived at the last. A worker
with 100,000 messages in flight holds a few million live objects (tasks, frames, leases),
and every renewal round makes a few hundred thousand that live until the next (schedule and
timer entries): so full collections of millions of objects land in the middle of renewal
rounds. Measured at 100,000 leases (bench.lease_scale): 1.2 s of CPU per round with
CPython's thresholds, 0.25 s with the collector off, 0.6-0.7 s with a first threshold of
50,000. Reference cycles are rare in the runtime (a message's objects are freed by
reference counting when its task ends), so collecting less often costs little memory.

`gc.freeze()` also moves what exists at start-up (modules, the application, its handlers)
out of every later collection's way.

Process-wide, so the library never calls it by itself: `lease-worker run` does (`--gc`),
and an embedding program may.
"""

from __future__ import annotations

import gc

__all__ = ["DEFAULT_FIRST_THRESHOLD", "collect_less"]

#: Allocations between young-generation collections (CPython's default is 700).
DEFAULT_FIRST_THRESHOLD = 50_000


def collect_less(first_threshold: int = DEFAULT_FIRST_THRESHOLD) -> tuple[int, int, int]:
    """Freeze what exists now and raise the first threshold; returns the thresholds that
    were in force before (for `gc.set_threshold(*previous)`)."""
    if first_threshold < 1:
        raise ValueError(f"first_threshold={first_threshold!r}: must be >= 1")
    previous = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(first_threshold, previous[1], previous[2])
    return previous
