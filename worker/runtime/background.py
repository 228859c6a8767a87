"""The application's background tasks (`@app.background`), each shielded until `end()`.

They outlive the handlers however the run ends, a cancellation from outside included: a
task such as an idempotency heartbeat must not end the claims that running handlers still
rely on. `end()` cancels them; one started after `end()` is cancelled as it begins.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
from anyio.abc import TaskGroup

__all__ = ["BackgroundTasks"]


class BackgroundTasks:
    def __init__(self) -> None:
        self._scopes: list[anyio.CancelScope] = []
        self._ended = False

    def start(self, group: TaskGroup, work: Callable[[], Awaitable[None]]) -> None:
        group.start_soon(self._run, work)

    async def _run(self, work: Callable[[], Awaitable[None]]) -> None:
        with anyio.CancelScope(shield=True) as scope:
            self._scopes.append(scope)
            if self._ended:
                scope.cancel()
            await work()

    def end(self) -> None:
        self._ended = True
        for scope in self._scopes:
            scope.cancel()
