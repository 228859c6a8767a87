"""The lean path's spans: what OpenTelemetry's botocore instrumentation gives a botocore
call (its `__init__._patched_api_call` and `extensions/sqs.py`), made for the lean calls
against our own SQS endpoint; none at all when no tracer provider is set."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import pytest_asyncio

pytest.importorskip("opentelemetry.sdk")  # the imports below need the [otel] extra

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from backends.serve.sqs.endpoint import SqsEndpoint, sqs_endpoint_in_thread
from backends.sqs import SqsBackend, SqsSettings, lean_tracing
from tests.moto_server import MOTO_ACCESS_KEY, MOTO_REGION, MOTO_SECRET_KEY
from worker.errors import QueueNotFound
from worker.types import Deletion, OutgoingMessage, QueueSpec


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> InMemorySpanExporter:
    """A provider of the test's own (the global one is OTel's to set once per process),
    handed to the lean path as the provider found; its spans land in the exporter."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(lean_tracing, "_tracer", provider.get_tracer(lean_tracing.TRACER_NAME))
    return exporter


@pytest.fixture(scope="module")
def endpoint() -> Iterator[SqsEndpoint]:
    with sqs_endpoint_in_thread() as served:
        yield served


@pytest_asyncio.fixture
async def lean(endpoint: SqsEndpoint) -> AsyncIterator[SqsBackend]:
    settings = SqsSettings(
        region=MOTO_REGION,
        endpoint_url=endpoint.url,
        access_key_id=MOTO_ACCESS_KEY,
        secret_access_key=MOTO_SECRET_KEY,
        max_attempts=1,
        client="lean",
    )
    backend = await SqsBackend.connect(settings)
    try:
        yield backend
    finally:
        await backend.aclose()


def _by_method(exporter: InMemorySpanExporter) -> dict[str, ReadableSpan]:
    return {
        str(span.attributes["rpc.method"]): span
        for span in exporter.get_finished_spans()
        if span.attributes
        and span.instrumentation_scope is not None
        and span.instrumentation_scope.name == lean_tracing.TRACER_NAME
    }


@pytest.mark.asyncio
async def test_each_lean_call_is_a_span_with_the_instrumentations_attributes(
    spans: InMemorySpanExporter, lean: SqsBackend
) -> None:
    await lean.create_queue(QueueSpec("traced"))
    sent = await lean.send("traced", [OutgoingMessage(entry_id="a", body="hello")])
    [received] = await lean.receive("traced", max_messages=10, wait_s=0)
    await lean.delete("traced", [Deletion("a", received.receipt_handle)])

    made = _by_method(spans)
    assert set(made) == {"SendMessageBatch", "ReceiveMessage", "DeleteMessageBatch"}
    for method, span in made.items():
        attributes: dict[str, Any] = dict(span.attributes or {})
        url = attributes.pop("aws.queue_url")
        assert str(url).endswith("/traced")
        assert span.name == f"SQS.{method}"
        assert span.kind is SpanKind.CLIENT
        assert span.status.status_code is StatusCode.UNSET
        request_id = attributes.pop("aws.request_id")
        assert isinstance(request_id, str) and request_id
        expected = {
            "rpc.system": "aws-api",
            "rpc.service": "SQS",
            "rpc.method": method,
            "aws.region": MOTO_REGION,
            "messaging.system": "aws.sqs",
            "messaging.url": url,
            "messaging.destination": "traced",
            "http.status_code": 200,
            "retry_attempts": 0,
        }
        if method != "DeleteMessageBatch":
            expected["messaging.message.id"] = received.message_id
        assert attributes == expected
    assert sent.message_ids["a"] == received.message_id


@pytest.mark.asyncio
async def test_a_failed_lean_call_is_an_error_span(
    spans: InMemorySpanExporter, lean: SqsBackend
) -> None:
    await lean.create_queue(QueueSpec("gone-soon"))
    url = await lean._url("gone-soon")
    await lean.delete_queue("gone-soon")
    with pytest.raises(QueueNotFound):
        await lean.receive(url, max_messages=1, wait_s=0)

    span = _by_method(spans)["ReceiveMessage"]
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes is not None
    assert span.attributes["http.status_code"] == 400
    assert span.attributes["aws.request_id"]
    [event] = span.events
    assert event.name == "exception"
    assert event.attributes is not None
    assert str(event.attributes["exception.type"]).endswith("QueueDoesNotExist")


def test_without_a_tracer_provider_the_lean_path_makes_no_span() -> None:
    """With the API alone (no provider set) a lean call asks once and makes nothing."""
    code = (
        "from backends.sqs import lean_tracing\n"
        "assert lean_tracing.tracer() is None\n"
        "from opentelemetry import trace\n"
        "from opentelemetry.sdk.trace import TracerProvider\n"
        "trace.set_tracer_provider(TracerProvider())\n"
        "lean_tracing.forget_provider()\n"
        "assert lean_tracing.tracer() is not None\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
