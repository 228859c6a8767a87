"""`SimLoop`: an asyncio event loop on virtual time that runs several simulated processes,
any of which can be stalled while the others, and the service, go on.

Rules:
- Time is virtual and starts at `START`. When nothing is ready the loop jumps straight to
  the next timer: a simulated hour costs the callbacks it runs, not an hour. Nothing here
  reads the wall clock, so one schedule gives one history.
- A process is a `contextvars` value (`PROCESS`): a task started in a context where it is
  set, and every task, timer and callback made from there, belongs to that process (asyncio
  copies the current context into each). The service (the in-memory engine) and the
  simulated network run with it unset and are never stalled.
- A stall of a process from `start` to `end` is what SIGSTOP, a long GC pause or blocking
  code does to it: none of its callbacks runs in between, whatever falls due; at `end`
  every callback held back runs, in the order it fell due, before anything the process
  schedules afterwards (so the lease keeper's stall watchdog, a timer, runs in the first
  step after the stall, as on a real loop). A stall with no end is a SIGKILL.
- `block(seconds)` is blocking code inside a step (`time.sleep` in an async handler): the
  calling task is stalled with its process, and is the first to go on at the end.
- Each process may have a clock rate of its own (`set_rate`: 1.001 runs 0.1% fast): its
  code reads `time()` and sets its timers on its own clock, as a process on a host whose
  clock drifts does; the service and the loop itself keep the true time (`true_time()`).
- No I/O: the selector is never asked to wait. A thread handing work back
  (`call_soon_threadsafe`) is not part of the model: a simulation whose every task waits
  for something that never comes raises `Stuck`.
"""

from __future__ import annotations

import asyncio
import contextvars
import math
import selectors
from collections.abc import Callable
from typing import Any

__all__ = ["PROCESS", "START", "SimLoop", "Stuck"]

#: The simulated process the running code belongs to; None: the service and the network.
PROCESS: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "lease_worker_sim_process", default=None
)
#: Virtual time when a simulation starts (not 0: code may treat 0 as "never").
START = 1000.0

#: A callback held back by a stall: its handle (to honour a cancel made meanwhile), the
#: callback, its arguments and the context it runs in.
_Held = tuple[asyncio.Handle, Callable[..., Any], tuple[Any, ...], contextvars.Context]


class Stuck(RuntimeError):
    """Every task waits and no timer is left: nothing can ever happen again."""


class _NoIO(selectors.SelectSelector):
    """The loop's selector: registrations are kept (the loop's self-pipe), but `select`
    never waits; it moves the virtual clock to the timer the loop is waiting for."""

    def __init__(self, loop: SimLoop) -> None:
        super().__init__()
        self._loop = loop

    def select(self, timeout: float | None = None) -> list[Any]:
        if timeout is None:
            raise Stuck("every task waits, and no timer is left to wake one")
        if timeout > 0:
            self._loop._advance()
        return []


class SimLoop(asyncio.SelectorEventLoop):
    """An event loop on virtual time with stallable processes (see the module docstring)."""

    def __init__(self) -> None:
        self._now = START
        self._stalls: dict[str, list[tuple[float, float]]] = {}
        self._held: dict[str, list[_Held]] = {}
        self._blocked: dict[str, asyncio.Future[None]] = {}
        self._rates: dict[str, float] = {}
        super().__init__(_NoIO(self))
        self._clock_resolution = 1e-9

    # -- time ---------------------------------------------------------------------------

    def time(self) -> float:
        """The calling process's clock (the true time outside every process)."""
        process = PROCESS.get()
        rate = None if process is None else self._rates.get(process)
        return self._now if rate is None else START + (self._now - START) * rate

    def true_time(self) -> float:
        """The service's clock, whoever asks."""
        return self._now

    def set_rate(self, process: str, rate: float) -> None:
        """`process`'s clock runs at `rate` times the true time (from `START`)."""
        if rate <= 0:
            raise ValueError(f"rate must be > 0, got {rate}")
        self._rates[process] = rate

    def _advance(self) -> None:
        scheduled: list[asyncio.TimerHandle] = self._scheduled  # type: ignore[attr-defined]
        if scheduled:
            self._now = max(self._now, scheduled[0].when())

    # -- processes ----------------------------------------------------------------------

    def stall(self, process: str, start: float, end: float = math.inf) -> None:
        """Stall `process` from `start` to `end` (no end: killed); may be in the past."""
        if end <= start:
            return
        self._stalls.setdefault(process, []).append((start, end))
        if math.isfinite(end):
            self.true_call_at(end, self._resume, process, context=contextvars.Context())

    def revive(self, process: str) -> None:
        """End every stall of `process`, a kill included: what was held back runs now."""
        self._stalls.pop(process, None)
        self._resume(process)

    def stalled(self, process: str) -> bool:
        # A stall ends a clock resolution early: the loop runs a timer that much before its
        # time, so the resume at `end` must find the stall over.
        now = self._now + self._clock_resolution
        return any(start <= now < end for start, end in self._stalls.get(process, ()))

    async def block(self, seconds: float) -> None:
        """Block the calling process for `seconds` from inside the running step."""
        process = PROCESS.get()
        if process is None:
            raise RuntimeError("block() needs a simulated process")
        going_on = self._blocked[process] = self.create_future()
        self.stall(process, self._now, self._now + seconds)
        await going_on

    def _resume(self, process: str) -> None:
        blocked = self._blocked.pop(process, None)
        if blocked is not None and not blocked.done():
            blocked.set_result(None)  # its task's wake-up is queued before the rest
        held = self._held.pop(process, [])
        for handle, callback, args, context in held:
            super().call_soon(
                self._gate, process, [handle], callback, args, context, context=context
            )

    # -- scheduling: every callback of a process passes its gate ---------------------------

    def call_soon(  # type: ignore[override]
        self,
        callback: Callable[..., Any],
        *args: Any,
        context: contextvars.Context | None = None,
    ) -> asyncio.Handle:
        context = contextvars.copy_context() if context is None else context
        process = context.get(PROCESS)
        if process is None:
            return super().call_soon(callback, *args, context=context)
        box: list[asyncio.Handle] = []
        handle = super().call_soon(
            self._gate, process, box, callback, args, context, context=context
        )
        box.append(handle)
        return handle

    def call_at(  # type: ignore[override]
        self,
        when: float,
        callback: Callable[..., Any],
        *args: Any,
        context: contextvars.Context | None = None,
    ) -> asyncio.TimerHandle:
        caller = PROCESS.get()  # `when` is on the caller's clock
        rate = None if caller is None else self._rates.get(caller)
        if rate is not None:
            true_when = START + (when - START) / rate
            # Rounded up to where the caller's clock reads `when` at least: a timer that
            # finds its deadline a hair away sets itself again for the same moment.
            while START + (true_when - START) * rate < when:
                true_when = math.nextafter(true_when, math.inf)
            when = true_when
        return self.true_call_at(when, callback, *args, context=context)

    def true_call_at(
        self,
        when: float,
        callback: Callable[..., Any],
        *args: Any,
        context: contextvars.Context | None = None,
    ) -> asyncio.TimerHandle:
        """`call_at` with `when` on the true clock, whoever calls."""
        context = contextvars.copy_context() if context is None else context
        process = context.get(PROCESS)
        if process is None:
            return super().call_at(when, callback, *args, context=context)
        box: list[asyncio.Handle] = []
        handle = super().call_at(
            when, self._gate, process, box, callback, args, context, context=context
        )
        box.append(handle)
        return handle

    def _gate(
        self,
        process: str,
        box: list[asyncio.Handle],
        callback: Callable[..., Any],
        args: tuple[Any, ...],
        context: contextvars.Context,
    ) -> None:
        handle = box[0]
        if handle.cancelled():
            return
        held = self._held.get(process)
        if self.stalled(process) or held:
            # Stalled, or callbacks held back by a stall that just ended have not run yet:
            # this one goes after them.
            self._held.setdefault(process, []).append((handle, callback, args, context))
            if held and not self.stalled(process):
                self._resume(process)
            return
        callback(*args)
