"""Middleware: an onion of `async (message, call_next) -> None` built once per handler.

The first middleware in the list is the outermost layer. A middleware may act before and
after `await call_next(message)`, skip it, or raise (`Retry`, `Discard`, or an error) to
decide the message's fate like a handler does.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from worker.message import Message

__all__ = ["CallNext", "Middleware", "build_chain"]

CallNext = Callable[[Message], Awaitable[None]]
Middleware = Callable[[Message, CallNext], Awaitable[None]]


def build_chain(middleware: Sequence[Middleware], endpoint: CallNext) -> CallNext:
    chain = endpoint
    for layer in reversed(middleware):
        chain = _wrap(layer, chain)
    return chain


def _wrap(layer: Middleware, inner: CallNext) -> CallNext:
    async def call(message: Message) -> None:
        await layer(message, inner)

    return call
