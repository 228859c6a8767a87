"""`SyncProducer`: the producer for synchronous code (Django or Flask views, scripts).

It runs an event loop of its own in one thread (anyio's blocking portal), where the backend
is opened and lives: an aiobotocore client belongs to the loop that made it. Each call
blocks its caller until the send is done; calls from several threads are safe (they queue
on the portal's loop).

::

    with SyncProducer(lambda: connect_sqs(region="eu-west-1")) as producer:
        producer.send("orders", {"id": 1})
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Iterable, Mapping
from contextlib import ExitStack
from typing import Any

from anyio.from_thread import BlockingPortal, start_blocking_portal

from worker.sending.outgoing import AttributeValue, Outgoing
from worker.sending.producer import Producer, Sender, SendResult

__all__ = ["SyncProducer"]


class SyncProducer:
    """A `Producer` behind blocking calls. `connect` is an async callable returning the
    backend (opened on the producer's own loop, closed when the producer closes);
    `options` go to `Producer`."""

    def __init__(self, connect: Callable[[], Awaitable[Sender]], **options: Any) -> None:
        self._connect = connect
        self._options = options
        self._stack = ExitStack()
        self._portal: BlockingPortal | None = None
        self._producer: Producer | None = None

    def __enter__(self) -> SyncProducer:
        portal = self._stack.enter_context(start_blocking_portal())
        try:
            backend = portal.call(self._connect)
            self._producer = Producer(backend, **self._options)
        except BaseException:
            self._stack.close()
            raise
        self._portal = portal
        return self

    def __exit__(self, *exc_info: object) -> None:
        try:
            if self._portal is not None and self._producer is not None:
                self._portal.call(self._producer.backend.aclose)
        finally:
            self._portal = self._producer = None
            self._stack.close()

    def _run(self, call: Callable[[], Awaitable[Any]]) -> Any:
        if self._portal is None:
            raise RuntimeError("SyncProducer is not open: use it in a `with` block")
        return self._portal.call(call)

    @property
    def producer(self) -> Producer:
        if self._producer is None:
            raise RuntimeError("SyncProducer is not open: use it in a `with` block")
        return self._producer

    def send(
        self,
        queue: str,
        body: Any,
        *,
        delay_s: int | None = None,
        attributes: Mapping[str, AttributeValue] | None = None,
        group_id: str | None = None,
        deduplication_id: str | None = None,
    ) -> str:
        """`Producer.send`, blocking: returns the message id or raises `SendFailed`."""
        send = functools.partial(
            self.producer.send,
            queue,
            body,
            delay_s=delay_s,
            attributes=attributes,
            group_id=group_id,
            deduplication_id=deduplication_id,
        )
        return str(self._run(send))

    def send_many(self, queue: str, items: Iterable[Outgoing | Any]) -> list[SendResult]:
        """`Producer.send_many`, blocking."""
        listed = list(items)  # consumed in the caller's thread, not the portal's
        return list(self._run(functools.partial(self.producer.send_many, queue, listed)))
