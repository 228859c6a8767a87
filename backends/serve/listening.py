"""What the front ends share: binding a socket, serving an aiohttp handler on it until
cancelled, and running a server over a new engine in a thread of its own (for tests and
embedding), with its engine reachable through the thread's portal."""

from __future__ import annotations

import functools
import socket
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
from aiohttp import web
from anyio.abc import TaskStatus
from anyio.from_thread import BlockingPortal, start_blocking_portal

from backends.memory.engine import MemoryEngine

__all__ = ["Bound", "EngineEndpoint", "bind", "endpoint_in_thread", "serve_until_cancelled"]

_T = TypeVar("_T")
_E = TypeVar("_E", bound="EngineEndpoint")


@dataclass(frozen=True, slots=True)
class Bound:
    sock: socket.socket
    #: `http://<host>:<port>`, the port the system chose when asked for 0.
    url: str
    #: Bound to every address: the URL names no host a request can be checked against.
    wildcard: bool


def bind(host: str, port: int) -> Bound:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except BaseException:
        sock.close()
        raise
    name = f"[{host}]" if ":" in host else host
    url = f"http://{name}:{sock.getsockname()[1]}"
    return Bound(sock, url, host in ("0.0.0.0", "::", ""))


async def serve_until_cancelled(
    handler: Callable[[web.BaseRequest], Awaitable[web.StreamResponse]],
    bound: Bound,
    task_status: TaskStatus[str],
    *,
    close: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Serve `handler` on `bound`; report its URL once it accepts requests; on
    cancellation, stop (open requests get a second), close the socket, then `close()`."""
    server = web.Server(
        handler,
        handler_cancellation=True,
        access_log=None,
        # A body left unread (refused: too large, too slow) is not drained after the
        # answer, which aiohttp does by default for 10 s: the connection closes instead.
        lingering_time=0,
    )
    runner = web.ServerRunner(server, shutdown_timeout=1.0)
    try:
        await runner.setup()
        await web.SockSite(runner, bound.sock).start()
        task_status.started(bound.url)
        await anyio.sleep_forever()
    finally:
        with anyio.CancelScope(shield=True):
            await runner.cleanup()
            bound.sock.close()
            if close is not None:
                await close()


@dataclass(frozen=True, slots=True)
class EngineEndpoint:
    """A server over an engine, running in a thread of its own."""

    url: str
    #: Owned by the server's thread: touch it only through `call`.
    engine: MemoryEngine
    portal: BlockingPortal

    def call(self, function: Callable[..., _T], *args: Any) -> _T:
        """Run a synchronous `function(*args)` on the server's event loop (engine hooks)."""
        return self.portal.call(function, *args)


@contextmanager
def endpoint_in_thread(
    kind: type[_E],
    make_engine: Callable[[], MemoryEngine],
    serve: Callable[..., Awaitable[None]],
    *,
    name: str,
) -> Iterator[_E]:
    """Run `serve(engine, task_status=...)` over `make_engine()` in a background thread,
    both made on that thread's event loop; stopped on exit."""
    with start_blocking_portal(name=name) as portal:
        engine = portal.call(make_engine)
        future, url = portal.start_task(functools.partial(serve, engine), name=name)
        try:
            yield kind(url, engine, portal)
        finally:
            future.cancel()
