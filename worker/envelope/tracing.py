"""OpenTelemetry context across the queue: injected by the producer, continued by the worker.

OpenTelemetry (the API only, the `[otel]` extra) is optional: when it is not installed,
`inject()` returns nothing, `handler_span()` yields None, and nothing is imported beyond
one failed `import` at first use.

- The producer writes the current context into each message's attributes (`traceparent`,
  `tracestate`: W3C Trace Context, through the globally configured propagator).
- The worker starts one CONSUMER span per handler run, child of the context the message
  carries (its `traceparent` attribute, else the `AWSTraceHeader` system attribute that
  X-Ray-instrumented senders set), with the message id, queue, receive count and, at the
  end, the outcome. A batch handler's span links to every message's context instead.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from types import MappingProxyType
from typing import Any

from worker.types import MessageAttribute, ReceivedMessage

__all__ = [
    "aws_trace_header",
    "batch_span",
    "forget_provider",
    "handler_span",
    "inject",
    "open_handler_span",
    "set_outcome",
]

_EMPTY: Mapping[str, MessageAttribute] = MappingProxyType({})
_TRACER = "lease_worker"
_AWS_HEADER = re.compile(
    r"Root=1-([0-9a-f]{8})-([0-9a-f]{24});Parent=([0-9a-f]{16});Sampled=([01])"
)

_otel: Any = None
_loaded = False
_import_failed_at = -math.inf
_provider_api: Any = None
_provider_checked_at = -math.inf
_PROVIDER_RECHECK_S = 1.0
#: After an import that could not read its files, the next try waits this long.
_IMPORT_RETRY_S = 1.0


def _api() -> Any:
    """The `opentelemetry` modules, or None when not installed (looked up once).

    An import can also fail for want of a file descriptor (`OSError: [Errno 24] Too many
    open files`, in a worker whose descriptors a flood of connections had taken): that says
    nothing of whether OTel is installed. It is no span for now, and another try at most
    once a second, never an exception: raised here, it ended the handler's task, and with
    it the worker (issue 29).
    """
    global _otel, _loaded, _import_failed_at
    if not _loaded:
        now = time.monotonic()
        if now - _import_failed_at < _IMPORT_RETRY_S:
            return None
        try:
            from opentelemetry import context, propagate, trace
        except ImportError:
            _otel = None
        except OSError:
            _import_failed_at = now
            return None
        else:
            _otel = (context, propagate, trace)
        _loaded = True
    return _otel


def inject() -> Mapping[str, MessageAttribute]:
    """The current trace context as message attributes; empty without a span or OTel."""
    api = _api()
    if api is None:
        return _EMPTY
    _, propagate, trace = api
    if not trace.get_current_span().get_span_context().is_valid:
        return _EMPTY
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return {
        key: MessageAttribute("String", string_value=value)
        for key, value in carrier.items()
        if key in ("traceparent", "tracestate")
    }


def aws_trace_header() -> str | None:
    """The current trace context in X-Ray's format, for the `AWSTraceHeader` system
    attribute (read by Lambda, X-Ray and other SDKs); None without a span or OTel."""
    api = _api()
    if api is None:
        return None
    _, _, trace = api
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    trace_id = f"{context.trace_id:032x}"
    sampled = 1 if context.trace_flags.sampled else 0
    return f"Root=1-{trace_id[:8]}-{trace_id[8:]};Parent={context.span_id:016x};Sampled={sampled}"


def _extract(received: ReceivedMessage) -> Any:
    """The context `received` carries (W3C attributes first, then AWSTraceHeader), or None."""
    _, propagate, trace = _api()
    carrier = {
        name: attribute.string_value
        for name, attribute in received.message_attributes.items()
        if name in ("traceparent", "tracestate") and attribute.string_value
    }
    if "traceparent" in carrier:
        return propagate.extract(carrier)
    match = _AWS_HEADER.search(received.attributes.get("AWSTraceHeader", ""))
    if match is None:
        return None
    epoch, unique, parent, sampled = match.groups()
    span_context = trace.SpanContext(
        trace_id=int(epoch + unique, 16),
        span_id=int(parent, 16),
        is_remote=True,
        trace_flags=trace.TraceFlags(int(sampled)),
    )
    return trace.set_span_in_context(trace.NonRecordingSpan(span_context))


def _attributes(received: ReceivedMessage) -> dict[str, Any]:
    return {
        "messaging.system": "aws_sqs",
        "messaging.destination.name": received.queue,
        "messaging.message.id": received.message_id,
        "messaging.operation.type": "process",
        "lease_worker.receive_count": received.receive_count,
    }


def _recording() -> Any:
    """The OTel modules when spans are recorded: OTel installed and a tracer provider set.
    With the API alone (often installed by another package) every span would be a no-op
    that still costs microseconds per message: none is made.

    A provider, once set, stays (OTel sets it once): that answer is kept. Until then the
    question is asked again at most once a second (asking costs an environment lookup),
    so a provider set after the worker started is in use within a second.
    """
    global _provider_api, _provider_checked_at
    if _provider_api is not None:
        return _provider_api
    now = time.monotonic()
    if now - _provider_checked_at < _PROVIDER_RECHECK_S:
        return None
    _provider_checked_at = now
    api = _api()
    if api is None:
        return None
    trace = api[2]
    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return None
    _provider_api = api
    return api


def forget_provider() -> None:
    """Ask again at the next span (for tests that set a tracer provider)."""
    global _provider_api, _provider_checked_at
    _provider_api, _provider_checked_at = None, -math.inf


#: What a handler runs in when no span is made: reused, it costs one call a message.
_NO_SPAN: AbstractContextManager[None] = nullcontext()


def handler_span(received: ReceivedMessage) -> AbstractContextManager[Any]:
    """A span around one handler run, continuing the message's trace; None (as the
    context's value) without OTel or without a tracer provider."""
    api = _recording()
    return _NO_SPAN if api is None else _handler_span(api[2], received)


def _handler_span(trace: Any, received: ReceivedMessage) -> AbstractContextManager[Any]:
    span: AbstractContextManager[Any] = trace.get_tracer(_TRACER).start_as_current_span(
        f"{received.queue} process",
        context=_extract(received),
        kind=trace.SpanKind.CONSUMER,
        attributes=_attributes(received),
        record_exception=False,  # an exception's text may quote the body
        set_status_on_exception=False,
    )
    return span


class OpenSpan:
    """A handler's span, entered and left by hand instead of in a `with`: a `with` keeps the
    exit method on the coroutine's stack for the whole run (64 bytes a message in flight)."""

    __slots__ = ("_manager", "span")

    def __init__(self, manager: AbstractContextManager[Any]) -> None:
        self._manager = manager
        self.span = manager.__enter__()

    def close(self, outcome: str) -> None:
        """Record the outcome (`set_outcome`) and end the span."""
        set_outcome(self.span, outcome)
        self._manager.__exit__(None, None, None)


def open_handler_span(received: ReceivedMessage) -> OpenSpan | None:
    """`handler_span`, entered; None without OTel or without a tracer provider."""
    api = _recording()
    return None if api is None else OpenSpan(_handler_span(api[2], received))


def batch_span(queue: str, received: Sequence[ReceivedMessage]) -> AbstractContextManager[Any]:
    """A span around one batch handler run, linked to each message's context."""
    api = _recording()
    if api is None:
        return _NO_SPAN
    _, _, trace = api
    links = []
    for message in received:
        parent = _extract(message)
        if parent is not None:
            links.append(trace.Link(trace.get_current_span(parent).get_span_context()))
    span: AbstractContextManager[Any] = trace.get_tracer(_TRACER).start_as_current_span(
        f"{queue} process",
        kind=trace.SpanKind.CONSUMER,
        links=links,
        attributes={
            "messaging.system": "aws_sqs",
            "messaging.destination.name": queue,
            "messaging.batch.message_count": len(received),
        },
        record_exception=False,
        set_status_on_exception=False,
    )
    return span


def set_outcome(span: Any, outcome: str) -> None:
    """Record the handler's outcome on its span (no-op for None)."""
    if span is None:
        return
    span.set_attribute("lease_worker.outcome", outcome)
    if outcome in ("failed", "timed_out", "lease_lost"):
        _, _, trace = _api()
        span.set_status(trace.Status(trace.StatusCode.ERROR, outcome))
