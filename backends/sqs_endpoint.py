"""An SQS-compatible HTTP endpoint over the in-memory engine (SQS's JSON protocol).

    async with anyio.create_task_group() as tg:
        url = await tg.start(serve_sqs, engine)          # http://127.0.0.1:<port>
        ...                                              # any SQS client, endpoint_url=url
        tg.cancel_scope.cancel()

    with sqs_endpoint_in_thread() as endpoint:           # for synchronous code (boto3)
        boto3.client("sqs", endpoint_url=endpoint.url, ...)

Rules this module keeps:
- Requests are `POST` with `X-Amz-Target: AmazonSQS.<Operation>` and a JSON body; answers
  are `application/x-amz-json-1.0`, an empty body for operations without output, errors as
  `_sqs_protocol.render_error` shapes them. Signatures are accepted unchecked; credentials,
  bodies and requests are never logged (nothing is logged per request at all).
- Queue URLs are `http://<host>:<port>/<account>/<name>` (with the request's Host when bound
  to a wildcard address), so SDKs that send to the queue URL keep talking to this server;
  a request's `QueueUrl` is read by its last path segment. ARNs are
  `arn:aws:sqs:<region>:<account>:<name>`.
- All engine calls go through one `MemoryBackend` on the server's event loop: a ReceiveMessage
  with WaitTimeSeconds wakes as soon as a message is receivable. A client that hangs up
  during a long poll cancels it, and a cancelled poll takes no message.
- CreateQueue on an existing queue compares only the attributes given (as SQS does); a name
  ending in `.fifo` needs `FifoQueue=true` and the other way round.
"""

from __future__ import annotations

import functools
import itertools
import json
import secrets
import socket
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import structlog
from aiohttp import web
from anyio.abc import TaskStatus
from anyio.from_thread import BlockingPortal, start_blocking_portal

from backends import _sqs_protocol as wire
from backends._memory_engine import UNCHANGED, MemoryEngine, QueueDescription
from backends._sqs_protocol import QueueSettings, SqsError
from backends.memory import MemoryBackend
from worker.clock import LoopClock
from worker.errors import BackendError, QueueNotFound
from worker.types import BatchResult, Deletion, EntryFailure, OutgoingMessage, VisibilityChange

__all__ = ["SqsEndpoint", "SqsService", "serve_sqs", "sqs_endpoint_in_thread"]

Answer = dict[str, Any] | None
_Operation = Callable[[Mapping[str, Any], str], Awaitable[Answer]]
_T = TypeVar("_T")
_JSON = "application/x-amz-json-1.0"
_TARGET = "AmazonSQS."
_log = structlog.get_logger("lease_worker.sqs_endpoint")


class SqsService:
    """The SQS operations on one `MemoryBackend`: decoded request members in, answer out."""

    def __init__(
        self, backend: MemoryBackend, *, region: str = "us-east-1", account: str = "000000000000"
    ) -> None:
        self._backend = backend
        self._engine = backend.engine
        self._region = region
        self._account = account
        self._kept: dict[str, Mapping[str, str]] = {}
        #: Requests served, by operation (known operations only): `GET /_stats` shows them.
        self.requests: Counter[str] = Counter()
        self._operations: dict[str, _Operation] = {
            "CreateQueue": self.create_queue,
            "GetQueueUrl": self.get_queue_url,
            "GetQueueAttributes": self.get_queue_attributes,
            "SetQueueAttributes": self.set_queue_attributes,
            "ListQueues": self.list_queues,
            "DeleteQueue": self.delete_queue,
            "PurgeQueue": self.purge_queue,
            "SendMessage": self.send_message,
            "SendMessageBatch": self.send_message_batch,
            "ReceiveMessage": self.receive_message,
            "DeleteMessage": self.delete_message,
            "DeleteMessageBatch": self.delete_message_batch,
            "ChangeMessageVisibility": self.change_message_visibility,
            "ChangeMessageVisibilityBatch": self.change_message_visibility_batch,
        }

    async def call(self, operation: str, params: Mapping[str, Any], base_url: str) -> Answer:
        """Run `operation`; `base_url` (`http://host:port`) prefixes the queue URLs."""
        handler = self._operations.get(operation)
        if handler is None:
            raise SqsError("UnsupportedOperation", f"{operation} is not supported here.")
        self.requests[operation] += 1
        try:
            return await handler(params, base_url)
        except BackendError as error:
            raise SqsError.from_backend(error) from None

    def arn(self, name: str) -> str:
        return f"arn:aws:sqs:{self._region}:{self._account}:{name}"

    def _url(self, base_url: str, name: str) -> str:
        return f"{base_url}/{self._account}/{name}"

    def _queue(self, params: Mapping[str, Any]) -> str:
        url = wire.required_string(params, "QueueUrl")
        if not url.startswith(("http://", "https://")):
            raise SqsError("InvalidAddress", f"The address {url} is not valid for this endpoint.")
        return url.rstrip("/").rsplit("/", 1)[-1]

    # -- queues -------------------------------------------------------------------------

    async def create_queue(self, params: Mapping[str, Any], base_url: str) -> Answer:
        name = wire.required_string(params, "QueueName")
        settings = wire.queue_settings(wire.mapping(params, "Attributes"))
        if name.endswith(".fifo") != bool(settings.fifo):
            raise SqsError(
                "InvalidParameterValue",
                "A FIFO queue's name ends in .fifo and it has FifoQueue=true; others neither.",
            )
        try:
            current = self._engine.describe_queue(name)
        except QueueNotFound:
            await self._backend.create_queue(name, **_create_fields(settings))
            self._kept[name] = settings.kept
        else:
            self._check_same(current, settings)
        return {"QueueUrl": self._url(base_url, name)}

    def _check_same(self, current: QueueDescription, settings: QueueSettings) -> None:
        config = current.config
        given: dict[str, tuple[object, object]] = {
            "VisibilityTimeout": (settings.visibility_timeout_s, config.visibility_timeout_s),
            "DelaySeconds": (settings.delay_s, config.delay_s),
            "MessageRetentionPeriod": (settings.retention_s, config.retention_s),
            "ContentBasedDeduplication": (
                settings.content_based_deduplication,
                config.content_based_deduplication,
            ),
            "RedrivePolicy": (
                config.redrive if settings.redrive is UNCHANGED else settings.redrive,
                config.redrive,
            ),
        }
        kept = self._kept.get(config.name, {})
        given.update({k: (v, kept.get(k)) for k, v in settings.kept.items()})
        for attribute, (wanted, actual) in given.items():
            if wanted is not None and wanted != actual:
                raise SqsError(
                    "QueueAlreadyExists",
                    f"A queue already exists with the same name and a different value for "
                    f"attribute {attribute}",
                )

    async def get_queue_url(self, params: Mapping[str, Any], base_url: str) -> Answer:
        name = wire.required_string(params, "QueueName")
        self._engine.queue_url(name)
        return {"QueueUrl": self._url(base_url, name)}

    async def get_queue_attributes(self, params: Mapping[str, Any], base_url: str) -> Answer:
        name = self._queue(params)
        names = wire.string_list(params, "AttributeNames")
        unknown = [n for n in names if n not in wire.QUEUE_ATTRIBUTE_NAMES]
        if unknown:
            raise SqsError("InvalidAttributeName", f"Unknown Attribute {unknown[0]}.")
        description = self._engine.describe_queue(name)
        if not names:
            return {}
        every = wire.queue_attributes_to_wire(
            description,
            self._kept.get(name, {}),
            self.arn,
            self._engine.dialect.max_message_bytes,
        )
        if "All" not in names:
            every = {k: v for k, v in every.items() if k in names}
        return {"Attributes": every}

    async def set_queue_attributes(self, params: Mapping[str, Any], base_url: str) -> Answer:
        name = self._queue(params)
        settings = wire.queue_settings(wire.mapping(params, "Attributes"))
        if settings.fifo is not None:
            raise SqsError("InvalidAttributeName", "FifoQueue cannot be changed.")
        self._engine.set_queue_attributes(
            name,
            visibility_timeout_s=settings.visibility_timeout_s,
            delay_s=settings.delay_s,
            retention_s=settings.retention_s,
            redrive=settings.redrive,
            content_based_deduplication=settings.content_based_deduplication,
        )
        self._kept[name] = {**self._kept.get(name, {}), **settings.kept}
        return None

    async def list_queues(self, params: Mapping[str, Any], base_url: str) -> Answer:
        limit = wire.integer(params, "MaxResults")
        if limit is not None and not 1 <= limit <= 1000:
            raise wire.invalid("MaxResults", "Reason: must be between 1 and 1000.")
        names = self._engine.list_queues(wire.string(params, "QueueNamePrefix") or "")
        after = wire.string(params, "NextToken")
        if after:
            names = [name for name in names if name > after]
        page = names[: limit or 1000]
        answer: dict[str, Any] = {}
        if page:
            answer["QueueUrls"] = [self._url(base_url, name) for name in page]
        if limit is not None and len(names) > limit:
            answer["NextToken"] = page[-1]
        return answer

    async def delete_queue(self, params: Mapping[str, Any], base_url: str) -> Answer:
        name = self._queue(params)
        await self._backend.delete_queue(name)
        self._kept.pop(name, None)
        return None

    async def purge_queue(self, params: Mapping[str, Any], base_url: str) -> Answer:
        await self._backend.purge(self._queue(params))
        return None

    # -- messages -----------------------------------------------------------------------

    async def send_message(self, params: Mapping[str, Any], base_url: str) -> Answer:
        name = self._queue(params)
        message = wire.outgoing_message(params)
        system_md5 = wire.system_attributes_md5(params)
        result = await self._backend.send(name, [message])
        if result.failed:
            failure = result.failed[0]
            raise SqsError(failure.code, failure.message)
        answer = self._sent(name, message, result.message_ids[message.entry_id])
        if system_md5 is not None:
            answer["MD5OfMessageSystemAttributes"] = system_md5
        return answer

    def _sent(self, name: str, message: OutgoingMessage, message_id: str) -> dict[str, Any]:
        sequence = self._engine.sequence_number(name, message_id)
        return wire.sent_to_wire(message, message_id, sequence)

    async def send_message_batch(self, params: Mapping[str, Any], base_url: str) -> Answer:
        name = self._queue(params)
        raw = wire.entries(params)
        self._engine.queue_url(name)
        self._engine.check_batch("SendMessageBatch", name, [wire.entry_id(e) for e in raw])
        messages: list[OutgoingMessage] = []
        system_md5: dict[str, str] = {}
        failed: list[EntryFailure] = []
        for entry in raw:
            entry_id = wire.entry_id(entry)
            try:
                messages.append(wire.outgoing_message(entry, entry_id))
                md5 = wire.system_attributes_md5(entry)
            except SqsError as error:
                failed.append(EntryFailure(entry_id, error.code, error.message))
                continue
            if md5 is not None:
                system_md5[entry_id] = md5
        successful: list[dict[str, Any]] = []
        if messages:
            result = await self._backend.send(name, messages)
            failed.extend(result.failed)
            for message in messages:
                message_id = result.message_ids.get(message.entry_id)
                if message_id is not None:
                    item = {"Id": message.entry_id, **self._sent(name, message, message_id)}
                    if message.entry_id in system_md5:
                        item["MD5OfMessageSystemAttributes"] = system_md5[message.entry_id]
                    successful.append(item)
        return {"Successful": successful, "Failed": [wire.entry_failure_to_wire(f) for f in failed]}

    async def receive_message(self, params: Mapping[str, Any], base_url: str) -> Answer:
        name = self._queue(params)
        wait_s = wire.integer(params, "WaitTimeSeconds")
        if wait_s is None:
            wait_s = int(self._kept.get(name, {}).get("ReceiveMessageWaitTimeSeconds", 0))
        most = wire.integer(params, "MaxNumberOfMessages")
        system = wire.system_attribute_filter(params)
        user = wire.message_attribute_filter(params)
        messages = await self._backend.receive(
            name,
            max_messages=1 if most is None else most,
            wait_s=wait_s,
            visibility_s=wire.integer(params, "VisibilityTimeout"),
        )
        if not messages:
            return {}
        return {"Messages": [wire.message_to_wire(m, system, user) for m in messages]}

    async def delete_message(self, params: Mapping[str, Any], base_url: str) -> Answer:
        name = self._queue(params)
        handle = wire.required_string(params, "ReceiptHandle")
        result = await self._backend.delete(name, [Deletion("0", handle)])
        _raise_first(result.failed)
        return None

    async def delete_message_batch(self, params: Mapping[str, Any], base_url: str) -> Answer:
        name = self._queue(params)
        deletions = [
            Deletion(wire.entry_id(e), wire.required_string(e, "ReceiptHandle"))
            for e in wire.entries(params)
        ]
        return _batch_answer(await self._backend.delete(name, deletions))

    async def change_message_visibility(self, params: Mapping[str, Any], base_url: str) -> Answer:
        name = self._queue(params)
        change = _visibility_change(params, "0")
        result = await self._backend.extend(name, [change])
        _raise_first(result.failed)
        return None

    async def change_message_visibility_batch(
        self, params: Mapping[str, Any], base_url: str
    ) -> Answer:
        name = self._queue(params)
        changes = [_visibility_change(e, wire.entry_id(e)) for e in wire.entries(params)]
        return _batch_answer(await self._backend.extend(name, changes))


def _create_fields(settings: QueueSettings) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "visibility_timeout_s": settings.visibility_timeout_s,
        "delay_s": settings.delay_s,
        "retention_s": settings.retention_s,
        "content_based_deduplication": settings.content_based_deduplication,
    }
    if settings.redrive is not UNCHANGED:
        fields["redrive"] = settings.redrive
    return {key: value for key, value in fields.items() if value is not None}


def _visibility_change(params: Mapping[str, Any], entry_id: str) -> VisibilityChange:
    handle = wire.required_string(params, "ReceiptHandle")
    visibility = wire.integer(params, "VisibilityTimeout")
    if visibility is None:
        raise wire.missing("VisibilityTimeout")
    return VisibilityChange(entry_id, handle, visibility)


def _raise_first(failed: tuple[EntryFailure, ...]) -> None:
    if failed:
        raise SqsError(failed[0].code, failed[0].message)


def _batch_answer(result: BatchResult) -> dict[str, Any]:
    return {
        "Successful": [{"Id": entry_id} for entry_id in result.succeeded],
        "Failed": [wire.entry_failure_to_wire(failure) for failure in result.failed],
    }


# -- HTTP -----------------------------------------------------------------------------------


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
        status, query_error, body = wire.render_error(error)
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
) -> Iterator[SqsEndpoint]:
    """Run an endpoint over a new engine in a background thread; stopped on exit."""
    with start_blocking_portal(name="sqs-endpoint") as portal:
        engine = portal.call(
            functools.partial(MemoryEngine, LoopClock(), max_in_flight=max_in_flight)
        )
        serve = functools.partial(
            serve_sqs, engine, host=host, port=port, region=region, account=account
        )
        future, url = portal.start_task(serve, name="sqs-endpoint")
        try:
            yield SqsEndpoint(url, engine, portal)
        finally:
            future.cancel()
