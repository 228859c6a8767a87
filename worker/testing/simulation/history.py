"""`History`: what happened in a simulation, as the service saw it, and the checks on it.

The service (the in-memory engine) is the judge: whether a lease is held is read from the
engine at the very moment a handler starts, acts or a call goes out, never from what the
worker believes. The rules, each a `Violation` kind:

- `run-on-lapsed-lease`: a handler started while the service did not hold its message for
  that receive (its visibility had ended, or another receive had taken it);
- `side-effect-after-lapse`: a handler's side effect (made after `lease.ensure_held()`, as
  the docs tell users to) while the service did not hold its message for it;
- `runs-overlap`: a run of a message did something after another run of it had started;
- `stale-handle-sent`: a renewal, delete or release went on the wire with the handle of a
  receive the service no longer held (a retry of a delete that had already landed aside);
- `lost`: a message deleted that no run handled to the end;
- `dead-lettered-unexplained`: a message moved to the dead-letter queue although one of its
  receives ended with no handler failure and nothing gone wrong around it (no fault of its
  worker's calls, no stall, no signal from that receive's call to its end);
- `shutdown-hung`: a worker told to stop had not ended long after its grace.

A process that was killed does nothing more: what its tasks do after the kill (they are
unwound at the end of the simulation) is not history.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from backends.memory.engine import MemoryEngine
from backends.memory.message import MessageState

__all__ = ["Delivery", "History", "Run", "Violation"]


@dataclass(frozen=True, slots=True)
class Violation:
    kind: str
    #: The message's index in the schedule (-1: none).
    message: int
    at: float
    detail: str

    def __str__(self) -> str:
        return f"{self.kind} message={self.message} at={self.at:.3f}: {self.detail}"


@dataclass(slots=True, eq=False)
class Delivery:
    """One receive of one message: from the service's hand-out to its next receive."""

    message: int
    process: str
    #: When the receive call was sent, and when the service handed the message out.
    asked_at: float
    handed_out_at: float
    handles: set[str]
    ended_at: float = math.inf
    deleted: bool = False


@dataclass(slots=True, eq=False)
class Run:
    """One run of a handler."""

    message: int
    process: str
    delivery: Delivery | None
    started_at: float
    acted_at: float | None = None
    ended_at: float | None = None
    outcome: str = "running"


@dataclass(slots=True)
class History:
    engine: MemoryEngine
    queue: str
    dead_letter_queue: str
    #: Each message's id, by its index in the schedule ("" until it is sent).
    ids: list[str] = field(default_factory=list)
    deliveries: dict[str, Delivery] = field(default_factory=dict)
    runs: list[Run] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    #: Per process: spans of time when something went wrong around it.
    disturbances: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    killed: set[str] = field(default_factory=set)
    events: list[str] = field(default_factory=list)
    _index: dict[str, int] = field(default_factory=dict)
    _latest: dict[int, Delivery] = field(default_factory=dict)

    def now(self) -> float:
        return self.engine.clock.now()

    def _note(self, text: str) -> None:
        self.events.append(f"{self.now():.6f} {text}")

    def _violate(self, kind: str, message: int, detail: str) -> None:
        self.violations.append(Violation(kind, message, self.now(), detail))
        self._note(f"VIOLATION {kind} m{message} {detail}")

    # -- the service's side --------------------------------------------------------------

    def sent(self, index: int, message_id: str) -> None:
        """Message `index` of the schedule was sent, and has this id."""
        self._index[message_id] = index
        self.ids[index] = message_id
        self._note(f"send m{index}")

    def handed_out(self, process: str, asked_at: float, handles: Sequence[tuple[str, str]]) -> None:
        """A receive of `process`, sent at `asked_at`, took these (message id, handle)."""
        now = self.now()
        for message_id, handle in handles:
            index = self._index[message_id]
            previous = self._latest.get(index)
            if previous is not None:
                previous.ended_at = min(previous.ended_at, now)
            delivery = Delivery(index, process, asked_at, now, {handle})
            self._latest[index] = self.deliveries[handle] = delivery
            self._note(f"{process} received m{index}")

    def rotated(self, old: str, new: str) -> None:
        """An SMQ extension landed: `new` is the receive's handle now."""
        delivery = self.deliveries.get(old)
        if delivery is not None:
            delivery.handles.add(new)
            self.deliveries[new] = delivery

    def deleting(self, handles: Iterable[str]) -> None:
        """A delete lands (before the engine applies it)."""
        for handle in handles:
            delivery = self.deliveries.get(handle)
            if delivery is not None and self._held(delivery.message, handle):
                delivery.deleted = True
                self._note(f"deleted m{delivery.message}")

    def _held(self, message: int, handle: str) -> bool:
        return self._why_not_held(message, handle) is None

    def _why_not_held(self, message: int, handle: str) -> str | None:
        """None if the service holds `message` for the receive `handle` belongs to; else why
        not, as the service sees it."""
        snapshot = self.engine.peek(self.queue, self.ids[message])
        if snapshot is None:
            return "the message is gone"
        if snapshot.state is not MessageState.IN_FLIGHT:
            return f"the message is {snapshot.state.value}"
        current = self.deliveries.get(snapshot.receipt_handle or "")
        if current is None or current is not self.deliveries.get(handle):
            # An SMQ extension that landed gave the same receive a new handle: still held.
            return "another receive holds it"
        if snapshot.visible_at <= self.now():
            return f"its visibility ended at {snapshot.visible_at:.3f}"
        return None

    # -- the worker's side --------------------------------------------------------------

    def disturbed(self, process: str, start: float, end: float = math.inf) -> None:
        self.disturbances.setdefault(process, []).append((start, end))

    def kill(self, process: str) -> None:
        self.killed.add(process)
        self.disturbed(process, self.now())
        self._note(f"{process} killed")

    def sending(self, process: str, operation: str, handles: Iterable[str]) -> None:
        """`process` puts a call carrying `handles` on the wire now."""
        if process in self.killed:
            return
        for handle in handles:
            delivery = self.deliveries.get(handle)
            if delivery is None:
                self._violate("stale-handle-sent", -1, f"{operation} with a handle never issued")
            elif not self._held(delivery.message, handle) and not delivery.deleted:
                self._violate(
                    "stale-handle-sent",
                    delivery.message,
                    f"{process} sent {operation} with the handle of a receive the service "
                    "no longer held",
                )

    def started(self, process: str, message_id: str, handle: str) -> Run | None:
        if process in self.killed:
            return None
        index = self._index[message_id]
        run = Run(index, process, self.deliveries.get(handle), self.now())
        self.runs.append(run)
        self._note(f"{process} runs m{index}")
        if not self._held(index, handle):
            self._violate(
                "run-on-lapsed-lease",
                index,
                f"{process} started a handler on a receive the service no longer held",
            )
        return run

    def acted(self, run: Run, handle: str) -> None:
        if run.process in self.killed:
            return
        run.acted_at = self.now()
        self._note(f"{run.process} side effect m{run.message}")
        why = self._why_not_held(run.message, handle)
        if why is not None:
            self._violate(
                "side-effect-after-lapse",
                run.message,
                f"{run.process} made a side effect on a receive the service no longer held: {why}",
            )

    def ended(self, run: Run, outcome: str) -> None:
        if run.process in self.killed:
            return
        run.ended_at = self.now()
        run.outcome = outcome
        self._note(f"{run.process} ended m{run.message} {outcome}")

    def hung(self, process: str) -> None:
        self._violate("shutdown-hung", -1, f"{process} did not end after its shutdown")

    # -- the end ------------------------------------------------------------------------

    def check(self) -> list[Violation]:
        """The checks that need the whole history; returns every violation found."""
        self._check_overlaps()
        for index, message_id in enumerate(self.ids):
            if not message_id:
                continue  # never sent
            in_queue = self.engine.peek(self.queue, message_id) is not None
            dead = self.engine.peek(self.dead_letter_queue, message_id) is not None
            runs = [run for run in self.runs if run.message == index]
            if not in_queue and not dead and not any(r.outcome == "ok" for r in runs):
                self._violate("lost", index, "deleted, but no run handled it to the end")
            if dead:
                self._check_dead_letter(index, runs)
        return self.violations

    def _check_overlaps(self) -> None:
        by_message: dict[int, list[Run]] = {}
        for run in self.runs:
            by_message.setdefault(run.message, []).append(run)
        for index, runs in by_message.items():
            for n, first in enumerate(runs):
                last_act = first.acted_at if first.acted_at is not None else first.started_at
                # By the order they started in, not their times: two started at one instant
                # (a double dispatch) overlap as much as any.
                for later in runs[n + 1 :]:
                    if later.started_at < last_act:
                        self._violate(
                            "runs-overlap",
                            index,
                            f"{first.process} acted at {last_act:.3f}, after "
                            f"{later.process} started at {later.started_at:.3f}",
                        )

    def _check_dead_letter(self, index: int, runs: list[Run]) -> None:
        # Only a drawn failure is the handler's; a run fenced or cancelled because its lease
        # was lost needs a fault around it like any other receive that ended unhandled.
        failed = {id(run.delivery) for run in runs if run.outcome == "raised"}
        for delivery in {id(d): d for d in self.deliveries.values()}.values():
            if delivery.message != index or id(delivery) in failed:
                continue
            spans = self.disturbances.get(delivery.process, ())
            if not any(s <= delivery.ended_at and e >= delivery.asked_at for s, e in spans):
                self._violate(
                    "dead-lettered-unexplained",
                    index,
                    f"dead-lettered, but its receive by {delivery.process} at "
                    f"{delivery.handed_out_at:.3f} ended with no failure and no fault",
                )
                return

    def digest(self) -> str:
        """A fingerprint of the whole history: the same schedule gives the same one."""
        return hashlib.sha256("\n".join(self.events).encode()).hexdigest()[:16]
