"""Per-handler cancellation: the lease keeper or the supervisor cancels one handler's task."""

from __future__ import annotations

import asyncio

__all__ = ["HandlerScope"]


class HandlerScope:
    """Cancels the handler's own task, and tells that cancellation from anyone else's.

    asyncio.timeout()'s way, without a timer: cancel the task; when CancelledError comes,
    take our one cancellation back (`uncancel`), and if none is left the cancellation was
    ours alone and the handler's outcome is decided here. An anyio CancelScope does the same
    at three times the cost, and this runs once per message.
    """

    __slots__ = ("_requested", "_task")

    def __init__(self) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._task = task
        self._requested = False

    def cancel(self) -> None:
        if not self._requested:
            self._requested = True
            self._task.cancel()

    def caught(self) -> bool:
        """On CancelledError: True if it was ours alone (then it is consumed)."""
        if not self._requested:
            return False
        self._requested = False
        return self._task.uncancel() == 0

    def settle(self) -> None:
        """After the handler: take back a cancellation it caught and swallowed.

        `cancel()` is only ever called from another task while this one waits, so the
        cancellation is always delivered; only its count may be left over."""
        if self._requested:
            self._requested = False
            self._task.uncancel()
