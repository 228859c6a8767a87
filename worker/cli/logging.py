"""structlog set-up for the CLI: one line per event, console or JSON, on standard error.

The runtime binds `queue` and `message_id` with structlog's contextvars inside each handler
task, so a handler's own `structlog.get_logger().info(...)` lines carry them too. Bodies and
credentials are never logged; tracebacks are plain (no local variables, which could hold a
body).
"""

from __future__ import annotations

import logging
import sys
from typing import Any, Literal

import structlog

__all__ = ["LogFormat", "configure_logging"]

LogFormat = Literal["console", "json"]


def configure_logging(*, fmt: LogFormat = "console", level: str = "info") -> None:
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ValueError(f"log level {level!r}: use debug, info, warning or error")
    renderer: Any
    if fmt == "json":
        renderer = structlog.processors.JSONRenderer()
        exceptions: list[Any] = [structlog.processors.dict_tracebacks]
    else:
        renderer = structlog.dev.ConsoleRenderer(
            colors=sys.stderr.isatty(), exception_formatter=structlog.dev.plain_traceback
        )
        exceptions = []
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            *exceptions,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
