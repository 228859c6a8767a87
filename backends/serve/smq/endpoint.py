"""An Alibaba Cloud SMQ (formerly MNS) endpoint over the in-memory engine's SMQ dialect.

    async with anyio.create_task_group() as tg:
        url = await tg.start(serve_smq, engine)          # http://127.0.0.1:<port>
        ...                                              # any SMQ client, endpoint=url
        tg.cancel_scope.cancel()

    with smq_endpoint_in_thread() as endpoint:           # for synchronous code (the SDK)
        mns.account.Account(endpoint.url, "test", "test")

Rules this module keeps:
- Routes are SMQ's REST paths: `/queues` (ListQueue), `/queues/<name>` (PUT create, PUT
  with `?metaoverride=true` SetQueueAttributes, GET attributes, DELETE),
  `/queues/<name>/messages` (POST send, GET receive or with
  `peekonly=true` peek, DELETE one handle in the query or a `<ReceiptHandles>` batch, PUT
  ChangeMessageVisibility). Other paths are 404 `InvalidArgument`; `/_stats` counts requests
  by operation (for benchmarks) and is not signed.
- Every other request is signed (`backends.serve.smq.signature`), with an AccessKeyId this
  endpoint knows (`credentials`, default `test`/`test`), else 403; with no Authorization
  header 400 `MissingAuthorizationHeader`, with one not `MNS <id>:<signature>` 400
  `InvalidAuthorizationHeader`, as SMQ's error-code list has them. The Date's age is not
  checked. A security token (`security-token`) is accepted and not checked.
- Every answer carries `x-mns-request-id`; an error is SMQ's `<Error>` with Code, Message,
  RequestId and HostId. A body is read to its end however the client splits it, at most
  `wire.MAX_XML_BYTES` (else 400, unread), within `body_timeout_s` (SMQ's 30 s by default;
  else 408 `RequestTimeout`); either refusal closes the connection. Nothing is logged per
  request; bodies and credentials never.
"""

from __future__ import annotations

import functools
import itertools
import secrets
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from types import MappingProxyType

import anyio
import structlog
from aiohttp import web
from anyio.abc import TaskStatus

from backends.memory import MemoryBackend
from backends.memory.dialects import SMQ_DIALECT
from backends.memory.engine import MemoryEngine
from backends.serve.listening import EngineEndpoint, bind, endpoint_in_thread, serve_until_cancelled
from backends.serve.smq import wire
from backends.serve.smq.messages import Answer, MessageCalls
from backends.serve.smq.queues import POLLING_WAIT, QueueCalls
from backends.serve.smq.signature import authorization_problem
from backends.serve.smq.wire import SmqError
from worker.clock import LoopClock
from worker.errors import FatalBackendError, QueueNotFound

__all__ = ["DEFAULT_CREDENTIALS", "SmqEndpoint", "serve_smq", "smq_endpoint_in_thread"]

DEFAULT_CREDENTIALS: Mapping[str, str] = MappingProxyType({"test": "test"})
_log = structlog.get_logger("lease_worker.smq_endpoint")
_ENGINE_CODES = {"QueueAlreadyExists": "QueueAlreadyExist"}
#: How long a request's body may take to arrive, by default (SMQ's own limit, documented).
DEFAULT_BODY_TIMEOUT_S = 30.0
_CHUNK = 64 * 1024
#: Refusals after which the rest of the body is never read: the connection closes.
_UNREAD = frozenset({"RequestTimeout"})


class _Handler:
    def __init__(
        self,
        backend: MemoryBackend,
        credentials: Mapping[str, str],
        base_url: str | None,
        body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S,
    ) -> None:
        self._body_timeout_s = body_timeout_s
        self._queues = QueueCalls(backend)
        self._messages = MessageCalls(backend)
        self._engine = backend.engine
        self._credentials = credentials
        self._base_url = base_url
        self._prefix = secrets.token_hex(6).upper()
        self._ids = itertools.count(1)
        self.requests: Counter[str] = Counter()

    async def __call__(self, request: web.BaseRequest) -> web.StreamResponse:
        if request.path == "/_stats":
            return web.json_response({"requests": dict(self.requests)})
        request_id = f"{self._prefix}{next(self._ids):012X}"
        try:
            status, body, headers = await self._answer(request)
        except SmqError as error:
            return self._error(error, request_id, request.host)
        except QueueNotFound:
            missing = SmqError("QueueNotExist", "The queue name you provided is not exist.")
            return self._error(missing, request_id, request.host)
        except FatalBackendError as error:
            code = _ENGINE_CODES.get(error.code or "", "InvalidArgument")
            return self._error(SmqError(code, str(error)), request_id, request.host)
        except Exception as error:  # a bug here must not look like the client's fault
            _log.error("smq_endpoint.internal_error", error=type(error).__name__)
            fault = SmqError("InternalError", "internal error")
            return self._error(fault, request_id, request.host)
        all_headers = {"x-mns-request-id": request_id, **headers}
        if body:
            all_headers["Content-Type"] = "text/xml;charset=UTF-8"
        return web.Response(status=status, body=body, headers=all_headers)

    def _error(self, error: SmqError, request_id: str, host: str) -> web.Response:
        body = wire.error_document(error, request_id, host)
        headers = {"x-mns-request-id": request_id, "Content-Type": "text/xml;charset=UTF-8"}
        response = web.Response(status=error.status, body=body, headers=headers)
        if error.code in _UNREAD or error.message == wire.TOO_LARGE:
            response.force_close()
        return response

    async def _answer(self, request: web.BaseRequest) -> Answer:
        headers = {name.lower(): value for name, value in request.headers.items()}
        problem = authorization_problem(
            request.method, headers, request.raw_path, self._credentials
        )
        if problem is not None:
            raise SmqError(*problem)
        raw = await _body(request, self._body_timeout_s)
        parts = request.path.strip("/").split("/")
        base_url = self._base_url or f"{request.scheme}://{request.host}"
        if parts == ["queues"] and request.method == "GET":
            self.requests["ListQueue"] += 1
            limit = _number(headers.get("x-mns-ret-number", "1000"), "x-mns-ret-number", 1, 1000)
            marker = headers.get("x-mns-marker", "")
            return self._queues.list(headers.get("x-mns-prefix", ""), limit, marker, base_url)
        if len(parts) == 2 and parts[0] == "queues":
            override = request.query.get("metaoverride") == "true"
            return self._queue_call(request.method, parts[1], raw, base_url, override)
        if len(parts) == 3 and parts[0] == "queues" and parts[2] == "messages":
            return await self._message_call(request, parts[1], raw)
        raise SmqError("InvalidArgument", "No SMQ operation has this path.")

    def _queue_call(
        self, method: str, name: str, raw: bytes, base_url: str, override: bool
    ) -> Answer:
        if method == "PUT" and override:
            self.requests["SetQueueAttributes"] += 1
            return self._queues.set_attributes(name, raw)
        if method == "PUT":
            self.requests["CreateQueue"] += 1
            return self._queues.create(name, raw, base_url)
        if method == "GET":
            self.requests["GetQueueAttributes"] += 1
            return self._queues.attributes(name)
        if method == "DELETE":
            self.requests["DeleteQueue"] += 1
            return self._queues.delete(name)
        raise SmqError("InvalidArgument", f"{method} is not a queue operation.")

    async def _message_call(self, request: web.BaseRequest, queue: str, raw: bytes) -> Answer:
        query, method = request.query, request.method
        count = query.get("numOfMessages")
        number = None if count is None else _number(count, "numOfMessages", 1, 16)
        if method == "POST":
            self.requests["SendMessage"] += 1
            return await self._messages.send(queue, raw)
        if method == "GET" and query.get("peekonly") == "true":
            self.requests["PeekMessage"] += 1
            return await self._messages.peek(queue, number)
        if method == "GET":
            self.requests["ReceiveMessage"] += 1
            default_wait = self._engine.kept_attributes(queue).get(POLLING_WAIT, "0")
            wait = _number(query.get("waitseconds", default_wait), "waitseconds", 0, 30)
            return await self._messages.receive(queue, number, wait)
        if method == "PUT":
            self.requests["ChangeMessageVisibility"] += 1
            handle = query.get("ReceiptHandle", "")
            visibility = _number(query.get("VisibilityTimeout", ""), "VisibilityTimeout", 1, 43_200)
            return await self._messages.change_visibility(queue, handle, visibility)
        if method == "DELETE":
            self.requests["DeleteMessage"] += 1
            if "ReceiptHandle" in query:
                return await self._messages.delete(queue, [query["ReceiptHandle"]], single=True)
            root = wire.parse(raw, "ReceiptHandles")
            handles = [child.text or "" for child in wire.children(root, "ReceiptHandle")]
            if not 1 <= len(handles) <= SMQ_DIALECT.max_batch_entries:
                raise SmqError("InvalidArgument", "A batch delete takes 1-16 receipt handles.")
            return await self._messages.delete(queue, handles, single=False)
        raise SmqError("InvalidArgument", f"{method} is not a message operation.")


def _number(value: str, name: str, low: int, high: int) -> int:
    if not value.isdigit() or not low <= int(value) <= high:
        raise SmqError("InvalidArgument", f"{name} must be an integer in {low}-{high}.")
    return int(value)


async def _body(request: web.BaseRequest, timeout_s: float) -> bytes:
    """The whole body, however it is split on the wire: read to its end (a `read(n)` alone
    returns only what has arrived), within `timeout_s`, at most `wire.MAX_XML_BYTES`."""
    declared = request.content_length
    if declared is not None and declared > wire.MAX_XML_BYTES:
        raise SmqError("InvalidArgument", wire.TOO_LARGE)
    chunks: list[bytes] = []
    size = 0
    with anyio.move_on_after(timeout_s) as scope:
        while chunk := await request.content.read(_CHUNK):
            size += len(chunk)
            if size > wire.MAX_XML_BYTES:
                raise SmqError("InvalidArgument", wire.TOO_LARGE)
            chunks.append(chunk)
    if scope.cancelled_caught:
        raise SmqError("RequestTimeout", "The request body came too slowly.")
    return b"".join(chunks)


async def serve_smq(
    engine: MemoryEngine | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    credentials: Mapping[str, str] = DEFAULT_CREDENTIALS,
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S,
    task_status: TaskStatus[str] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve `engine` (its dialect must be SMQ's; None: a new one) until cancelled; reports
    `http://<host>:<port>` through `task_status.started` once it accepts requests. A request
    body that has not arrived whole within `body_timeout_s` is refused (408)."""
    if engine is None:
        engine = MemoryEngine(LoopClock(), dialect=SMQ_DIALECT)
    if engine.dialect is not SMQ_DIALECT:
        raise ValueError(
            f"serve_smq needs an engine with the SMQ dialect, not {engine.dialect.name}"
        )
    backend = MemoryBackend(engine)
    bound = bind(host, port)
    base_url = None if bound.wildcard else bound.url
    handler = _Handler(backend, credentials, base_url, body_timeout_s)
    await serve_until_cancelled(handler, bound, task_status, close=backend.aclose)


class SmqEndpoint(EngineEndpoint):
    """A `serve_smq` running in a thread of its own (see `smq_endpoint_in_thread`)."""


@contextmanager
def smq_endpoint_in_thread(
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    credentials: Mapping[str, str] = DEFAULT_CREDENTIALS,
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S,
) -> Iterator[SmqEndpoint]:
    """Run an endpoint over a new SMQ-dialect engine in a background thread; stopped on exit."""
    make_engine = functools.partial(MemoryEngine, LoopClock(), dialect=SMQ_DIALECT)
    serve = functools.partial(
        serve_smq, host=host, port=port, credentials=credentials, body_timeout_s=body_timeout_s
    )
    with endpoint_in_thread(SmqEndpoint, make_engine, serve, name="smq-endpoint") as endpoint:
        yield endpoint
