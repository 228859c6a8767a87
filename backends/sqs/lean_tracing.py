"""Spans for the lean path's calls, as OpenTelemetry's botocore instrumentation makes them.

`opentelemetry-instrumentation-botocore` wraps botocore's `BaseClient._make_api_call`; the lean
path never reaches it, so it makes the same span itself. Rules this module keeps:
- One CLIENT span per call (retries included), named `SQS.<Operation>`, with the
  instrumentation's attributes: `rpc.system` = `aws-api`, `rpc.service` = `SQS`, `rpc.method`,
  `aws.region`; for a call with a queue URL (all of them), its SQS extension's
  `aws.queue_url`, `messaging.system` = `aws.sqs`, `messaging.url` and
  `messaging.destination` (the URL's last part). From the answer, error or not:
  `aws.request_id`, `retry_attempts`, `http.status_code`; after a receive or a send batch,
  `messaging.message.id` of its first message (the names of the semantic conventions the
  instrumentation uses). A failed call records its exception and sets the span's status to
  error, as `start_as_current_span` does for the instrumentation.
- Tracing is on when OpenTelemetry's API is installed and a tracer provider is set (the rule
  of `worker.envelope.tracing`, which a backend does not import): with the API alone, or
  none, a call costs one check and makes no span. A provider once found is kept; until
  then the question is asked at most once a second.
- Nothing from a message (bodies, attributes) is put on a span.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

__all__ = ["TRACER_NAME", "forget_provider", "traced", "tracer"]

#: The instrumentation scope of the lean path's spans.
TRACER_NAME = "backends.sqs.lean"
_SERVICE = "SQS"
_RECHECK_S = 1.0

_trace: Any = None
_loaded = False
_tracer: Any = None
_checked_at = -math.inf


def _api() -> Any:
    global _trace, _loaded
    if not _loaded:
        _loaded = True
        try:
            from opentelemetry import trace
        except ImportError:
            _trace = None
        else:
            _trace = trace
    return _trace


def tracer() -> Any:
    """The tracer for lean spans, or None: tracing is off (no OTel, or no provider set)."""
    global _tracer, _checked_at
    if _tracer is not None:
        return _tracer
    now = time.monotonic()
    if now - _checked_at < _RECHECK_S:
        return None
    _checked_at = now
    trace = _api()
    if trace is None:
        return None
    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return None
    _tracer = provider.get_tracer(TRACER_NAME)
    return _tracer


def forget_provider() -> None:
    """Ask again at the next call (for tests that set a tracer provider)."""
    global _tracer, _checked_at
    _tracer, _checked_at = None, -math.inf


def _request_attributes(operation: str, region: str, params: Mapping[str, Any]) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "rpc.system": "aws-api",
        "rpc.service": _SERVICE,
        "rpc.method": operation,
        "aws.region": region,
    }
    queue_url = params.get("QueueUrl")
    if queue_url:
        attributes["aws.queue_url"] = queue_url
        attributes["messaging.system"] = "aws.sqs"
        attributes["messaging.url"] = queue_url
        attributes["messaging.destination"] = str(queue_url).split("/")[-1]
    return attributes


def _answer_attributes(span: Any, answer: Mapping[str, Any] | None) -> None:
    metadata = (answer or {}).get("ResponseMetadata")
    if not metadata:
        return
    request_id = metadata.get("RequestId")
    if request_id:
        span.set_attribute("aws.request_id", request_id)
    if metadata.get("RetryAttempts") is not None:
        span.set_attribute("retry_attempts", metadata["RetryAttempts"])
    if metadata.get("HTTPStatusCode") is not None:
        span.set_attribute("http.status_code", metadata["HTTPStatusCode"])


def _first_message_id(operation: str, answer: Mapping[str, Any]) -> str | None:
    items = answer.get("Messages") if operation == "ReceiveMessage" else None
    if operation in ("SendMessageBatch", "SendMessage"):
        items = answer.get("Successful") if operation == "SendMessageBatch" else [answer]
    if not items:
        return None
    first = items[0].get("MessageId")
    return None if first is None else str(first)


async def traced(
    tracer: Any,
    operation: str,
    region: str,
    params: Mapping[str, Any],
    call: Callable[[], Awaitable[dict[str, Any]]],
) -> dict[str, Any]:
    """`await call()` inside the span the botocore instrumentation would make for it."""
    trace = _api()
    with tracer.start_as_current_span(
        f"{_SERVICE}.{operation}",
        kind=trace.SpanKind.CLIENT,
        attributes=_request_attributes(operation, region, params),
    ) as span:
        try:
            answer = await call()
        except Exception as exc:
            _answer_attributes(span, getattr(exc, "response", None))
            raise
        if span.is_recording():
            _answer_attributes(span, answer)
            message_id = _first_message_id(operation, answer)
            if message_id is not None:
                span.set_attribute("messaging.message.id", message_id)
        return answer
