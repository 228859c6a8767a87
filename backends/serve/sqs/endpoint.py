"""An SQS-compatible HTTP endpoint over the in-memory engine (SQS's JSON protocol).

    async with anyio.create_task_group() as tg:
        url = await tg.start(serve_sqs, engine)          # http://127.0.0.1:<port>
        ...                                              # any SQS client, endpoint_url=url
        tg.cancel_scope.cancel()

    with sqs_endpoint_in_thread() as endpoint:           # for synchronous code (boto3)
        boto3.client("sqs", endpoint_url=endpoint.url, ...)

This module is the HTTP; the operations, with their rules, are `backends.serve.sqs.service`.
Rules this module keeps:
- Requests are `POST` with `X-Amz-Target: AmazonSQS.<Operation>` and a JSON body; answers
  are `application/x-amz-json-1.0`, an empty body for operations without output, errors as
  `_sqs_protocol.render_error` shapes them. Signatures are accepted unchecked; credentials,
  bodies and requests are never logged (nothing is logged per request at all).
- The base of queue URLs is `http://<host>:<port>`, with the request's Host when bound to a
  wildcard address.
- The operations run on the server's event loop. A client that hangs up during a long poll
  cancels it.
"""

from __future__ import annotations

import functools
import itertools
import json
import secrets
import socket
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import structlog
from aiohttp import web
from anyio.abc import TaskStatus
from anyio.from_thread import BlockingPortal, start_blocking_portal

from backends.memory import MemoryBackend
from backends.memory.engine import MemoryEngine
from backends.memory.handles import HandleRules
from backends.serve.sqs import errors as wire_errors
from backends.serve.sqs.errors import SqsError
from backends.serve.sqs.service import SqsService
from worker.clock import LoopClock

__all__ = ["SqsEndpoint", "serve_sqs", "sqs_endpoint_in_thread"]

_T = TypeVar("_T")
_JSON = "application/x-amz-json-1.0"
_TARGET = "AmazonSQS."
_log = structlog.get_logger("lease_worker.sqs_endpoint")


class _Handler:
    """One aiohttp request handler; `base_url` None: take the host from each request."""

    def __init__(self, service: SqsService, base_url: str | None) -> None:
        self._service = service
        self._base_url = base_url
        self._request_prefix = secrets.token_hex(4)
        self._request_ids = itertools.count(1)

    async def __call__(self, request: web.BaseRequest) -> web.StreamResponse:
        if request.method != "POST":
            if request.path == "/_stats":  # for benchmarks: requests by operation
                stats = {"requests": dict(self._service.requests)}
                return web.Response(body=_encode(stats), content_type="application/json")
            return web.Response(text="lease-worker SQS endpoint\n")
        target = request.headers.get("X-Amz-Target", "")
        raw = await request.content.read()
        try:
            if not target.startswith(_TARGET):
                raise SqsError(
                    "UnsupportedOperation", "Only SQS's JSON protocol (X-Amz-Target) is served."
                )
            params = _decode(raw)
            base_url = self._base_url or f"{request.scheme}://{request.host}"
            answer = await self._service.call(target[len(_TARGET) :], params, base_url)
        except SqsError as error:
            return self._error(error)
        except Exception as error:  # a bug here must not look like the client's fault
            _log.error("sqs_endpoint.internal_error", operation=target, error=type(error).__name__)
            return self._error(SqsError("InternalError", "internal error", sender_fault=False))
        body = b"" if answer is None else _encode(answer)
        return web.Response(body=body, headers=self._headers())

    def _headers(self) -> dict[str, str]:
        request_id = f"{self._request_prefix}-{next(self._request_ids):012x}"
        return {"Content-Type": _JSON, "x-amzn-RequestId": request_id}

    def _error(self, error: SqsError) -> web.Response:
        status, query_error, body = wire_errors.render_error(error)
        headers = self._headers()
        headers["x-amzn-query-error"] = query_error
        return web.Response(status=status, body=_encode(body), headers=headers)


def _decode(raw: bytes) -> Mapping[str, Any]:
    try:
        params = json.loads(raw) if raw else {}
    except (ValueError, UnicodeDecodeError):
        raise SqsError("SerializationException", "The request body is not JSON.") from None
    if not isinstance(params, dict):
        raise SqsError("SerializationException", "The request body is not a JSON object.")
    return params


def _encode(answer: Mapping[str, Any]) -> bytes:
    return json.dumps(answer, ensure_ascii=False, separators=(",", ":")).encode()


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except BaseException:
        sock.close()
        raise
    return sock


def _backend(target: MemoryEngine | MemoryBackend | None) -> tuple[MemoryBackend, bool]:
    """The backend to serve with, and whether this server owns (and closes) it."""
    if isinstance(target, MemoryBackend):
        return target, False
    return MemoryBackend(target), True


async def serve_sqs(
    target: MemoryEngine | MemoryBackend | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    region: str = "us-east-1",
    account: str = "000000000000",
    task_status: TaskStatus[str] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve `target` (an engine, a backend on one, or a new engine) until cancelled.

    Reports `http://<host>:<port>` through `task_status.started` once it accepts requests
    (`port=0` picks a free port). Bind a wildcard host only where that is safe: nothing is
    authenticated.
    """
    backend, owned = _backend(target)
    sock = _bind(host, port)
    bound = f"[{host}]" if ":" in host else host
    url = f"http://{bound}:{sock.getsockname()[1]}"
    wildcard = host in ("0.0.0.0", "::", "")
    service = SqsService(backend, region=region, account=account)
    server = web.Server(
        _Handler(service, None if wildcard else url), handler_cancellation=True, access_log=None
    )
    runner = web.ServerRunner(server, shutdown_timeout=1.0)
    try:
        await runner.setup()
        await web.SockSite(runner, sock).start()
        task_status.started(url)
        await anyio.sleep_forever()
    finally:
        with anyio.CancelScope(shield=True):
            await runner.cleanup()
            sock.close()
            if owned:
                await backend.aclose()


@dataclass(frozen=True, slots=True)
class SqsEndpoint:
    """A `serve_sqs` running in a thread of its own (see `sqs_endpoint_in_thread`)."""

    url: str
    #: Owned by the server's thread: touch it only through `call`.
    engine: MemoryEngine
    portal: BlockingPortal

    def call(self, function: Callable[..., _T], *args: Any) -> _T:
        """Run a synchronous `function(*args)` on the server's event loop (engine hooks)."""
        return self.portal.call(function, *args)


@contextmanager
def sqs_endpoint_in_thread(
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    max_in_flight: int = 120_000,
    region: str = "us-east-1",
    account: str = "000000000000",
    handle_rules: HandleRules = HandleRules.STRICT,
) -> Iterator[SqsEndpoint]:
    """Run an endpoint over a new engine in a background thread; stopped on exit."""
    with start_blocking_portal(name="sqs-endpoint") as portal:
        engine = portal.call(
            functools.partial(
                MemoryEngine, LoopClock(), max_in_flight=max_in_flight, handle_rules=handle_rules
            )
        )
        serve = functools.partial(
            serve_sqs, engine, host=host, port=port, region=region, account=account
        )
        future, url = portal.start_task(serve, name="sqs-endpoint")
        try:
            yield SqsEndpoint(url, engine, portal)
        finally:
            future.cancel()
