"""`Schedule`: everything a simulation does, drawn from one integer seed, as a plain value.

A schedule is data, not a random stream read while the simulation runs: the same schedule
gives the same history, a shrinker can take parts away (`Schedule.parts`, `Schedule.without`)
and a failing one can be written out and read back (`to_json`, `from_json`).

What it holds:
- the fleet: how many worker slots, the queue's dialect, visibility, long poll, in-flight
  cap, receives at once, maxReceiveCount, the error policy and the shutdown's grace;
- the messages, each sent at a drawn time, and each run of each message's handler: how long
  it takes, whether it blocks its loop (blocking code) and whether it raises;
- the fate of calls, by worker slot, operation and ordinal (the k-th receive of slot 1):
  `late` (landed, its answer held `delay_s`), `lost` (landed, never answered), `refused`
  (not sent) or `slow` (held `delay_s` on the way, then landed and answered); every other
  call is answered after the network's latency;
- flow control (`flow`: none, a rate limit, a cap on the bytes held, adaptive concurrency,
  or, only when asked for, per-tenant caps over `tenants` message groups);
- each slot's clock rate (a host whose clock drifts from the service's: slower by at most
  the drift the runtime allows for, `worker.core.lease.CLOCK_DRIFT`, or up to 2% faster);
- stalls of a slot's process (SIGSTOP, a GC pause), SIGTERMs and SIGKILLs at drawn times; a
  process that ends (stopped or killed) is restarted in its slot `restart_s` later, as a pod.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from worker.core.lease import CLOCK_DRIFT

__all__ = ["Attempt", "Fault", "Schedule", "draw"]

#: The operations whose calls can be given a fate.
OPERATIONS = ("receive", "extend", "delete", "release")
#: Calls per slot and operation whose fate is drawn; later ones are answered.
FATED_CALLS = 80
#: Runs per message whose plan is drawn; later runs are quick and succeed.
PLANNED_RUNS = 6
#: The flow controls `draw` picks from (`tenants` only when asked: `draw(seed, flows=...)`).
FLOWS = ("none", "none", "none", "rate", "bytes", "adaptive")


@dataclass(frozen=True, slots=True)
class Fault:
    """The fate of one call: late, lost, refused or slow (see the module docstring)."""

    slot: int
    operation: str
    ordinal: int
    kind: str
    delay_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Attempt:
    """One run of a message's handler."""

    duration_s: float
    fails: bool = False
    #: Blocking code (the loop stands still) this long before the side effect.
    blocks_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Stall:
    slot: int
    at_s: float
    length_s: float


@dataclass(frozen=True, slots=True)
class Signal:
    slot: int
    at_s: float
    #: "term" (SIGTERM: a graceful shutdown) or "kill" (SIGKILL).
    kind: str


@dataclass(frozen=True, slots=True)
class Schedule:
    seed: int
    dialect: str = "sqs"
    slots: int = 2
    visibility_s: int = 6
    wait_s: int = 5
    max_in_flight: int = 4
    receive_concurrency: int = 1
    max_receive_count: int = 4
    on_error: str = "default"
    grace_s: float = 5.0
    latency_s: float = 0.001
    restart_s: float = 2.0
    #: When the fleet is told to stop (seconds from the start).
    duration_s: float = 60.0
    #: "none", "rate", "bytes", "adaptive" or "tenants" (see `world`).
    flow: str = "none"
    #: Message groups the messages are spread over (message i is in group i % tenants);
    #: 0: no group ids.
    tenants: int = 0
    #: Each slot's clock rate against the service's (1.0: none); empty: all 1.0.
    clock_rates: tuple[float, ...] = ()
    #: Each message's send time (seconds from the start).
    sends: tuple[float, ...] = ()
    #: Each message's runs, in order.
    runs: tuple[tuple[Attempt, ...], ...] = ()
    faults: tuple[Fault, ...] = ()
    stalls: tuple[Stall, ...] = ()
    signals: tuple[Signal, ...] = ()
    _index: dict[tuple[int, str, int], Fault] = field(
        default_factory=dict, compare=False, repr=False
    )

    def __post_init__(self) -> None:
        self._index.update({(f.slot, f.operation, f.ordinal): f for f in self.faults})

    def fault(self, slot: int, operation: str, ordinal: int) -> Fault | None:
        return self._index.get((slot, operation, ordinal))

    def attempt(self, message: int, run: int) -> Attempt:
        planned = self.runs[message]
        return planned[run] if run < len(planned) else Attempt(0.1)

    # -- shrinking ----------------------------------------------------------------------

    def parts(self) -> list[tuple[str, int]]:
        """Every part a shrinker may try to take away, as (kind, index)."""
        found = [("signal", i) for i in range(len(self.signals))]
        found += [("stall", i) for i in range(len(self.stalls))]
        found += [("fault", i) for i in range(len(self.faults))]
        found += [("message", i) for i in range(len(self.sends))]
        for m, runs in enumerate(self.runs):
            found += [("run", m * 1000 + r) for r, run in enumerate(runs) if run != Attempt(0.1)]
        return found

    def without(self, kind: str, index: int) -> Schedule:
        """This schedule with one part taken away (a run made quick and successful)."""
        if kind == "signal":
            return replace(self, signals=_drop(self.signals, index), _index={})
        if kind == "stall":
            return replace(self, stalls=_drop(self.stalls, index), _index={})
        if kind == "fault":
            return replace(self, faults=_drop(self.faults, index), _index={})
        if kind == "message":
            return replace(
                self, sends=_drop(self.sends, index), runs=_drop(self.runs, index), _index={}
            )
        message, run = divmod(index, 1000)
        runs = list(self.runs[message])
        runs[run] = Attempt(0.1)
        changed = (*self.runs[:message], tuple(runs), *self.runs[message + 1 :])
        return replace(self, runs=changed, _index={})

    def size(self) -> int:
        return len(self.parts()) + self.slots

    # -- reading and writing ------------------------------------------------------------

    def to_json(self) -> str:
        fields = asdict(self)
        fields.pop("_index")
        quick = asdict(Attempt(0.1))
        fields["runs"] = [list(runs) for runs in fields["runs"]]
        for runs in fields["runs"]:
            while runs and runs[-1] == quick:  # what `attempt` gives past the end anyway
                runs.pop()
        return json.dumps(fields, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Schedule:
        fields: dict[str, Any] = json.loads(text)
        fields["sends"] = tuple(fields["sends"])
        fields["runs"] = tuple(tuple(Attempt(**a) for a in runs) for runs in fields["runs"])
        fields["faults"] = tuple(Fault(**f) for f in fields["faults"])
        fields["stalls"] = tuple(Stall(**s) for s in fields["stalls"])
        fields["signals"] = tuple(Signal(**s) for s in fields["signals"])
        fields["clock_rates"] = tuple(fields.get("clock_rates", ()))
        return cls(**fields)


def _drop(items: tuple[Any, ...], index: int) -> tuple[Any, ...]:
    return items[:index] + items[index + 1 :]


def draw(seed: int, *, flows: tuple[str, ...] = FLOWS) -> Schedule:
    """The schedule of `seed`: the same seed, the same schedule, on any machine. `flows`:
    the flow controls to pick from (each as likely as it is repeated)."""
    rng = random.Random(seed)
    dialect = "smq" if rng.random() < 0.2 else "sqs"
    visibility = rng.choice((3, 4, 6, 10, 30))
    longest_wait = 30 if dialect == "smq" else 20
    slots = rng.choice((2, 2, 3))
    duration = 60.0
    messages = rng.randint(3, 12)
    fail_rate = rng.choice((0.0, 0.1, 0.3))
    fault_rate = rng.choice((0.0, 0.02, 0.08, 0.2))
    sends = tuple(
        0.0 if rng.random() < 0.5 else round(rng.uniform(0, duration * 0.7), 3)
        for _ in range(messages)
    )
    runs = tuple(
        tuple(_attempt(rng, visibility, fail_rate) for _ in range(PLANNED_RUNS))
        for _ in range(messages)
    )
    faults = tuple(
        _fault(rng, slot, operation, ordinal, visibility)
        for slot in range(slots)
        for operation in OPERATIONS
        for ordinal in range(FATED_CALLS)
        if rng.random() < fault_rate
    )
    stalls = tuple(
        Stall(
            rng.randrange(slots),
            round(rng.uniform(0, duration), 3),
            round(rng.uniform(0.1, 2.5 * visibility), 3),
        )
        for _ in range(rng.choice((0, 0, 1, 2, 3)))
    )
    signals = tuple(
        Signal(rng.randrange(slots), round(rng.uniform(0, duration), 3), kind)
        for kind in ("term", "kill")
        if rng.random() < 0.3
    )
    flow = rng.choice(flows)
    tenants = rng.choice((0, 2, 3)) if flow != "tenants" else rng.choice((2, 3))
    skewed = rng.random() < 0.3
    # Slow by at most the drift the runtime allows for (`CLOCK_DRIFT`), fast by up to 2%.
    slowest = 1.0 - 0.9 * CLOCK_DRIFT
    rates = tuple(round(rng.uniform(slowest, 1.02), 6) for _ in range(slots)) if skewed else ()
    return Schedule(
        seed=seed,
        flow=flow,
        tenants=tenants,
        clock_rates=rates,
        dialect=dialect,
        slots=slots,
        visibility_s=visibility,
        wait_s=min(longest_wait, rng.choice((1, 2, 5, 20))),
        max_in_flight=rng.randint(1, 6),
        receive_concurrency=rng.choice((1, 1, 2)),
        max_receive_count=rng.randint(2, 6),
        on_error=rng.choice(("default", "release", "backoff", "expire")),
        grace_s=rng.choice((0.5, 5.0, 30.0)),
        latency_s=rng.choice((0.0005, 0.01, 0.1)),
        duration_s=duration,
        sends=sends,
        runs=runs,
        faults=faults,
        stalls=stalls,
        signals=signals,
    )


def _attempt(rng: random.Random, visibility: int, fail_rate: float) -> Attempt:
    roll = rng.random()
    if roll < 0.1:
        duration = 0.0
    elif roll < 0.7:
        duration = rng.uniform(0, 0.5 * visibility)
    else:
        duration = rng.uniform(visibility, 4 * visibility)
    blocks = rng.uniform(0, 2 * visibility) if rng.random() < 0.05 else 0.0
    return Attempt(round(duration, 3), rng.random() < fail_rate, round(blocks, 3))


def _fault(rng: random.Random, slot: int, operation: str, ordinal: int, visibility: int) -> Fault:
    kind = rng.choice(("late", "late", "lost", "refused", "slow"))
    delay = 0.0
    if kind == "late":
        delay = rng.uniform(0, 2.5 * visibility)
    elif kind == "slow":
        delay = rng.uniform(0, 1.5 * visibility)
    return Fault(slot, operation, ordinal, kind, round(delay, 3))
