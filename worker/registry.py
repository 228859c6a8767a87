"""Handler registration, validated when the decorator runs (at import time).

`@app.handler("orders")` checks the queue name, the function and every option at once and
raises `RegistrationError` or `ConfigError` with the offending value; it returns the
function unchanged, so it stays callable and testable on its own. The handler's signature
says what it takes (`worker.signature`): the message, a typed payload decoded by the codec
its annotation names (`worker.envelope.codecs`), or both; a batch handler a list of messages.

`AppSpec` is what the runtime runs: a plain value that describes an app (its name, config,
handlers and hooks), which `Worker.spec()` makes; the runtime never imports the decorator
object (`worker.app`).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeAlias

from prometheus_client import CollectorRegistry

from worker import jsonlib
from worker.backend import Backend
from worker.config import ErrorPolicy, FlowControl, OnError, WorkerConfig
from worker.envelope.large_payloads import S3Payloads
from worker.errors import ConfigError, RegistrationError
from worker.message import Message
from worker.middleware import Middleware
from worker.rules import QUEUE_NAME_RULE, is_queue_name, queue_name
from worker.signature import Binding, bind_batch, bind_single

__all__ = [
    "AppSpec",
    "BatchOptions",
    "Decoder",
    "DescribesApp",
    "HandlerFunc",
    "HandlerSpec",
    "Registry",
    "WorkerContext",
    "app_spec",
    "resolve_decoder",
]

Decoder: TypeAlias = Callable[[str], Any]
HandlerFunc: TypeAlias = Callable[[Message], Awaitable[None]] | Callable[[Message], None]


@dataclass(frozen=True, slots=True)
class WorkerContext:
    """What start-up hooks and background tasks get: the backend, the metrics registry (to
    add metrics of their own beside the worker's), and a way to ask for a shutdown."""

    backend: Backend
    registry: CollectorRegistry
    request_shutdown: Callable[[], None]


Hook: TypeAlias = Callable[[WorkerContext], Coroutine[Any, Any, None]]


def _raw(body: str) -> str:
    return body


_DECODERS: Mapping[str, Decoder] = {"json": jsonlib.loads, "raw": _raw}


def resolve_decoder(decode: str | Decoder) -> Decoder:
    if callable(decode):
        return decode
    try:
        return _DECODERS[decode]
    except (KeyError, TypeError):
        raise ConfigError(
            f"decode={decode!r}: must be 'json', 'raw' or a callable taking the body string"
        ) from None


@dataclass(frozen=True, slots=True)
class BatchOptions:
    """A batch handler's batching: at most `max_size` messages, gathered for at most
    `max_wait_s` seconds after the first one arrives."""

    max_size: int
    max_wait_s: float

    def __post_init__(self) -> None:
        if not isinstance(self.max_size, int) or self.max_size < 1:
            raise ConfigError(f"max_size={self.max_size!r}: must be a whole number >= 1")
        if not 0 <= self.max_wait_s < float("inf"):
            raise ConfigError(f"max_wait_s={self.max_wait_s!r}: must be a finite number >= 0")


_MESSAGE_ONLY = Binding(None, ("message",))


@dataclass(frozen=True, slots=True, kw_only=True)
class HandlerSpec:
    queue: str
    func: HandlerFunc
    is_async: bool
    decoder: Decoder
    policy: ErrorPolicy
    max_in_flight: int | None
    middleware: tuple[Middleware, ...]
    #: How the handler is called: its typed parameter's codec and its arguments' order.
    binding: Binding = _MESSAGE_ONLY
    #: Set for a batch handler (`@app.batch_handler`), which takes a list of messages.
    batch: BatchOptions | None = None
    #: Where bodies stored in S3 are fetched from before decoding (None: not fetched).
    large_payloads: S3Payloads | None = None
    #: This queue's own flow control (None: the worker's `WorkerConfig.flow`).
    flow: FlowControl | None = None

    @property
    def name(self) -> str:
        return getattr(self.func, "__qualname__", repr(self.func))


class Registry:
    def __init__(self) -> None:
        self._specs: dict[str, HandlerSpec] = {}

    @classmethod
    def of(cls, specs: Iterable[HandlerSpec]) -> Registry:
        """A registry of handlers already checked (each once registered with `add`)."""
        registry = cls()
        registry._specs = {spec.queue: spec for spec in specs}
        return registry

    def __iter__(self) -> Iterator[HandlerSpec]:
        return iter(self._specs.values())

    def __len__(self) -> int:
        return len(self._specs)

    def __getitem__(self, queue: str) -> HandlerSpec:
        return self._specs[queue]

    @property
    def queues(self) -> list[str]:
        return list(self._specs)

    def add(
        self,
        queue: str,
        func: Any,
        *,
        decode: str | Decoder | None = None,
        on_error: ErrorPolicy | OnError | str = OnError.DEFAULT,
        max_in_flight: int | None = None,
        middleware: Sequence[Middleware] = (),
        batch: BatchOptions | None = None,
        large_payloads: S3Payloads | None = None,
        flow: FlowControl | None = None,
    ) -> HandlerSpec:
        _check_queue(queue)
        if queue in self._specs:
            raise RegistrationError(
                f"queue {queue!r} already has a handler ({self._specs[queue].name}); "
                "one handler per queue"
            )
        if not callable(func):
            raise RegistrationError(f"handler for {queue!r} must be callable, got {func!r}")
        if max_in_flight is not None and (not isinstance(max_in_flight, int) or max_in_flight < 1):
            raise ConfigError(f"max_in_flight={max_in_flight!r}: must be a whole number >= 1")
        if flow is not None and not isinstance(flow, FlowControl):
            raise ConfigError(
                f"flow for {queue!r} must be a worker.FlowControl (flow=FlowControl(rate=...)), "
                f"got {type(flow).__name__}"
            )
        for layer in middleware:
            if not callable(layer):
                raise RegistrationError(f"middleware for {queue!r} must be callable: {layer!r}")
        binding, decoder = _binding(func, queue, decode, batch)
        spec = HandlerSpec(
            queue=queue,
            func=func,
            is_async=_is_async(func),
            decoder=decoder,
            policy=ErrorPolicy.parse(on_error),
            max_in_flight=max_in_flight,
            middleware=tuple(middleware),
            binding=binding,
            batch=batch,
            large_payloads=large_payloads,
            flow=flow,
        )
        if batch is not None and not spec.is_async:
            raise RegistrationError(
                f"batch handler {spec.name} for {queue!r} must be async (async def)"
            )
        self._specs[queue] = spec
        return spec


def _binding(
    func: Any, queue: str, decode: str | Decoder | None, batch: BatchOptions | None
) -> tuple[Binding, Decoder]:
    if batch is not None:
        bind_batch(func, queue)
        return _MESSAGE_ONLY, resolve_decoder(decode or "json")
    binding = bind_single(func, queue)
    if binding.codec is None:
        return binding, resolve_decoder(decode or "json")
    if decode is not None:
        raise RegistrationError(
            f"handler for {queue!r}: decode={decode!r} and a typed parameter "
            f"({binding.codec.kind}) both say how to decode; keep one"
        )
    return binding, binding.codec.decode


def _is_async(func: Any) -> bool:
    # An instance with `async def __call__` is as async as a coroutine function.
    call = type(func).__dict__.get("__call__") if not inspect.isroutine(func) else None
    return inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(call)


def _check_queue(queue: object) -> None:
    if not isinstance(queue, str):
        raise RegistrationError(f"queue must be a string (a name or URL), got {queue!r}")
    # The backend would refuse the name at the first receive; refusing it here says so at import.
    if not is_queue_name(queue_name(queue)):
        raise RegistrationError(f"queue {queue!r}: a queue name has {QUEUE_NAME_RULE}")


class Handlers(Protocol):
    """An app's handlers by queue, as the runtime reads them (a `Registry` is one)."""

    def __iter__(self) -> Iterator[HandlerSpec]: ...

    def __len__(self) -> int: ...

    def __getitem__(self, queue: str) -> HandlerSpec: ...

    @property
    def queues(self) -> list[str]: ...


@dataclass(frozen=True, slots=True)
class AppSpec:
    """An app as the runtime sees it: a plain value, made by `Worker.spec()`: its name,
    settings, handlers by queue, start-up hooks and background tasks."""

    name: str
    config: WorkerConfig
    registry: Handlers
    startup_hooks: tuple[Hook, ...] = ()
    background_tasks: tuple[Hook, ...] = ()


class DescribesApp(Protocol):
    """What the runtime accepts besides an `AppSpec`: anything that makes one (a `Worker`)."""

    def spec(self) -> AppSpec: ...


def app_spec(app: AppSpec | DescribesApp) -> AppSpec:
    """`app` as an `AppSpec` (a `Worker` describes itself with `spec()`)."""
    return app if isinstance(app, AppSpec) else app.spec()
