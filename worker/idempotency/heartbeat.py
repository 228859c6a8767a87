"""The heartbeat: one record per worker process that its claims refer to.

A claim is live while its owner's heartbeat is: so a crashed process's claims all go stale
together, one heartbeat TTL after its last beat, while a live process writes one record per
round however many claims it holds (rather than one write per claim per round). The TTL
and the cadence are the lease's: `ttl_s` is the extension a renewal asks for, and the beat
is renewed `margin_s` before it runs out, as a lease is.

The same task sends the writes that could not be sent where they arose: a claim let go by a
cancelled handler (which may not await), a completion or a removal the store refused. Each
is retried every round, and at `retry_s`, until the store takes it or the worker stops; at
the stop the task sends what is left once more, bounded, and ends its beat, so that what it
still claims goes stale at once.

A deferred write waits on the beat: a round whose beat fails sends nothing, and the first
round the store answers sends the beat first, then the writes. While the store is down the
rounds come at most `margin_s` apart (a call takes at most `timeout_s`), so a process whose
beat ran out during an outage writes it again at most `longest_gap_s` after the store is back,
and its claims are live again from then on: the grace another worker waits out before it
takes over a claim whose owner's beat ran out (see `worker.idempotency.guard`). A completion
that is refused (its claim was taken over meanwhile) or still unsent at the stop is dropped:
its `on_dropped` is called, which logs and counts it.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
import structlog

from worker.clock import Clock
from worker.idempotency.calls import store_call
from worker.idempotency.metrics import IdempotencyMetrics
from worker.idempotency.store import IdempotencyStore, StoreError

__all__ = ["Heartbeat"]

#: At the stop, how long the last writes may take. The task is stopped after the worker's
#: own bounded shutdown (grace + flush) and adds this to it: short. What is deferred during
#: the shutdown was sent already, while the task ran; this is for a store that was slow.
_FLUSH_S = 1.0

Write = Callable[[], Awaitable[object]]
#: Told why a deferred completion was dropped: "taken_over" (the store refused it: the
#: claim's token is gone) or "not_sent" (still unsent when the worker stopped).
OnDropped = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class Deferred:
    """A write the heartbeat task sends for someone who could not."""

    operation: str
    write: Write
    #: Set for a completion: a refusal (False) or a stop before it is sent drops it.
    on_dropped: OnDropped | None = None


class Heartbeat:
    def __init__(
        self,
        store: IdempotencyStore,
        *,
        owner: str,
        clock: Clock,
        metrics: Callable[[], IdempotencyMetrics],
        ttl_s: float,
        margin_s: float,
        retry_s: float,
        timeout_s: float,
    ) -> None:
        self.owner = owner
        self._store = store
        self._clock = clock
        self._metrics = metrics
        self.ttl_s = ttl_s
        self.margin_s = margin_s
        self._retry_s = retry_s
        self._timeout_s = timeout_s
        #: Wall time until which the store holds our beat (as of its last confirmed write).
        self.confirmed_until = -math.inf
        #: The store calls of each round that made any (the first beat, made at start-up,
        #: and the last, at the stop, are not rounds): to measure the cost per round.
        self.calls_per_round: list[int] = []
        #: Called when our beat is about to run out unrenewed (`lapse_lead_s` before), at
        #: every round until it is renewed: the guard stops the handlers it guards.
        self.on_lapse: Callable[[], None] | None = None
        self.lapse_lead_s = margin_s / 4
        #: Wall time of the store's last answer to any call, and of its last failure.
        self.last_ok: float | None = None
        self.last_failed: float | None = None
        self._pending: dict[str, Deferred] = {}
        self._wake = anyio.Event()
        self._log = structlog.get_logger("lease_worker.idempotency")

    def wall(self, now: float | None = None) -> float:
        return (self._clock.now() if now is None else now) + self._clock.wall_offset_s()

    def live(self, *, for_s: float = 0.0) -> bool:
        """True if our beat holds for `for_s` more seconds: claims made now are live."""
        return self.wall() + for_s < self.confirmed_until

    def defer(
        self, name: str, operation: str, write: Write, *, on_dropped: OnDropped | None = None
    ) -> None:
        """Send `write` from this task (now, then every round until the store takes it).
        A later write of the same `name` (a claim's token) replaces an unsent one.
        `on_dropped`: for a completion (see `Deferred`)."""
        self._pending[name] = Deferred(operation, write, on_dropped)
        self._wake.set()

    @property
    def pending(self) -> int:
        return len(self._pending)

    def holds(self, name: str) -> bool:
        """True if a write of `name` (a claim's token) waits to be sent."""
        return name in self._pending

    async def send_now(self, name: str) -> None:
        """Send the pending write of `name` now, if there is one (raises `StoreError`)."""
        if (deferred := self._pending.get(name)) is not None:
            await self._send(name, deferred)

    @property
    def longest_gap_s(self) -> float:
        """The longest a store that is back may wait for this process's next beat: one
        wait between rounds (at most `margin_s`) and one call (at most `timeout_s`)."""
        return self.margin_s + self._timeout_s

    async def beat(self) -> bool:
        """Write our beat now; True if the store took it."""
        until = self.wall() + self.ttl_s
        try:
            await self.call("beat", lambda: self._store.beat(self.owner, until=until))
        except StoreError as error:
            self._log.warning("idempotency.heartbeat_failed", reason=error.reason)
            return False
        self.confirmed_until = until
        return True

    async def run(self) -> None:
        failures = 0
        try:
            while True:
                with anyio.move_on_after(self._round_budget()) as cut:
                    calls, ok = await self._round()
                if cut.cancelled_caught:  # a slow store ran into the lapse: a failed round
                    calls, ok = 1, False
                if calls:  # else a wake-up with nothing due
                    self.calls_per_round.append(calls)
                failures = 0 if ok else failures + 1
                self._check_lapse()
                with anyio.move_on_after(self._next_wait(failures)):
                    await self._wake.wait()
                self._wake = anyio.Event()
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(_FLUSH_S):
                await self._send_pending()
                await self._end_beat()
            self._drop_unsent()

    async def _round(self) -> tuple[int, bool]:
        calls = 0
        if self.wall() >= self.confirmed_until - self.margin_s:
            calls += 1
            if not await self.beat():
                return calls, False  # the store is likely down: the writes can wait
        sent, failed = await self._send_pending()
        return calls + sent, not failed

    def _next_wait(self, failures: int) -> float:
        due = max(0.0, self.confirmed_until - self.margin_s - self.wall())
        if not failures:
            return due
        # After a failure: doubling from `retry_s`, so that a store that is down is not
        # hammered, and at most `margin_s`, so that a lapsed beat comes back soon after it;
        # and awake in time to stop the guarded handlers before the beat lapses.
        backoff: float = self._retry_s * 2.0 ** min(failures - 1, 16)
        before_lapse = self.confirmed_until - self.lapse_lead_s - self.wall()
        if before_lapse > 0:
            backoff = min(backoff, before_lapse)
        return min(backoff, self.margin_s)

    def _round_budget(self) -> float:
        # Handlers must be stopped before the beat lapses, not once a hung call times out.
        before_lapse = self.confirmed_until - self.lapse_lead_s - self.wall()
        if self.on_lapse is None or not before_lapse > 0:
            return math.inf
        return before_lapse

    def _check_lapse(self) -> None:
        if self.on_lapse is not None and not self.live(for_s=self.lapse_lead_s):
            self.on_lapse()

    async def _send_pending(self) -> tuple[int, int]:
        sent = failed = 0
        for name, deferred in list(self._pending.items()):
            sent += 1
            try:
                await self._send(name, deferred)
            except StoreError as error:
                failed += 1
                self._log.warning(
                    "idempotency.write_pending", operation=deferred.operation, reason=error.reason
                )
        return sent, failed

    async def _send(self, name: str, deferred: Deferred) -> None:
        answer = await self.call(deferred.operation, deferred.write)
        if self._pending.get(name) is deferred:  # not replaced (nor sent) meanwhile
            del self._pending[name]
            if answer is False and deferred.on_dropped is not None:
                deferred.on_dropped("taken_over")

    def _drop_unsent(self) -> None:
        for deferred in self._pending.values():
            if deferred.on_dropped is not None:
                deferred.on_dropped("not_sent")
        self._pending.clear()

    async def _end_beat(self) -> None:
        # Our claims go stale at once rather than one TTL from now.
        now = self.wall()
        try:
            await self.call("beat", lambda: self._store.beat(self.owner, until=now))
        except StoreError:
            return
        self.confirmed_until = now

    async def call(self, operation: str, write: Write) -> Any:
        """One store call (the guard's too): `last_ok` tells how long the store is down."""
        try:
            answer = await store_call(self._metrics(), operation, self._timeout_s, write)
        except StoreError:
            self.last_failed = self.wall()
            raise
        self.last_ok = self.wall()
        return answer

    def down_for_s(self) -> float:
        """How long since the store last answered (0 if it never did)."""
        return 0.0 if self.last_ok is None else max(0.0, self.wall() - self.last_ok)
