"""The streaming source's ledger: which messages it holds, in which offset, until when.

Pure: no I/O, no clock of its own (`now` is passed in). The reader's shell
(`worker.integrations.spark.holder`) receives, extends, deletes and releases; this decides.

Rules:
- An offset is `{"run": R, "n": N}`: R names this reader's process (a restarted query gets a
  new one), N counts the offsets this run handed out. Spark only compares offsets for
  equality, so a new run's offsets need not order after an old run's.
- Messages are received ahead (`take`): held, renewed, but in no offset yet (pending).
  `latestOffset` gives the pending ones, oldest first and at most `most`, to the offset it
  returns; a batch (start, end] of this run is the messages of the offsets after `start` up
  to `end`. A pending message is in no batch, so no commit deletes it.
- A batch whose end names another run is a replay after a restart: the old run's messages
  are gone with its process, so the replay is served with the pending messages (the failed
  batch's messages, released or lapsed, come back through the queue), once, and remembered.
- `commit(end)` makes every message up to `end` deletable; nothing else is ever deleted.
- Spark commits batch N only while planning batch N+1: when nothing new came in but planned
  messages wait for their commit, `latestOffset` moves on anyway (an empty batch) so that
  the last real batch is committed on an idle queue.
- A lease is due for renewal `margin_s` before its deadline; a renewal that fails for good
  loses the lease (the message is dropped from the ledger and will come back).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from worker.core.lease import held_for
from worker.types import ReceivedMessage

__all__ = ["Held", "Ledger", "Offset"]

Offset = dict[str, Any]

#: The offset number of a message received ahead, in no offset yet.
PENDING = 0


@dataclass(slots=True)
class Held:
    """One message the reader holds: its current handle and lease deadline."""

    message: ReceivedMessage
    handle: str
    deadline: float
    #: The offset number it belongs to (this run's), -1 for a replayed batch, or PENDING.
    number: int
    #: The replayed batch's key (its end offset as JSON), for a replayed batch only.
    replay: str | None = None


@dataclass(slots=True)
class Ledger:
    run: str
    visibility_s: float
    extension_s: float
    margin_s: float
    held: dict[str, Held] = field(default_factory=dict)
    #: The last offset number handed out by `latest`.
    number: int = 0
    #: The highest offset number some batch's partitions were planned up to.
    planned: int = 0
    replays: dict[str, list[str]] = field(default_factory=dict)
    #: Pending message ids in the order they arrived (lost ones are skipped when taken).
    pending: list[str] = field(default_factory=list)

    def initial(self) -> Offset:
        return {"run": self.run, "n": 0}

    def take(self, received: Iterable[ReceivedMessage], now: float) -> None:
        """Hold `received` as pending (a message held already is not taken twice)."""
        for message in received:
            if message.message_id not in self.held:
                self._hold(message, now, PENDING, None)
                self.pending.append(message.message_id)

    def pending_count(self) -> int:
        return len(self.pending)

    def latest(
        self,
        received: Iterable[ReceivedMessage],
        now: float,
        start: Offset | None,
        most: int | None = None,
    ) -> Offset:
        """Take in `received`, give up to `most` pending messages a new offset and answer the
        offset that ends them (see the rules)."""
        self.take(received, now)
        fresh = self._take_pending(most)
        waiting = any(
            held.number != PENDING and held.number <= self.planned for held in self.held.values()
        )
        if fresh or waiting:
            self.number += 1
            for held in fresh:
                held.number = self.number
        elif start is not None:
            return start
        return {"run": self.run, "n": self.number}

    def batch(self, start: Offset, end: Offset) -> list[ReceivedMessage] | None:
        """The messages of batch (start, end]; None for a replay not yet served (receive
        for it, then `serve_replay`)."""
        if end.get("run") != self.run:
            ids = self.replays.get(_key(end))
            return None if ids is None else [self.held[i].message for i in ids if i in self.held]
        low = start.get("n", 0) if start.get("run") == self.run else 0
        high = int(end["n"])
        self.planned = max(self.planned, high)
        chosen = [held for held in self.held.values() if low < held.number <= high]
        return [held.message for held in sorted(chosen, key=lambda held: held.number)]

    def serve_replay(self, end: Offset, received: Iterable[ReceivedMessage], now: float) -> None:
        """Serve the replay ending at `end` with the pending messages and `received`."""
        self.take(received, now)
        key = _key(end)
        served = self._take_pending(None)
        for held in served:
            held.number, held.replay = -1, key
        self.replays[key] = [held.message.message_id for held in served]

    def committed(self, end: Offset) -> list[Held]:
        """Take out and answer every held message that `commit(end)` makes deletable."""
        if end.get("run") == self.run:
            high = int(end["n"])
            done = [held for held in self.held.values() if 0 < held.number <= high]
        else:
            ids = set(self.replays.pop(_key(end), ()))
            done = [held for held in self.held.values() if held.message.message_id in ids]
        for held in done:
            del self.held[held.message.message_id]
        return done

    def due(self, now: float) -> list[Held]:
        """Held messages whose lease must be renewed now."""
        return [held for held in self.held.values() if held.deadline - now <= self.margin_s]

    def renewed(self, message: str | Held, handle: str, now: float) -> None:
        """A renewal sent at `now` answered `handle`. Given the `Held` itself, a message
        taken out meanwhile (committed, its delete waiting) adopts the handle too."""
        held = self.held.get(message) if isinstance(message, str) else message
        if held is not None:
            held.handle, held.deadline = handle, now + held_for(self.extension_s)

    def lost(self, message_ids: Iterable[str]) -> list[Held]:
        return [held for i in message_ids if (held := self.held.pop(i, None)) is not None]

    def release_all(self) -> list[Held]:
        """Take out everything held (the reader is going away)."""
        everything = list(self.held.values())
        self.held.clear()
        self.replays.clear()
        self.pending.clear()
        return everything

    def next_due(self) -> float | None:
        deadlines = [held.deadline for held in self.held.values()]
        return min(deadlines) - self.margin_s if deadlines else None

    def _take_pending(self, most: int | None) -> list[Held]:
        count = len(self.pending) if most is None else min(most, len(self.pending))
        taken, self.pending = self.pending[:count], self.pending[count:]
        return [self.held[i] for i in taken if i in self.held]

    def _hold(self, message: ReceivedMessage, now: float, number: int, replay: str | None) -> None:
        # Counted from `now`: a safe side estimate is the caller's job (it passes the moment
        # the receive was sent); held for the visibility less the clock drift allowed for.
        deadline = now + held_for(self.visibility_s)
        self.held[message.message_id] = Held(
            message, message.receipt_handle, deadline, number, replay
        )


def _key(offset: Mapping[str, Any]) -> str:
    return json.dumps(offset, sort_keys=True)
