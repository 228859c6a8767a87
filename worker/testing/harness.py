"""`run_worker` and `WorkerHarness`: a worker on the in-memory engine inside a test.

Rules:
- Every wait is bounded: `wait_for_handled` and `wait_until_idle` give up after `timeout_s`
  (`DEFAULT_WAIT_S`, an hour) of the event loop's clock, the clock the worker runs on (under
  looptime an idle hour passes in well under a second of real time), and raise a
  `TimeoutError` that says what did arrive: how many runs, their queues and outcomes, and
  what is still in flight.
- `Handled.message.body` means what a handler's `message.body` means: the decoded body, the
  very object the handler got (its queue's codec applied, a large payload fetched).
  `Handled.message.raw_body` is the string as received. To record it, `run_worker` runs the
  app with one more, outermost, middleware (and wraps batch handlers the same way).
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio

from backends.memory import MemoryBackend
from worker.backend import Backend, QueueAdmin
from worker.clock import ManualClock
from worker.core.settlement import Outcome, Settlement
from worker.errors import ConfigError, DecodeError
from worker.message import Message
from worker.middleware import CallNext
from worker.registry import AppSpec, Decoder, DescribesApp, HandlerSpec, Registry, app_spec
from worker.runtime.metrics import Metrics
from worker.runtime.queues import create_missing_queues
from worker.runtime.supervisor import Supervisor
from worker.types import MessageAttribute, OutgoingMessage, ReceivedMessage

__all__ = (
    "DEFAULT_WAIT_S",
    "Handled",
    "HandledMessage",
    "ManualClock",
    "WorkerHarness",
    "run_worker",
)

#: How long the harness's waits wait unless told otherwise, in seconds of the event loop's
#: clock: an hour. Pass `timeout_s=` for a longer run (a handler of two hours), or a shorter
#: one in a test on real time.
DEFAULT_WAIT_S = 3600.0

_Key = tuple[str, str, int]  # queue, message id, receive count
_UNSET: Any = object()


def _key_of(message: Message | ReceivedMessage) -> _Key:
    return message.queue, message.message_id, message.receive_count


class HandledMessage:
    """A finished run's message, read the way its handler read it.

    `body` is the decoded body: the object the handler got as `message.body` (a dict for
    JSON, a typed payload, a large payload fetched from S3). `raw_body` is the string as
    received (for a large payload, the pointer that travelled on the queue). A run that never
    reached its handler (its body could not be decoded; a FIFO message skipped; a lease lost
    or a shutdown before it started) has its body decoded on first use of `body` with the
    queue's decoder, and raises `DecodeError` if it cannot be (or if it is a large payload,
    which only a handler's run fetches). `received` is the backend's `ReceivedMessage`.
    """

    __slots__ = ("_body", "_decoder", "received")

    def __init__(
        self, received: ReceivedMessage, body: Any = _UNSET, decoder: Decoder | None = None
    ) -> None:
        self.received = received
        self._body = body
        self._decoder = decoder

    def __repr__(self) -> str:  # never the body, as `Message`
        return f"<HandledMessage {self.queue}/{self.message_id} receive_count={self.receive_count}>"

    @property
    def body(self) -> Any:
        """The decoded body, as the handler's `message.body` (see the class)."""
        if self._body is _UNSET:
            if self._decoder is None:
                raise DecodeError(
                    self.message_id,
                    "a large payload is fetched by a handler's run only: read raw_body",
                )
            try:
                self._body = self._decoder(self.received.body)
            except Exception as error:
                raise DecodeError(
                    self.message_id, f"{type(error).__name__} (read raw_body)"
                ) from None
        return self._body

    @property
    def raw_body(self) -> str:
        """The body as received, before any decoding."""
        return self.received.body

    @property
    def queue(self) -> str:
        return self.received.queue

    @property
    def message_id(self) -> str:
        return self.received.message_id

    @property
    def receipt_handle(self) -> str:
        """The receipt handle the message was received with."""
        return self.received.receipt_handle

    @property
    def receive_count(self) -> int:
        return self.received.receive_count

    @property
    def attributes(self) -> Mapping[str, str]:
        return self.received.attributes

    @property
    def message_attributes(self) -> Mapping[str, MessageAttribute]:
        return self.received.message_attributes

    @property
    def group_id(self) -> str | None:
        return self.received.group_id


@dataclass(frozen=True, slots=True)
class Handled:
    """One finished handler run: its message (`message.body` decoded, `message.raw_body`
    as received: see `HandledMessage`), its outcome and what was done with the message."""

    message: HandledMessage
    outcome: Outcome
    settlement: Settlement


class _Bodies:
    """The decoded bodies handlers got, until their runs are reported finished."""

    def __init__(self) -> None:
        self._bodies: dict[_Key, Any] = {}

    def record(self, message: Message) -> None:
        self._bodies[_key_of(message)] = message.body

    def take(self, received: ReceivedMessage) -> Any:
        return self._bodies.pop(_key_of(received), _UNSET)

    async def middleware(self, message: Message, call_next: CallNext) -> None:
        self.record(message)
        await call_next(message)

    def batch(self, func: Callable[..., Awaitable[object]]) -> Callable[..., Awaitable[object]]:
        @functools.wraps(func)
        async def recorded(messages: list[Message]) -> object:
            for message in messages:
                self.record(message)
            return await func(messages)

        return recorded

    def app(self, app: AppSpec | DescribesApp) -> AppSpec:
        """`app` with every handler recording the bodies it gets (outermost)."""
        spec = app_spec(app)
        return dataclasses.replace(
            spec, registry=Registry.of(self._handler(h) for h in spec.registry)
        )

    def _handler(self, spec: HandlerSpec) -> HandlerSpec:
        if spec.batch is not None:
            return dataclasses.replace(spec, func=self.batch(spec.func))  # type: ignore[arg-type]
        return dataclasses.replace(spec, middleware=(self.middleware, *spec.middleware))


class WorkerHarness:
    """A running worker on an in-memory backend, with ways to feed it and watch it."""

    def __init__(
        self, supervisor: Supervisor, backend: Backend, bodies: _Bodies | None = None
    ) -> None:
        self.supervisor = supervisor
        self.backend = backend
        self.metrics = supervisor.metrics
        self.handled: list[Handled] = []
        self._changed = anyio.Event()
        self._bodies = bodies or _Bodies()

    @property
    def engine(self) -> Any:
        """The in-memory engine, for its test hooks (counts, peek, expire)."""
        return getattr(self.backend, "engine", None)

    def _observe(self, message: ReceivedMessage, outcome: Outcome, settlement: Settlement) -> None:
        spec = self.supervisor.app.registry[message.queue]
        decoder = spec.decoder if spec.large_payloads is None else None
        body = self._bodies.take(message)
        self.handled.append(Handled(HandledMessage(message, body, decoder), outcome, settlement))
        self._changed.set()

    async def send(self, queue: str, body: Any, **options: Any) -> str:
        """Send `body` (a str as is, anything else as JSON); returns the message id."""
        text = body if isinstance(body, str) else json.dumps(body)
        result = await self.backend.send(queue, [OutgoingMessage(body=text, **options)])
        if result.failed:
            raise ValueError(f"send to {queue!r} failed: {result.failed[0]}")
        return result.message_ids["0"]

    async def wait_for_handled(
        self, count: int, *, timeout_s: float = DEFAULT_WAIT_S
    ) -> list[Handled]:
        """Wait until at least `count` handler runs have finished; returns them all.

        Gives up after `timeout_s` seconds of the event loop's clock (virtual time under
        looptime) with a `TimeoutError` naming the runs that did finish.
        """
        with anyio.move_on_after(timeout_s):
            while len(self.handled) < count:
                self._changed = anyio.Event()
                await self._changed.wait()
            return list(self.handled)
        raise TimeoutError(
            f"wait_for_handled({count}): {len(self.handled)} of {count} handler runs finished "
            f"in {timeout_s:g} s of loop time{self._summary()}"
        )

    async def wait_until_idle(self, *, timeout_s: float = DEFAULT_WAIT_S) -> None:
        """Wait until no message is held and the settler has sent everything.

        Gives up after `timeout_s` seconds of the event loop's clock with a `TimeoutError`.
        """
        with anyio.move_on_after(timeout_s):
            while self.supervisor.in_flight:
                self._changed = anyio.Event()
                await self._changed.wait()
            await self.supervisor.settler.flush()
            return
        raise TimeoutError(
            f"wait_until_idle: not idle after {timeout_s:g} s of loop time{self._summary()}"
        )

    def _summary(self) -> str:
        """What finished (by queue and outcome, then the last few runs) and what is held."""
        counts = Counter((h.message.queue, h.outcome.value) for h in self.handled)
        by_queue = ", ".join(f"{queue} {outcome} x{n}" for (queue, outcome), n in counts.items())
        last = "; ".join(
            f"{h.message.queue}/{h.message.message_id} receive {h.message.receive_count}: "
            f"{h.outcome.value}, {h.settlement.action.value}"
            for h in self.handled[-5:]
        )
        return (
            f" ({by_queue or 'none'}; last: {last or '-'}); {self.supervisor.in_flight} "
            "message(s) still held. Pass timeout_s= to wait longer."
        )

    def shutdown(self) -> None:
        self.supervisor.request_shutdown()


@asynccontextmanager
async def run_worker(
    app: AppSpec | DescribesApp,
    *,
    backend: Backend | None = None,
    metrics: Metrics | None = None,
    create_queues: bool = True,
    **options: Any,
) -> AsyncIterator[WorkerHarness]:
    """Run `app` until the block ends, then shut it down cleanly.

    `backend` defaults to a new in-memory backend; with `create_queues`, every registered
    queue that does not exist yet is created (on a backend that can create queues). Other
    `options` go to `Supervisor` (e.g. `sample_queues_every_s`). The app runs with one more,
    outermost, middleware that records the decoded bodies handlers get (`Handled.message`).
    """
    backend = backend or MemoryBackend()
    if isinstance(getattr(getattr(backend, "engine", None), "clock", None), ManualClock):
        raise ConfigError(
            "run_worker: the in-memory engine runs on a ManualClock, which stands still under "
            "a running worker; use MemoryBackend() (the event loop's clock) and looptime"
        )
    if create_queues and isinstance(backend, QueueAdmin):
        await create_missing_queues(app, backend)
    harness: WorkerHarness
    observers = [lambda m, o, s: harness._observe(m, o, s)]
    bodies = _Bodies()
    supervisor = Supervisor(
        bodies.app(app), backend, metrics=metrics, observers=observers, **options
    )
    harness = WorkerHarness(supervisor, backend, bodies)
    await supervisor.prepare()  # a missing queue raises here, not inside a task group
    supervisor.on_lease_finished.append(lambda: harness._changed.set())
    async with anyio.create_task_group() as tasks:
        await tasks.start(supervisor.run)
        try:
            yield harness
        finally:
            if not supervisor.stopping:  # a second request would cut the shutdown short
                supervisor.request_shutdown()
