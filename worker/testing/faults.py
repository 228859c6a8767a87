"""`FaultyBackend`: a `Backend` wrapper that gives calls any of their four fates, and stalls
the process, for tests. A fake, not a mock: every call that is sent reaches the real inner
backend (the in-memory engine, on either dialect) and changes it exactly as it would.

::

    backend = FaultyBackend(MemoryBackend())
    backend.late("extend", by_s=3.0)        # lands now, answered 3 s later
    backend.lose("delete")                  # lands now, never answered
    backend.refuse("extend", TransientBackendError("throttled"), times=2)  # never sent
    backend.stall(9)                        # the whole event loop freezes for 9 s

The fates (the design's "every call has four fates"), each recorded in `calls`:
- `ANSWERED`: the inner backend's answer (or error) is returned at once. No fault planned.
- `LATE`: the inner call completes first (an SMQ extension has rotated the handle, a delete
  has deleted), then its answer, or the error it raised, is held `by_s` seconds on the event
  loop's clock. A caller cancelled meanwhile gives up on an answer, not on the call.
- `LOST`: as late, but the answer never comes: the caller's await blocks until cancelled.
- `REFUSED`: the given exception is raised before the inner backend is reached; nothing
  changes.

Planning: each of `late`, `lose`, `refuse` queues a fault for the next `times` calls of one
operation (the `Backend` protocol's method names: `OPERATIONS`); `times=None` means every
call from then on. Faults of one operation apply in the order they were planned: a later
one starts when the earlier is used up (never, after `times=None`). `clear` removes them.
Anything else (`limits`, the admin calls, the engine's test hooks) is the inner backend's.

`stall(seconds)` freezes the event loop the way SIGSTOP or a long GC pause freezes the
process: a plain callback, scheduled at once with `call_soon`, holds the loop for
`seconds`. Callbacks queued before it run first; everything else waits. Then every timer
that fell due meanwhile is due at once, and I/O that completed meanwhile is processed in
the same loop iteration.
- On a real loop the callback blocks the loop's thread: `time.sleep(seconds)`.
- Under looptime's virtual time (`@pytest.mark.looptime`) a sleep would cost real time and
  move no virtual clock. looptime's loop (`looptime.LoopTimeEventLoop`) keeps its time as an
  integer count of ticks in `_LoopTimeEventLoop__now` (ticks a second:
  `_LoopTimeEventLoop__resolution_reciprocal`), which `loop.time()` reads. The callback adds
  `seconds` worth of ticks to it: the clock jumps inside one callback, so no other callback
  runs at a time in between. On the next iteration the loop sees every timer up to the new
  time due (a select with timeout 0, which looptime never turns into a time step) and runs
  them with whatever I/O is ready. The public `loop.setup_looptime(start=...)` would move
  the time too, but it also resets the loop's end of time, idle timeout, and the executor
  futures looptime waits for in real time (a running synchronous handler), so it is not
  used. The fields are private: should a looptime version keep its time elsewhere, `stall`
  raises rather than sleeping for real.
  The loop is on virtual time when it is a `LoopTimeEventLoop` with `looptime_on` (looptime
  patches every pytest-asyncio loop but enables it only in marked tests). looptime is an
  optional test dependency and is not imported here: a loop can only be one of its loops
  once it has been imported, so the class is looked up in `sys.modules`.
"""

from __future__ import annotations

import asyncio
import enum
import sys
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

import anyio

from worker.backend import Backend, Limits
from worker.types import (
    BatchResult,
    Deletion,
    OutgoingMessage,
    QueueInfo,
    ReceivedMessage,
    VisibilityChange,
)

__all__ = ("OPERATIONS", "Fate", "FaultyBackend", "FaultyCall", "freeze")

#: The operations faults can be planned for: the `Backend` protocol's calls.
OPERATIONS = frozenset({"aclose", "delete", "extend", "queue_info", "receive", "release", "send"})

BackendT = TypeVar("BackendT", bound=Backend)
T = TypeVar("T")

# looptime's virtual clock, as `LoopTimeEventLoop` keeps it (see the module docstring).
_NOW = "_LoopTimeEventLoop__now"
_TICKS_PER_S = "_LoopTimeEventLoop__resolution_reciprocal"

#: What blocks the loop's thread during a stall on a real loop (a test replaces it).
_block_thread: Callable[[float], None] = time.sleep


class Fate(enum.Enum):
    """What became of one call through a `FaultyBackend` (see `worker.testing.faults`)."""

    #: Landed and answered at once.
    ANSWERED = "answered"
    #: Landed; its answer was held before it was returned.
    LATE = "late"
    #: Landed; its answer never came.
    LOST = "lost"
    #: Not sent: an error was raised before the inner backend was reached.
    REFUSED = "refused"


@dataclass(frozen=True, slots=True)
class FaultyCall:
    """One call made through a `FaultyBackend`, recorded when it was made."""

    operation: str
    #: The queue's name ("" for `aclose`).
    queue: str
    #: Entries sent; for `receive`, `max_messages`; 0 for `queue_info` and `aclose`.
    entries: int
    fate: Fate
    #: The event loop's time when the call was made.
    at: float


@dataclass(slots=True)
class _Fault:
    fate: Fate
    #: Calls left to give this fate; None: every call.
    remaining: int | None
    delay_s: float = 0.0
    error: Exception | None = None

    async def hold(self) -> None:
        """Keep the caller waiting for an answer that has already arrived."""
        if self.fate is Fate.LOST:
            await anyio.sleep_forever()
        else:
            await anyio.sleep(self.delay_s)


class FaultyBackend(Generic[BackendT]):
    """A `Backend` around `inner` that makes planned calls late, lost or refused, records
    every call's fate in `calls`, and can stall the event loop (see `worker.testing.faults`).
    """

    def __init__(self, inner: BackendT) -> None:
        self.inner = inner
        self.calls: list[FaultyCall] = []
        self._faults: dict[str, deque[_Fault]] = {}

    def __getattr__(self, name: str) -> Any:
        if name == "inner":  # not set yet (a copy being made): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)

    # -- planning -----------------------------------------------------------------------

    def late(self, operation: str, by_s: float, *, times: int | None = 1) -> None:
        """The next `times` calls of `operation` land, and their answers come `by_s` late."""
        if by_s < 0:
            raise ValueError(f"by_s must be >= 0, got {by_s}")
        self._plan(operation, _Fault(Fate.LATE, times, delay_s=by_s))

    def lose(self, operation: str, *, times: int | None = 1) -> None:
        """The next `times` calls of `operation` land, and their answers never come."""
        self._plan(operation, _Fault(Fate.LOST, times))

    def refuse(self, operation: str, error: Exception, *, times: int | None = 1) -> None:
        """The next `times` calls of `operation` raise `error` and are not sent."""
        if not isinstance(error, Exception):
            raise TypeError(f"error must be an exception instance, got {error!r}")
        self._plan(operation, _Fault(Fate.REFUSED, times, error=error))

    def clear(self, operation: str | None = None) -> None:
        """Remove the faults planned for `operation`, or for every operation."""
        if operation is None:
            self._faults.clear()
        else:
            self._faults.pop(_checked(operation), None)

    def stall(self, seconds: float) -> None:
        """Freeze the running event loop for `seconds`, from a callback scheduled now."""
        if seconds < 0:
            raise ValueError(f"seconds must be >= 0, got {seconds}")
        loop = asyncio.get_running_loop()
        _virtual_clock(loop)  # an unusable looptime fails here, in the caller
        loop.call_soon(freeze, loop, seconds)

    def _plan(self, operation: str, fault: _Fault) -> None:
        if fault.remaining is not None and fault.remaining < 1:
            raise ValueError(f"times must be >= 1 or None, got {fault.remaining}")
        self._faults.setdefault(_checked(operation), deque()).append(fault)

    def _next_fault(self, operation: str) -> _Fault | None:
        planned = self._faults.get(operation)
        if not planned:
            return None
        fault = planned[0]
        if fault.remaining is not None:
            fault.remaining -= 1
            if fault.remaining == 0:
                planned.popleft()
        return fault

    async def _call(
        self, operation: str, queue: str, entries: int, send: Callable[[], Awaitable[T]]
    ) -> T:
        fault = self._next_fault(operation)
        fate = Fate.ANSWERED if fault is None else fault.fate
        self.calls.append(FaultyCall(operation, queue, entries, fate, anyio.current_time()))
        if fault is None:
            return await send()
        if fault.error is not None:
            raise fault.error.with_traceback(None)
        try:
            answer = await send()
        except Exception:
            await fault.hold()
            raise
        await fault.hold()
        return answer

    # -- Backend --------------------------------------------------------------------------

    @property
    def limits(self) -> Limits:
        # The inner's, but as a service over a network: a receive's answer can be late or
        # lost after it landed, so a cancelled receive may have taken messages.
        return replace(self.inner.limits, cancelled_receive_takes_nothing=False)

    async def queue_info(self, queue: str) -> QueueInfo:
        return await self._call("queue_info", queue, 0, lambda: self.inner.queue_info(queue))

    async def receive(
        self, queue: str, *, max_messages: int, wait_s: float, visibility_s: int | None = None
    ) -> Sequence[ReceivedMessage]:
        return await self._call(
            "receive",
            queue,
            max_messages,
            lambda: self.inner.receive(
                queue, max_messages=max_messages, wait_s=wait_s, visibility_s=visibility_s
            ),
        )

    async def extend(self, queue: str, entries: Sequence[VisibilityChange]) -> BatchResult:
        return await self._call(
            "extend", queue, len(entries), lambda: self.inner.extend(queue, entries)
        )

    async def release(self, queue: str, entries: Sequence[VisibilityChange]) -> BatchResult:
        return await self._call(
            "release", queue, len(entries), lambda: self.inner.release(queue, entries)
        )

    async def delete(self, queue: str, entries: Sequence[Deletion]) -> BatchResult:
        return await self._call(
            "delete", queue, len(entries), lambda: self.inner.delete(queue, entries)
        )

    async def send(self, queue: str, messages: Sequence[OutgoingMessage]) -> BatchResult:
        return await self._call(
            "send", queue, len(messages), lambda: self.inner.send(queue, messages)
        )

    async def aclose(self) -> None:
        await self._call("aclose", "", 0, self.inner.aclose)


def _checked(operation: str) -> str:
    if operation not in OPERATIONS:
        raise ValueError(f"unknown operation {operation!r}; one of {sorted(OPERATIONS)}")
    return operation


def _virtual_clock(loop: asyncio.AbstractEventLoop) -> dict[str, Any] | None:
    """The state holding `loop`'s virtual time when it runs on looptime's, else None."""
    looptime = sys.modules.get("looptime")
    if looptime is None or not isinstance(loop, looptime.LoopTimeEventLoop):
        return None
    if not getattr(loop, "looptime_on", False):
        return None  # patched but not enabled: the loop's time is real
    state: dict[str, Any] = vars(loop)
    if _NOW not in state or _TICKS_PER_S not in state:
        raise RuntimeError(
            f"FaultyBackend.stall: this looptime keeps its virtual time elsewhere than {_NOW}; "
            "it cannot be moved"
        )
    return state


def freeze(loop: asyncio.AbstractEventLoop, seconds: float) -> None:
    """Freeze `loop` for `seconds` now, from inside the running step: what blocking code in
    an async handler does (`FaultyBackend.stall` does it from a callback of its own)."""
    clock = _virtual_clock(loop)
    if clock is None:
        _block_thread(seconds)
    else:
        clock[_NOW] += round(seconds * clock[_TICKS_PER_S])
