"""`MemoryBackend`: the in-memory SQS model (`backends.memory.engine`) behind the `Backend`
and `QueueAdmin` protocols.

Rules of this adapter:
- Every call first passes a checkpoint (so it can be cancelled there, as a network call
  can), then calls the engine synchronously and returns its answer with no await in
  between: a cancelled call has either changed nothing or returned its result.
- A long poll waits, with no polling loop, on whichever comes first: the engine reporting
  a change to the queue (send, release, delete...), the engine's `next_wakeup` (a delay
  or a visibility timeout ending), or the poll's own deadline; then it tries again.
  Messages are taken only by that synchronous try, so cancelling a waiting receive loses
  nothing.
- Time is the engine's clock (the event loop's by default), so a fast-forwarded loop
  (looptime) moves leases, delays and long polls together.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace

import anyio
import anyio.lowlevel

from backends.memory.dead_letters import DeadLetterCalls
from backends.memory.engine import MemoryEngine
from worker.backend import Limits
from worker.clock import Clock, LoopClock
from worker.errors import FatalBackendError
from worker.types import (
    BatchResult,
    Deletion,
    OutgoingMessage,
    QueueInfo,
    QueueSpec,
    ReceivedMessage,
    VisibilityChange,
)

__all__ = ["MemoryBackend"]


class MemoryBackend(DeadLetterCalls):
    """A `Backend`, `QueueAdmin` and `DeadLetterAdmin` over a `MemoryEngine`; `engine` is
    there for test hooks. The engine can peek, whatever its dialect (`Limits.supports_peek`),
    and a receive cancelled before it answers has taken nothing (its wait and its hand-out
    are one step in this process), so a shutdown need not wait for a poll in flight.

    With no engine, one is built on `clock` (default: the event loop's clock). Several
    backends may share one engine, like several clients of one SQS.
    """

    def __init__(self, engine: MemoryEngine | None = None, *, clock: Clock | None = None) -> None:
        if engine is None:
            engine = MemoryEngine(clock if clock is not None else LoopClock())
        elif clock is not None and clock is not engine.clock:
            raise ValueError("pass a clock or an engine (which has its clock), not both")
        self._engine = engine
        # Read several times per message: made once.
        self._limits = replace(
            engine.dialect.limits, supports_peek=True, cancelled_receive_takes_nothing=True
        )
        self._clock = engine.clock
        # Per queue, the waiting polls in the order they began to wait (a dict, not a set:
        # which poll a new message wakes first must not depend on object ids).
        self._waiters: dict[str, dict[anyio.Event, None]] = {}
        self._unsubscribe = engine.subscribe(self._on_change)
        self._closed = False

    @property
    def engine(self) -> MemoryEngine:
        return self._engine

    @property
    def limits(self) -> Limits:
        return self._limits

    # -- Backend ------------------------------------------------------------------------

    async def queue_info(self, queue: str) -> QueueInfo:
        await self._checkpoint()
        return self._engine.queue_info(queue)

    async def receive(
        self,
        queue: str,
        *,
        max_messages: int,
        wait_s: float,
        visibility_s: int | None = None,
    ) -> Sequence[ReceivedMessage]:
        """Long-poll up to `wait_s` (0-20 s) for at most `max_messages` messages."""
        return await self.receive_attempt(
            queue, max_messages=max_messages, wait_s=wait_s, visibility_s=visibility_s
        )

    async def receive_attempt(
        self,
        queue: str,
        *,
        max_messages: int,
        wait_s: float,
        visibility_s: int | None = None,
        attempt_id: str | None = None,
    ) -> Sequence[ReceivedMessage]:
        """`receive`, with a FIFO receive's ReceiveRequestAttemptId (`attempt_id`): a retry
        gets the same messages (`backends.memory.attempts`)."""
        await self._checkpoint()
        if not 0 <= wait_s <= self._limits.max_wait_s:
            name = self._engine.queue_name(queue)
            raise FatalBackendError(
                f"WaitTimeSeconds={wait_s} is not in 0-{self._limits.max_wait_s}",
                operation="ReceiveMessage",
                queue=name,
                code="InvalidParameterValue",
            )
        engine, now = self._engine, self._clock.now
        deadline = now() + wait_s
        expired = False
        # Watched from before the receive: a change it makes itself ends the wait at once.
        # A set of events per queue, entered and left by hand: once a receive, a generator
        # context manager cost more than the rest of the watching.
        name = engine.queue_name(queue)
        watchers = self._waiters.get(name)
        if watchers is None:
            watchers = self._waiters[name] = {}
        changed = anyio.Event()
        watchers[changed] = None
        try:
            while True:
                # Asked before the receive: a message due in between is then either taken
                # or makes the wait end at once, never waits for a later wakeup.
                wakeup = engine.next_wakeup(queue)
                got = engine.receive(
                    queue,
                    max_messages,
                    visibility_s=visibility_s,
                    long_poll=wait_s > 0,
                    attempt_id=attempt_id,
                )
                if got or expired or now() >= deadline:
                    return got
                until = deadline if wakeup is None else min(deadline, wakeup)
                # The alarm for the deadline ends the wait even when the clock reads a hair
                # before it (a loop fires a timer within its clock's resolution; looptime's
                # ticks are whole microseconds): else the loop would spin, time standing still.
                rang = await self._wait(changed, until)
                expired = rang and until >= deadline
                if rang and not expired and now() < until:
                    # The same for the engine's wakeup (a message due): on the same clock,
                    # it sees nothing due until time moves past it. One tick more.
                    await anyio.sleep(until - now() + 1e-6)
                self._check_open()
                if changed.is_set():  # a new event for the next wait, watched at once
                    watchers.pop(changed, None)
                    changed = anyio.Event()
                    watchers[changed] = None
        finally:
            watchers.pop(changed, None)
            if not watchers and self._waiters.get(name) is watchers:
                del self._waiters[name]

    async def extend(self, queue: str, entries: Sequence[VisibilityChange]) -> BatchResult:
        await self._checkpoint()
        return self._engine.change_visibility(queue, entries)

    async def release(self, queue: str, entries: Sequence[VisibilityChange]) -> BatchResult:
        await self._checkpoint()
        return self._engine.change_visibility(queue, entries)

    async def delete(self, queue: str, entries: Sequence[Deletion]) -> BatchResult:
        await self._checkpoint()
        return self._engine.delete(queue, entries)

    async def send(self, queue: str, messages: Sequence[OutgoingMessage]) -> BatchResult:
        await self._checkpoint()
        traces = {m.entry_id: m.trace_header for m in messages if m.trace_header is not None}
        return self._engine.send(queue, messages, trace_headers=traces or None)

    async def aclose(self) -> None:
        """Stop this client; pending long polls end with an error. The engine lives on."""
        if self._closed:
            return
        self._closed = True
        self._unsubscribe()
        for events in self._waiters.values():
            for event in events:
                event.set()
        await anyio.lowlevel.checkpoint()

    # -- QueueAdmin ---------------------------------------------------------------------

    async def create_queue(self, spec: QueueSpec) -> str:
        await self._checkpoint()
        return self._engine.create_queue(spec)

    async def delete_queue(self, queue: str) -> None:
        await self._checkpoint()
        self._engine.delete_queue(queue)

    async def purge(self, queue: str) -> None:
        await self._checkpoint()
        self._engine.purge(queue)

    # -- waiting ------------------------------------------------------------------------

    def _on_change(self, name: str) -> None:
        for event in self._waiters.get(name, ()):
            event.set()

    async def _wait(self, changed: anyio.Event, until: float) -> bool:
        """Wait for `changed` or for the clock to reach `until`, whichever is first; True if
        the alarm for `until` ended it."""
        rang = False
        async with anyio.create_task_group() as tg:

            async def alarm() -> None:
                nonlocal rang
                await self._clock.sleep_until(until)
                rang = True
                tg.cancel_scope.cancel()

            tg.start_soon(alarm)
            await changed.wait()
            tg.cancel_scope.cancel()
        return rang

    async def _checkpoint(self) -> None:
        self._check_open()
        # anyio's checkpoint on asyncio, without its look-up of the running async library
        # (a syscall on CPython 3.11) on every call: the engine runs on asyncio's loop.
        await asyncio.sleep(0)
        self._check_open()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this MemoryBackend is closed")
