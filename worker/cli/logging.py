"""structlog set-up for the CLI: one line per event, console or JSON, on standard error.

Every record goes through one renderer: structlog's events and the standard library's
records alike (botocore, aiohttp, asyncio, an application's own `logging.getLogger`), so a
JSON stream is one JSON object per line and a console stream has one format. The runtime
binds `queue` and `message_id` with structlog's contextvars inside each handler task, so a
handler's own lines, through structlog or `logging`, carry them too.

The rules (issue 12, defect 14: logs leaked message bodies):

- Bodies and credentials are never logged. A traceback never shows local variables, in
  either format: a handler's locals hold its body and whatever secret it fetched. Tracebacks
  are rendered here, never by structlog's dict tracebacks or rich, which show locals.
- What one exception adds to a line is bounded, however long its message: see the caps
  below. A 1 MB exception message once made 1 MB log lines.
- botocore's family never logs below INFO: its DEBUG lines dump whole requests and
  responses, message bodies and signed headers included. Its INFO lines appear only at
  `--log-level debug`: at any other level it logs from WARNING up.
"""

from __future__ import annotations

import logging
import sys
import traceback
from typing import Any, Literal

import structlog
from structlog.stdlib import ProcessorFormatter
from structlog.typing import EventDict, Processor, WrappedLogger

from worker.runtime.log_context import scrub

__all__ = [
    "EVENT_CAP",
    "EXCEPTIONS_CAP",
    "FRAMES_CAP",
    "MESSAGE_CAP",
    "TRACEBACK_CAP",
    "LogFormat",
    "configure_logging",
    "format_exception",
    "resolve_format",
]

LogFormat = Literal["console", "json"]

#: Characters kept of an exception's message (and of its notes), and of an `error` or
#: `reason` field: enough for any message the runtime or botocore writes (a service error
#: code and its sentence), too few to carry a body that an exception quotes.
MESSAGE_CAP = 500
#: Characters kept of a whole rendered traceback: a handler's failure through the runtime
#: takes about 1 KB; a chain of three exceptions of twenty frames each still fits.
TRACEBACK_CAP = 8_000
#: Frames shown per exception: the innermost ones, where it was raised.
FRAMES_CAP = 20
#: Exceptions shown per traceback: the one logged, its causes and contexts, group members.
EXCEPTIONS_CAP = 5
#: Characters kept of an event's text: a standard library record's message can be anything.
EVENT_CAP = 2_000
#: Characters kept of one source line quoted in a traceback (generated code can be long).
_SOURCE_LINE_CAP = 200

#: Libraries whose DEBUG records hold message bodies.
_WIRE_LOGGERS = ("botocore", "aiobotocore", "boto3")

#: Fields the runtime sets itself, never from a body: not scrubbed.
_OURS = frozenset({"event", "queue", "message_id", "level", "timestamp", "logger", "handler"})

_FIELD_CAPS = {
    "event": EVENT_CAP,
    "error": MESSAGE_CAP,
    "reason": MESSAGE_CAP,
    "exception": TRACEBACK_CAP,
    "stack": TRACEBACK_CAP,
}
_CAUSE = "\nThe above exception was the direct cause of the following exception:\n\n"
_CONTEXT = "\nDuring handling of the above exception, another exception occurred:\n\n"


def resolve_format(choice: str) -> LogFormat:
    """`auto` is JSON, one object per line for a log collector, unless standard error is a
    terminal: then a person reads it, in console lines."""
    if choice == "auto":
        return "console" if sys.stderr.isatty() else "json"
    if choice not in ("console", "json"):
        raise ValueError(f"log format {choice!r}: expected auto, console or json")
    return "console" if choice == "console" else "json"


def report_failure(error: BaseException | str) -> None:
    """The line a failed run ends with (exit status 1): under JSON logging a JSON record
    (`worker.failed`, its text in `error`), so that a log collector reads it like every other
    line; else `lease-worker: error: ...`. Settings errors (status 2) stay plain text, as
    argparse's own usage errors are."""
    if _configured_format == "json":
        structlog.get_logger("lease_worker.cli").error("worker.failed", error=str(error))
    else:
        print(f"lease-worker: error: {error}", file=sys.stderr)


#: The format `configure_logging` set last (None: not configured).
_configured_format: LogFormat | None = None


def configure_logging(*, fmt: LogFormat = "console", level: str = "info") -> None:
    global _configured_format
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ValueError(f"log level {level!r}: use debug, info, warning or error")
    _configured_format = fmt
    shared: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    structlog.configure(
        processors=[
            *shared,
            structlog.processors.StackInfoRenderer(),
            _render_exception,
            _scrub_body,
            _cap_fields,
            ProcessorFormatter.wrap_for_formatter,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.stdlib.LoggerFactory(),
        cache_logger_on_first_use=True,
    )
    formatter = ProcessorFormatter(
        foreign_pre_chain=[
            *shared,
            structlog.stdlib.add_logger_name,
            _record_stack,
            _render_exception,
            _scrub_record,
            _cap_fields,
        ],
        processors=[ProcessorFormatter.remove_processors_meta, _renderer(fmt)],
    )
    _install(formatter, numeric)


def _renderer(fmt: LogFormat) -> Processor:
    if fmt == "json":
        return structlog.processors.JSONRenderer()
    # exc_info never reaches the renderer (see _render_exception); plain, should it ever.
    return structlog.dev.ConsoleRenderer(
        colors=sys.stderr.isatty(), exception_formatter=structlog.dev.plain_traceback
    )


def _install(formatter: logging.Formatter, level: int) -> None:
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _StderrHandler)]:
        root.removeHandler(old)
    handler = _StderrHandler()
    handler.setFormatter(formatter)
    root.addHandler(handler)
    root.setLevel(level)
    # INFO only at --log-level debug: at info, botocore's INFO lines ("Found credentials in
    # environment variables.") would open every SQS run; its DEBUG lines never.
    wire_level = logging.INFO if level <= logging.DEBUG else max(level, logging.WARNING)
    for name in _WIRE_LOGGERS:
        logging.getLogger(name).setLevel(wire_level)
    logging.captureWarnings(True)  # warnings too become records, not loose text


class _StderrHandler(logging.Handler):
    """Writes each record as one line to `sys.stderr` as it is at the time (pytest swaps it).

    One handler on the root logger takes every record, structlog's too, so its lock keeps
    lines from threads (synchronous handlers) whole.
    """

    def emit(self, record: logging.LogRecord) -> None:
        try:
            try:
                line = self.format(record)
            except Exception as error:  # e.g. a bad %-format in someone's logging call
                line = self.format(_unformattable(record, error))
            stream = sys.stderr
            stream.write(line + "\n")
            stream.flush()
        except RecursionError:
            raise
        except Exception:
            self.handleError(record)

    def handleError(self, record: logging.LogRecord) -> None:
        # logging's own report prints the record's message and arguments: they may hold a body.
        if logging.raiseExceptions:
            sys.stderr.write(f"--- could not log a record of {record.name} ---\n")


def _unformattable(record: logging.LogRecord, error: Exception) -> logging.LogRecord:
    what = f"{type(error).__name__} at {record.pathname}:{record.lineno}"
    return logging.LogRecord(
        record.name, logging.ERROR, record.pathname, record.lineno,
        f"log.unformattable_record ({what})", None, None,
    )  # fmt: skip


def _record_stack(_: WrappedLogger, __: str, event_dict: EventDict) -> EventDict:
    # A standard library record's stack is already text (structlog's own would be the
    # formatter's stack, not the caller's).
    stack = event_dict.pop("stack_info", None)
    if isinstance(stack, str):
        event_dict["stack"] = stack
    return event_dict


def _render_exception(_: WrappedLogger, __: str, event_dict: EventDict) -> EventDict:
    """Replace `exc_info` by the bounded, locals-free text of its traceback."""
    error = _exception_of(event_dict.pop("exc_info", None))
    if error is not None:
        event_dict["exception"] = format_exception(error)
    return event_dict


def _cap_fields(_: WrappedLogger, __: str, event_dict: EventDict) -> EventDict:
    for key, limit in _FIELD_CAPS.items():
        value = event_dict.get(key)
        if isinstance(value, str) and len(value) > limit:
            event_dict[key] = _cut(value, limit)
    return event_dict


def _scrub_body(_: WrappedLogger, __: str, event_dict: EventDict) -> EventDict:
    """Take the values of the body the logging task handles out of every text field but
    the event's name and the runtime's own (an exception's message, a reason): see
    `worker.runtime.log_context.scrub`."""
    for key, value in event_dict.items():
        if isinstance(value, str) and key not in _OURS:
            event_dict[key] = scrub(value)
    return event_dict


def _scrub_record(_: WrappedLogger, __: str, event_dict: EventDict) -> EventDict:
    """The same for a stdlib record, whose message (`event`) is its formatted text."""
    event = event_dict.get("event")
    if isinstance(event, str):
        event_dict["event"] = scrub(event)
    return _scrub_body(_, __, event_dict)


def _exception_of(exc_info: object) -> BaseException | None:
    if isinstance(exc_info, BaseException):
        return exc_info
    if isinstance(exc_info, tuple):
        value = exc_info[1] if len(exc_info) == 3 else None
        return value if isinstance(value, BaseException) else None
    # `log.exception(...)` passes True: the exception being handled, on the caller's thread.
    return sys.exc_info()[1] if exc_info else None


def format_exception(error: BaseException) -> str:
    """`error`'s traceback as Python prints it, but without locals and within the caps."""
    text = _Traceback().render(error).rstrip("\n")
    if len(text) <= TRACEBACK_CAP:
        return text
    # Python prints the exception that was logged last: keep the end, and the start.
    head = TRACEBACK_CAP // 4
    tail = TRACEBACK_CAP - head
    return f"{text[:head]}\n[... {len(text) - TRACEBACK_CAP} characters cut ...]\n{text[-tail:]}"


class _Traceback:
    """Renders one traceback, showing at most EXCEPTIONS_CAP exceptions in all."""

    def __init__(self) -> None:
        self._left = EXCEPTIONS_CAP
        self._seen: set[int] = set()

    def render(self, error: BaseException) -> str:
        links: list[tuple[BaseException, str]] = []  # newest first, with what follows it
        current: BaseException | None = error
        joint = ""
        while current is not None and id(current) not in self._seen and self._left > 0:
            self._seen.add(id(current))
            self._left -= 1
            links.append((current, joint))
            if current.__cause__ is not None:
                current, joint = current.__cause__, _CAUSE
            elif current.__context__ is not None and not current.__suppress_context__:
                current, joint = current.__context__, _CONTEXT
            else:
                current = None
        parts = ["[earlier exceptions of this chain not shown]\n"] if current is not None else []
        parts += [self._one(link) + after for link, after in reversed(links)]
        return "".join(parts)

    def _one(self, error: BaseException) -> str:
        lines = _frames(error)
        lines.append(_headline(error) + "\n")
        notes = getattr(error, "__notes__", None)
        if isinstance(notes, list) and notes:
            lines.append(_cut("\n".join(_text(note) for note in notes[:3]), MESSAGE_CAP) + "\n")
        if isinstance(error, BaseExceptionGroup):
            lines += self._members(error)
        return "".join(lines)

    def _members(self, group: BaseExceptionGroup[Any]) -> list[str]:
        lines: list[str] = []
        for number, member in enumerate(group.exceptions, start=1):
            if self._left <= 0:
                lines.append(f"  +-- [{len(group.exceptions) - number + 1} more not shown]\n")
                break
            lines.append(f"  +---------------- {number} ----------------\n")
            body = self.render(member)
            lines += ["    | " + line + "\n" for line in body.splitlines()]
        return lines


def _frames(error: BaseException) -> list[str]:
    tb = error.__traceback__
    if tb is None:
        return []
    frames = traceback.extract_tb(tb, limit=-FRAMES_CAP)  # the innermost ones
    lines = ["Traceback (most recent call last):\n"]
    hidden = sum(1 for _ in traceback.walk_tb(tb)) - len(frames)
    if hidden > 0:
        lines.append(f"  [{hidden} outer frames not shown]\n")
    for frame in frames:
        lines.append(f'  File "{frame.filename}", line {frame.lineno}, in {frame.name}\n')
        if frame.line:
            lines.append(f"    {_cut(frame.line.strip(), _SOURCE_LINE_CAP)}\n")
    return lines


def _headline(error: BaseException) -> str:
    kind = type(error)
    name = kind.__qualname__
    if kind.__module__ not in ("builtins", "__main__"):
        name = f"{kind.__module__}.{name}"
    message = _text(error)
    return f"{name}: {_cut(message, MESSAGE_CAP)}" if message else name


def _text(value: object) -> str:
    try:
        return str(value)
    except Exception:  # a broken __str__ must not lose the rest of the line
        return f"<{type(value).__name__} whose str() failed>"


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}[... {len(text) - limit} characters cut]"
