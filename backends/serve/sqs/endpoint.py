"""An SQS-compatible HTTP endpoint over the in-memory engine (SQS's JSON and query protocols).

    async with anyio.create_task_group() as tg:
        url = await tg.start(serve_sqs, engine)          # http://127.0.0.1:<port>
        ...                                              # any SQS client, endpoint_url=url
        tg.cancel_scope.cancel()

    with sqs_endpoint_in_thread() as endpoint:           # for synchronous code (boto3)
        boto3.client("sqs", endpoint_url=endpoint.url, ...)

This module is the HTTP; the operations, with their rules, are `backends.serve.sqs.service`.
Rules this module keeps:
- The protocol is chosen per request, as SQS chooses it: a request with
  `X-Amz-Target: AmazonSQS.<Operation>` speaks JSON (`application/x-amz-json-1.0` both
  ways, errors as `errors.render_error` shapes them); any other `POST`, or a `GET` with
  `Action=` in its query string, speaks the query protocol (`backends.serve.sqs.query`:
  form-encoded members, XML answers). Other `GET`s get a banner (`/_stats`: requests by
  operation, for benchmarks).
- A body is read within bounds (`backends.serve.sqs.intake`: size and time). Every request
  refused before it reaches an operation (too large, too slow, unreadable, an unknown
  operation) gets its protocol's error shape, a 4xx, and one short log line that names the
  reason and never the input. Signatures are accepted unchecked; credentials, bodies and
  requests are never logged (nothing else is logged per request).
- The base of queue URLs is `http://<host>:<port>`, with the request's Host when bound to a
  wildcard address.
- The operations run on the server's event loop. A client that hangs up during a long poll
  cancels it.
"""

from __future__ import annotations

import functools
import itertools
import json
import re
import secrets
import urllib.parse
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import structlog
from aiohttp import web
from anyio.abc import TaskStatus

from backends.memory import MemoryBackend
from backends.memory.engine import MemoryEngine
from backends.memory.handles import HandleRules
from backends.serve.listening import EngineEndpoint, bind, endpoint_in_thread, serve_until_cancelled
from backends.serve.sqs import errors as wire_errors
from backends.serve.sqs import query as wire_query
from backends.serve.sqs.errors import SqsError
from backends.serve.sqs.intake import DEFAULT_BODY_TIMEOUT_S, DEFAULT_MAX_REQUEST_BYTES, read_body
from backends.serve.sqs.service import SqsService
from worker.clock import LoopClock

__all__ = ["SqsEndpoint", "serve_sqs", "sqs_endpoint_in_thread"]

_JSON = "application/x-amz-json-1.0"
_TARGET = re.compile(r"AmazonSQS\.([A-Za-z]{1,64})\Z")
#: Refusals made before an operation runs: each gets one log line.
_PROTOCOL_CODES = frozenset(
    {
        "RequestEntityTooLarge", "RequestTimeout", "SerializationException",
        "UnknownOperationException", "InvalidAction", "MissingAction", "MalformedQueryString",
    }
)  # fmt: skip
_log = structlog.get_logger("lease_worker.sqs_endpoint")


@dataclass(frozen=True, slots=True)
class _Bounds:
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S


class _Handler:
    """One aiohttp request handler; `base_url` None: take the host from each request."""

    def __init__(
        self,
        service: SqsService,
        base_url: str | None,
        bounds: _Bounds,
        durable: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._service = service
        self._durable = durable
        self._base_url = base_url
        self._bounds = bounds
        self._request_prefix = secrets.token_hex(4)
        self._request_ids = itertools.count(1)

    async def __call__(self, request: web.BaseRequest) -> web.StreamResponse:
        is_json = "X-Amz-Target" in request.headers
        if not is_json and request.method != "POST" and "Action" not in request.query:
            if request.path == "/_stats":  # for benchmarks: requests by operation
                stats = {"requests": dict(self._service.requests)}
                return web.Response(body=_encode(stats), content_type="application/json")
            return web.Response(text="lease-worker SQS endpoint\n")
        request_id = f"{self._request_prefix}-{next(self._request_ids):012x}"
        operation = "?"
        try:
            raw = await read_body(
                request,
                max_bytes=self._bounds.max_request_bytes,
                timeout_s=self._bounds.body_timeout_s,
            )
            if is_json:
                operation, params = _json_request(request.headers["X-Amz-Target"], raw)
            else:
                operation, params = wire_query.decode(_form(request, raw))
            base_url = self._base_url or f"{request.scheme}://{request.host}"
            try:
                answer = await self._service.call(operation, params, base_url)
            finally:  # `--persist`: what the call changed is on disk before any answer
                if self._durable is not None:
                    await self._durable()
        except SqsError as error:
            if error.code in _PROTOCOL_CODES:
                _log.warning(
                    "sqs_endpoint.bad_request",
                    code=error.code,
                    protocol="json" if is_json else "query",
                )
            return _error(error, request_id, is_json)
        except Exception as error:  # a bug here must not look like the client's fault
            _log.error(
                "sqs_endpoint.internal_error", operation=operation, error=type(error).__name__
            )
            fault = SqsError("InternalError", "internal error", sender_fault=False)
            return _error(fault, request_id, is_json)
        if is_json:
            body = b"" if answer is None else _encode(answer)
            return web.Response(body=body, headers=_headers(request_id, _JSON))
        xml = wire_query.encode(operation, answer, request_id)
        return web.Response(body=xml, headers=_headers(request_id, wire_query.CONTENT_TYPE))


def _headers(request_id: str, content_type: str) -> dict[str, str]:
    return {"Content-Type": content_type, "x-amzn-RequestId": request_id}


def _error(error: SqsError, request_id: str, is_json: bool) -> web.Response:
    if is_json:
        status, query_error, body = wire_errors.render_error(error)
        headers = _headers(request_id, _JSON)
        headers["x-amzn-query-error"] = query_error
        response = web.Response(status=status, body=_encode(body), headers=headers)
    else:
        status, xml = wire_query.encode_error(error, request_id)
        headers = _headers(request_id, wire_query.CONTENT_TYPE)
        response = web.Response(status=status, body=xml, headers=headers)
    if error.code in ("RequestEntityTooLarge", "RequestTimeout"):
        # The rest of the body is never read: close instead of draining it.
        response.force_close()
    return response


def _json_request(target: str, raw: bytes) -> tuple[str, Mapping[str, Any]]:
    match = _TARGET.match(target)
    if match is None:
        raise SqsError("UnknownOperationException", "The X-Amz-Target names no SQS operation.")
    return match.group(1), _decode(raw)


def _form(request: web.BaseRequest, raw: bytes) -> dict[str, str]:
    """The query protocol's members: the URL's query string, then the form body's."""
    try:
        text = raw.decode("utf-8")
        pairs = urllib.parse.parse_qsl(text, keep_blank_values=True, errors="strict")
    except (UnicodeDecodeError, ValueError):
        raise SqsError("MalformedQueryString", "The request body is not a form.") from None
    return {**request.query, **dict(pairs)}


def _decode(raw: bytes) -> Mapping[str, Any]:
    try:
        params = json.loads(raw) if raw else {}
    except (ValueError, RecursionError):
        # RecursionError: JSON nested deeper than the parser goes (a request, not a bug).
        raise SqsError("SerializationException", "The request body is not JSON.") from None
    if not isinstance(params, dict):
        raise SqsError("SerializationException", "The request body is not a JSON object.")
    return params


def _encode(answer: Mapping[str, Any]) -> bytes:
    return json.dumps(answer, ensure_ascii=False, separators=(",", ":")).encode()


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
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S,
    durable: Callable[[], Awaitable[None]] | None = None,
    task_status: TaskStatus[str] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve `target` (an engine, a backend on one, or a new engine) until cancelled.

    Reports `http://<host>:<port>` through `task_status.started` once it accepts requests
    (`port=0` picks a free port). A request body larger than `max_request_bytes`, or slower
    than `body_timeout_s`, is refused unread. Bind a wildcard host only where that is safe:
    nothing is authenticated. `durable`, if given, is awaited after each operation and
    before its answer (`backends.serve.sqs.persist`).
    """
    backend, owned = _backend(target)
    bound = bind(host, port)
    service = SqsService(backend, region=region, account=account)
    bounds = _Bounds(max_request_bytes, body_timeout_s)
    handler = _Handler(service, None if bound.wildcard else bound.url, bounds, durable)
    await serve_until_cancelled(
        handler, bound, task_status, close=backend.aclose if owned else None
    )


class SqsEndpoint(EngineEndpoint):
    """A `serve_sqs` running in a thread of its own (see `sqs_endpoint_in_thread`)."""


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
    make_engine = functools.partial(
        MemoryEngine, LoopClock(), max_in_flight=max_in_flight, handle_rules=handle_rules
    )
    serve = functools.partial(serve_sqs, host=host, port=port, region=region, account=account)
    with endpoint_in_thread(SqsEndpoint, make_engine, serve, name="sqs-endpoint") as endpoint:
        yield endpoint
