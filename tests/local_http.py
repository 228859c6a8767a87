"""`serving(handler)`: an aiohttp handler answering every method and path on 127.0.0.1 at a
free port, for as long as the `async with` lasts; yields its base URL. For tests that stand
in for a server (a signature-checking SQS, a recording proxy)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from aiohttp import web

__all__ = ["serving"]


@asynccontextmanager
async def serving(
    handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
) -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()
