"""`bind_message`: a handler task's log context, `queue` and `message_id`, bound once a
message exactly as `structlog.contextvars.bind_contextvars` binds them; and the body the
task handles, which `scrub` takes out of any text logged from the task (issue 28: an
exception's message may quote a value of the body, `int(body["x"])`).

The same context variables as structlog's own, found once, then set directly: what
`bind_contextvars(**kw)` does per call besides (a keyword dict, a key string built per
key, a dict of tokens) cost 0.6 us a message, a twentieth of the engine's whole cost. So
`merge_contextvars`, `get_contextvars`, `unbind_contextvars` and `clear_contextvars` see
and change them as before. Should structlog stop keeping one variable per key, this falls
back to `bind_contextvars` itself.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterator
from typing import Any

import structlog

from worker import jsonlib

__all__ = ["REDACTED", "bind_body", "bind_message", "scrub", "structlog_variables"]

#: What stands in a logged text for a value of the message's body.
REDACTED = "<redacted>"
#: Strings shorter than this are left alone ("id", "ok" would wreck every text), and
#: numbers shorter than MIN_NUMBER_CHARS (a traceback's line numbers).
MIN_VALUE_CHARS = 4
MIN_NUMBER_CHARS = 6
#: Values taken from one body at most (the longest first): a bound on the work per line.
MAX_VALUES = 256


def structlog_variables() -> tuple[contextvars.ContextVar[Any], contextvars.ContextVar[Any]] | None:
    """structlog's context variables for `queue` and `message_id`, or None if not found."""

    def bind_and_list() -> dict[str, contextvars.ContextVar[Any]]:
        structlog.contextvars.bind_contextvars(queue=None, message_id=None)
        return {variable.name: variable for variable in contextvars.copy_context()}

    # In a context of its own: nothing is bound anywhere else.
    found = contextvars.Context().run(bind_and_list)
    queue, message_id = found.get("structlog_queue"), found.get("structlog_message_id")
    return None if queue is None or message_id is None else (queue, message_id)


def _binder() -> Callable[[str, str], None]:
    variables = structlog_variables()
    if variables is None:

        def bind_contextvars(queue: str, message_id: str) -> None:
            structlog.contextvars.bind_contextvars(queue=queue, message_id=message_id)

        return bind_contextvars
    queue_variable, message_id_variable = variables

    def set_variables(queue: str, message_id: str) -> None:
        queue_variable.set(queue)
        message_id_variable.set(message_id)

    return set_variables


#: Bind `queue` and `message_id` in the current context (a handler task's own copy).
bind_message = _binder()


_body: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "lease_worker_body", default=None
)
_values_cache: tuple[str | None, tuple[str, ...]] = (None, ())


def bind_body(body: str) -> None:
    """The calling task handles a message with this (raw) body: `scrub` takes its values
    out of what the task logs. One context variable set: no work until something is
    logged."""
    _body.set(body)


def scrub(text: str) -> str:
    """`text` without the string and number values of the body the calling task handles
    (none bound: unchanged)."""
    body = _body.get()
    if body is None:
        return text
    for value in _values(body):
        if value in text:
            text = text.replace(value, REDACTED)
    return text


def _values(body: str) -> tuple[str, ...]:
    global _values_cache
    if _values_cache[0] is body:
        return _values_cache[1]
    try:
        found = set(_leaves(jsonlib.loads(body)))
    except (ValueError, RecursionError):  # not JSON: the text itself, and its words
        found = {body, *body.split()}
    found.add(body)
    values = sorted(
        (value for value in found if len(value) >= MIN_VALUE_CHARS), key=len, reverse=True
    )[:MAX_VALUES]
    _values_cache = (body, tuple(values))
    return _values_cache[1]


def _leaves(data: Any) -> Iterator[str]:
    if isinstance(data, str):
        yield data
    elif isinstance(data, bool) or data is None:
        return
    elif isinstance(data, int | float):
        if len(text := str(data)) >= MIN_NUMBER_CHARS:
            yield text
    elif isinstance(data, dict):
        for item in data.values():
            yield from _leaves(item)
    elif isinstance(data, list):
        for item in data:
            yield from _leaves(item)
