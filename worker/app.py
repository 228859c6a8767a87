"""`Worker`: the application object users decorate.

The runtime never imports it: it runs `Worker.spec()`, a plain `worker.registry.AppSpec`.
`WorkerContext` and `Hook` (what hooks receive and are) live in `worker.registry` and are
re-exported here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

from worker.config import ErrorPolicy, FlowControl, OnError, WorkerConfig
from worker.envelope.large_payloads import S3Payloads
from worker.errors import RegistrationError
from worker.message import Message
from worker.middleware import CallNext, Middleware
from worker.registry import AppSpec, BatchOptions, Decoder, Hook, Registry, WorkerContext

__all__ = ["HandlerGuard", "Hook", "Worker", "WorkerContext"]

F = TypeVar("F")


@runtime_checkable
class HandlerGuard(Protocol):
    """What `@app.handler(..., idempotent=...)` takes (`worker.idempotency` makes them).

    It runs as its handler's innermost middleware, so the handler's return value reaches it;
    `attach` is called once per handler it guards, at registration, to add what it needs
    beside the handlers (a start-up hook, a background task) and read the worker's settings.
    """

    async def __call__(self, message: Message, call_next: CallNext) -> None: ...

    def attach(self, worker: Worker, queue: str) -> None: ...


class Worker:
    """A set of handlers, one per queue, with the settings they share.

    ::

        app = Worker()

        @app.handler("orders", on_error="backoff")
        async def handle(message: Message) -> None:
            ...
    """

    def __init__(
        self,
        config: WorkerConfig | None = None,
        *,
        middleware: Sequence[Middleware] = (),
        name: str = "lease-worker",
        large_payloads: S3Payloads | None = None,
    ) -> None:
        if config is not None and not isinstance(config, WorkerConfig):
            raise RegistrationError(f"config must be a WorkerConfig, got {config!r}")
        self.config = config or WorkerConfig()
        self.name = name
        self.registry = Registry()
        self.middleware: tuple[Middleware, ...] = tuple(middleware)
        self.startup_hooks: list[Hook] = []
        self.background_tasks: list[Hook] = []
        #: Bodies stored in S3 by a producer (`worker.envelope.large_payloads`) are fetched
        #: from here.
        self.large_payloads = large_payloads

    def handler(
        self,
        queue: str,
        *,
        decode: str | Decoder | None = None,
        on_error: ErrorPolicy | OnError | str = OnError.DEFAULT,
        max_in_flight: int | None = None,
        middleware: Sequence[Middleware] = (),
        idempotent: HandlerGuard | None = None,
        flow: FlowControl | None = None,
    ) -> Callable[[F], F]:
        """Register the decorated function as the handler of `queue`; returns it unchanged.

        The handler takes the message, its typed payload, or both: `async def handle(order:
        Order, message: Message)`, where the annotation (a dataclass, a pydantic model, a
        TypedDict, str, bytes, dict, list) decides how the body is decoded.
        `decode` (untyped handlers only): 'json' (default), 'raw' (the body string) or a
        callable(str) -> Any.
        `on_error`: 'default' (the first retry at once, then a growing, jittered delay:
        never a hot loop), 'release' (visible again at once, every time), 'backoff', an
        `ErrorPolicy`, or 'expire' (let the visibility lapse, toward the DLQ).
        `max_in_flight`: messages of this queue held at once (default: the worker's).
        `middleware`: this handler's own layers, inside the worker's.
        `idempotent`: a guard from `worker.idempotency` (`Idempotency(store).guard(...)`),
        the innermost layer: a message already handled is deleted, not run again.
        `flow`: rate limit, per-tenant cap, bytes in flight, adaptive concurrency
        (`FlowControl(rate=RateLimit(per_s=50))`); parts left None are the worker's
        (`WorkerConfig.flow`).
        """
        layers: tuple[Middleware, ...] = (*self.middleware, *middleware)
        if idempotent is not None:
            if not isinstance(idempotent, HandlerGuard):
                raise RegistrationError(
                    f"idempotent for {queue!r} must be a guard from worker.idempotency "
                    f"(Idempotency(store).guard(...)), got {idempotent!r}"
                )
            layers = (*layers, idempotent)

        def register(func: F) -> F:
            self.registry.add(
                queue,
                func,
                decode=decode,
                on_error=on_error,
                max_in_flight=max_in_flight,
                middleware=layers,
                large_payloads=self.large_payloads,
                flow=flow,
            )
            if idempotent is not None:
                idempotent.attach(self, queue)
            return func

        return register

    def batch_handler(
        self,
        queue: str,
        *,
        max_size: int = 10,
        max_wait_s: float = 1.0,
        decode: str | Decoder | None = None,
        on_error: ErrorPolicy | OnError | str = OnError.DEFAULT,
        max_in_flight: int | None = None,
        flow: FlowControl | None = None,
    ) -> Callable[[F], F]:
        """Register `async def handle(messages: list[Message])` as the batch handler of `queue`.

        It gets up to `max_size` messages, gathered for at most `max_wait_s` after the first,
        and returns the ids of those that failed (or raises `BatchFailure(ids)`; any other
        error fails them all). The failed ones go through `on_error`; the rest are deleted
        together. Every lease of the batch is renewed until its message is settled; one that
        is lost shows as `message.lease.lost` and is never deleted. FIFO: after a failure,
        the later messages of its group in the batch are released too, in order.
        """
        options = BatchOptions(max_size, max_wait_s)

        def register(func: F) -> F:
            self.registry.add(
                queue,
                func,
                decode=decode,
                on_error=on_error,
                max_in_flight=max_in_flight,
                batch=options,
                large_payloads=self.large_payloads,
                flow=flow,
            )
            return func

        return register

    def spec(self) -> AppSpec:
        """This app as the plain value the runtime runs (its hooks as registered so far)."""
        return AppSpec(
            self.name,
            self.config,
            self.registry,
            tuple(self.startup_hooks),
            tuple(self.background_tasks),
        )

    def on_startup(self, hook: Hook) -> Hook:
        """Run `hook(context)` before the worker checks its queues (e.g. to create them)."""
        self.startup_hooks.append(_callable(hook))
        return hook

    def background(self, task: Hook) -> Hook:
        """Run `task(context)` beside the worker once it receives; cancelled at shutdown."""
        self.background_tasks.append(_callable(task))
        return task


def _callable(hook: Any) -> Any:
    if not callable(hook):
        raise RegistrationError(f"hook must be an async callable taking a context, got {hook!r}")
    return hook
