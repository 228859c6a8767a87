"""What a handler's signature asks for, read once at registration.

    async def handle(message: Message)                  the message; body decoded by `decode`
    async def handle(order: Order)                      the body decoded into an Order
    async def handle(order: Order, message: Message)    both, in the order written
    async def handle(messages: list[Message])           a batch handler's messages

A parameter with no annotation is the message (the handlers written before typed payloads).
A required parameter the registry cannot fill raises `RegistrationError` naming it, at import.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from worker.envelope.codecs import Codec, codec_for
from worker.errors import RegistrationError
from worker.message import Message

__all__ = ["Binding", "bind_batch", "bind_single"]

_MESSAGE = "message"
_PAYLOAD = "payload"


@dataclass(frozen=True, slots=True)
class Binding:
    """How to call a handler: the codec of its typed parameter (None: untyped), and the
    order of its arguments ('message' or 'payload')."""

    codec: Codec | None
    order: tuple[str, ...]

    def arguments(self, message: Message) -> tuple[Any, ...]:
        return tuple(message if kind == _MESSAGE else message.body for kind in self.order)


def bind_single(func: Any, queue: str) -> Binding:
    """The binding of a one-message handler; raises `RegistrationError` for one it cannot call."""
    params = _required(func, queue)
    hints = _hints(func, queue, params)
    order: list[str] = []
    codec: Codec | None = None
    for param in params:
        annotation = hints.get(param.name, inspect.Parameter.empty)
        if _is_message(annotation):
            order.append(_MESSAGE)
            continue
        found = codec_for(annotation)
        if found is None:
            raise RegistrationError(
                f"handler {_name(func)} for {queue!r}: parameter {param.name!r} is annotated "
                f"{_show(annotation)}, which no body can be decoded into; use Message, str, "
                "bytes, a dataclass, a TypedDict, a pydantic model, dict or list"
            )
        codec = found
        order.append(_PAYLOAD)
    if order.count(_MESSAGE) > 1 or order.count(_PAYLOAD) > 1:
        raise RegistrationError(
            f"handler {_name(func)} for {queue!r}: takes at most one Message and one typed "
            f"payload, got parameters {[p.name for p in params]}"
        )
    return Binding(codec, tuple(order))


def bind_batch(func: Any, queue: str) -> None:
    """Check a batch handler takes one list of messages; raises `RegistrationError` if not."""
    params = _required(func, queue)
    hints = _hints(func, queue, params)
    if len(params) != 1:
        raise RegistrationError(
            f"batch handler {_name(func)} for {queue!r}: takes one parameter (a list of "
            f"Message), got {[p.name for p in params]}"
        )
    annotation = hints.get(params[0].name, inspect.Parameter.empty)
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    is_list = origin in (list, Sequence) and len(args) == 1 and _is_message(args[0])
    if annotation is not inspect.Parameter.empty and not is_list:
        raise RegistrationError(
            f"batch handler {_name(func)} for {queue!r}: parameter {params[0].name!r} is "
            f"annotated {_show(annotation)}; a batch handler takes list[Message]"
        )


def _required(func: Any, queue: str) -> list[inspect.Parameter]:
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):
        return [inspect.Parameter("message", inspect.Parameter.POSITIONAL_ONLY)]  # a builtin
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    params = [
        p
        for p in signature.parameters.values()
        if p.kind in positional and p.default is inspect.Parameter.empty
    ]
    if not params:
        raise RegistrationError(
            f"handler {_name(func)} for {queue!r} takes no parameter; it needs the message "
            "or its payload"
        )
    return params


def _hints(func: Any, queue: str, params: list[inspect.Parameter]) -> dict[str, Any]:
    target = func if inspect.isroutine(func) else type(func).__dict__.get("__call__", func)
    try:
        return typing.get_type_hints(target)
    except Exception:
        pass  # one name the module imports only for type checking: resolve one by one
    hints: dict[str, Any] = {}
    for param in params:
        annotation = param.annotation
        if isinstance(annotation, str):
            if annotation.rsplit(".", 1)[-1] == "Message":
                annotation = Message
            else:
                annotation = _resolve(func, queue, param.name, annotation)
        hints[param.name] = annotation
    return hints


def _resolve(func: Any, queue: str, name: str, text: str) -> Any:
    space = getattr(inspect.unwrap(func), "__globals__", {})
    try:
        return eval(text, dict(space))  # what typing.get_type_hints does for one annotation
    except Exception as error:
        raise RegistrationError(
            f"handler {_name(func)} for {queue!r}: the annotation {text!r} of parameter "
            f"{name!r} cannot be resolved ({type(error).__name__}); import it at run time"
        ) from None


def _is_message(annotation: Any) -> bool:
    return annotation in (inspect.Parameter.empty, Any, Message) or (
        isinstance(annotation, type) and issubclass(annotation, Message)
    )


def _name(func: Any) -> str:
    return str(getattr(func, "__qualname__", repr(func)))


def _show(annotation: Any) -> str:
    return getattr(annotation, "__qualname__", None) or repr(annotation)
