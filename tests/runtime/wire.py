"""A `RecordingBackend` whose calls take time on the wire, shared by the runtime tests that
need a renewal or a delete to be under way while something else happens (leases, settling,
a copy received again while held)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import anyio

from tests.recording import RecordingBackend
from worker.types import BatchResult, Deletion, VisibilityChange


@dataclass
class WireBackend(RecordingBackend):
    """Calls that take time on the wire: each reaches the engine after `latency[op]`
    seconds, and the time each call spent on the wire is kept by receipt handle."""

    latency: dict[str, float] = field(default_factory=dict)
    #: (operation, receipt handle, sent at, answered at)
    wire: list[tuple[str, str, float, float]] = field(default_factory=list)

    async def _travel(self, operation: str, handles: Sequence[str]) -> float:
        sent = anyio.current_time()
        await anyio.sleep(self.latency.get(operation, 0.0))
        return sent

    def _answered(self, operation: str, handles: Sequence[str], sent: float) -> None:
        now = anyio.current_time()
        self.wire.extend((operation, handle, sent, now) for handle in handles)

    async def extend(self, queue: str, entries: Sequence[VisibilityChange]) -> BatchResult:
        handles = [e.receipt_handle for e in entries]
        sent = await self._travel("extend", handles)
        try:
            return await super().extend(queue, entries)
        finally:
            self._answered("extend", handles, sent)

    async def delete(self, queue: str, entries: Sequence[Deletion]) -> BatchResult:
        handles = [e.receipt_handle for e in entries]
        sent = await self._travel("delete", handles)
        try:
            return await super().delete(queue, entries)
        finally:
            self._answered("delete", handles, sent)

    def overlaps(self) -> list[tuple[str, float, float]]:
        """Renewals on the wire beside a delete of the same handle."""
        found = []
        deletes = [w for w in self.wire if w[0] == "delete"]
        for op, handle, sent, answered in self.wire:
            if op != "extend":
                continue
            for _, other, d_sent, d_answered in deletes:
                if other == handle and sent < d_answered and d_sent < answered:
                    found.append((handle, sent, d_sent))
        return found
