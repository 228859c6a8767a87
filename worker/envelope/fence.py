"""The fence of the message a handler task is handling, checked before a send it makes.

The runtime enters the lease of the message in each handler task's own context; a producer
asks `check()` before each send call, so that a send from inside a handler whose lease has
lapsed (a stall: the message may be someone else's now, who will send the same follow-up)
raises `LeaseLostError` instead of going out. Outside a handler (or in a batch handler,
which holds many leases, or a synchronous handler's thread) there is no fence.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Protocol

__all__ = ["check", "enter"]


class Fenced(Protocol):
    def ensure_held(self, now: float | None = None) -> None: ...


_current: ContextVar[Fenced | None] = ContextVar("lease_worker_fence", default=None)


def enter(lease: Fenced) -> None:
    """The calling task handles the message of `lease` (its context is its own copy)."""
    _current.set(lease)


def check() -> None:
    """Raise `LeaseLostError` if the calling task handles a message whose lease is gone."""
    lease = _current.get()
    if lease is not None:
        lease.ensure_held()
