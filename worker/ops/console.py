"""The live console: `/` (a page), `/console/*` (its script and style, shipped in the
package: no CDN, no build step, works offline) and `/api/status` (the JSON the page
polls; worker.ops.status). Read-only: nothing here changes the worker or a queue.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from importlib import resources
from typing import Any

from aiohttp import web

__all__ = ["add_console_routes"]

_STATIC = {
    "console.js": "text/javascript",
    "console.css": "text/css",
}
#: The page loads only what this listener serves; no inline script, no frame.
_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def _read(name: str) -> bytes:
    return resources.files("worker.ops").joinpath("static", name).read_bytes()


def add_console_routes(app: web.Application, status: Callable[[], dict[str, Any]]) -> None:
    page = _read("console.html")
    static = {name: (_read(name), kind) for name, kind in _STATIC.items()}

    async def index(request: web.Request) -> web.Response:
        return web.Response(body=page, content_type="text/html", headers=_HEADERS)

    async def asset(request: web.Request) -> web.Response:
        found = static.get(request.match_info["name"])
        if found is None:
            raise web.HTTPNotFound()
        body, kind = found
        return web.Response(body=body, content_type=kind, headers=_HEADERS)

    async def api_status(request: web.Request) -> web.Response:
        return web.Response(
            text=json.dumps(status()), content_type="application/json", headers=_HEADERS
        )

    app.router.add_get("/", index)
    app.router.add_get("/console/{name}", asset)
    app.router.add_get("/api/status", api_status)
