"""The console's dead-letter API: `GET /api/dlq` (read-only) and `POST /api/dlq/redrive`
(the one mutating action), for the dead-letter queues of this worker's own queues only.

A mutation needs all of (else it changes nothing):
- a token: the worker started with `LEASE_WORKER_CONSOLE_TOKEN`, and the request sending
  it as `Authorization: Bearer <token>` (compared in constant time): else 401;
- the same origin: an `Origin` header, when sent, naming this listener by one of its
  configured names (`worker.ops.host_names`; the request's own `Host` proves nothing, a
  rebinding page sends its own name in both) and the port the request came to: else 403;
- a JSON body (`Content-Type: application/json`, which a cross-site form cannot send
  without a CORS preflight, and this listener answers none): else 415;
- the queue's name typed back as `confirm`: else 400.
GET never changes anything. A body that is not JSON, or JSON nested more than
`worker.ops.limits.MAX_JSON_DEPTH` deep, is 400 (found before any parser recurses into it).
"""

from __future__ import annotations

import hmac
import json
from typing import Any

from aiohttp import web

from worker.errors import BackendError, ConfigError
from worker.ops import dead_letters
from worker.ops.connections import client_fault
from worker.ops.host_names import HostNames
from worker.ops.limits import TooDeep, loads_bounded
from worker.runtime.supervisor import Supervisor

__all__ = ["add_dead_letter_routes"]

_JSON_HEADERS = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}
#: Seconds one dead-letter listing is served again.
_LISTING_TTL_S = 5.0


def _answer(status: int, payload: dict[str, Any]) -> web.Response:
    return web.Response(
        status=status,
        text=json.dumps(payload),
        content_type="application/json",
        headers=_JSON_HEADERS,
    )


def _own_dead_letter_queues(supervisor: Supervisor) -> dict[str, list[str]]:
    """This worker's dead-letter queues, each with the handler queues that feed it."""
    found: dict[str, list[str]] = {}
    for queue, info in sorted(supervisor.queues.items()):
        if info.redrive is not None:
            found.setdefault(info.redrive.dead_letter_queue, []).append(queue)
    return found


def add_dead_letter_routes(
    app: web.Application, supervisor: Supervisor, *, token: str | None, names: HostNames
) -> None:
    cached: dict[str, tuple[float, int, dict[str, Any]]] = {}

    async def listing(request: web.Request) -> web.Response:
        # Each listing costs calls to the queue service and every open page asks every 5 s:
        # one answer serves them all for that long (a redrive forgets it).
        now = supervisor.clock.now()
        if "listing" not in cached or now - cached["listing"][0] >= _LISTING_TTL_S:
            cached["listing"] = (now, *await _listing())
        _, status, payload = cached["listing"]
        return _answer(status, payload)

    async def _listing() -> tuple[int, dict[str, Any]]:
        backend = supervisor.backend
        rows = []
        try:
            for name, sources in _own_dead_letter_queues(supervisor).items():
                info = await backend.queue_info(name)
                tasks = await dead_letters.move_tasks(backend, name)
                rows.append(
                    {
                        "queue": name,
                        "sources": sources,
                        "visible": info.approximate_visible,
                        "in_flight": info.approximate_in_flight,
                        "tasks": [
                            {"status": t.status, "moved": t.moved, "to_move": t.to_move}
                            for t in tasks[:1]
                        ],
                    }
                )
        except (BackendError, ConfigError) as error:
            return 502, {"error": str(error)[:500]}
        return 200, {"dead_letter_queues": rows, "actions": token is not None}

    async def redrive(request: web.Request) -> web.Response:
        refused = _refuse(request, token, names)
        if refused is not None:
            return refused
        try:
            asked = loads_bounded(await request.read())
        except TooDeep as error:
            client_fault(request, "json_too_deep")
            return _answer(400, {"error": str(error)})
        except ValueError:
            client_fault(request, "not_json")
            return _answer(400, {"error": "the body is not JSON"})
        queue = asked.get("queue") if isinstance(asked, dict) else None
        if not isinstance(queue, str) or queue not in _own_dead_letter_queues(supervisor):
            return _answer(404, {"error": "not a dead-letter queue of this worker"})
        if asked.get("confirm") != queue:
            return _answer(400, {"error": "type the queue's name into confirm"})
        rate = asked.get("max_per_second")
        if rate is not None and (isinstance(rate, bool) or not isinstance(rate, int)):
            return _answer(400, {"error": "max_per_second must be a whole number"})
        try:
            handle = await dead_letters.redrive(supervisor.backend, queue, max_per_second=rate)
        except (BackendError, ConfigError) as error:
            return _answer(409, {"error": str(error)[:500]})
        cached.clear()
        return _answer(202, {"task_handle": handle, "queue": queue})

    app.router.add_get("/api/dlq", listing)
    app.router.add_post("/api/dlq/redrive", redrive)


def _refuse(request: web.Request, token: str | None, names: HostNames) -> web.Response | None:
    given = request.headers.get("Authorization", "")
    if token is None or not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
        return _answer(401, {"error": "a console token is needed (LEASE_WORKER_CONSOLE_TOKEN)"})
    origin = request.headers.get("Origin")
    host = request.headers.get("Host")  # not request.host, which makes one up when missing
    if origin is not None and not names.allows_origin(origin, host):
        return _answer(403, {"error": "cross-origin requests change nothing"})
    if request.content_type != "application/json":
        return _answer(415, {"error": "send JSON (Content-Type: application/json)"})
    return None
