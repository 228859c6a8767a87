"""Tracing: a trace started by the producer continues in the handler's span."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

pytest.importorskip("opentelemetry.sdk")  # the imports below need the [otel] extra

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)

import worker.envelope.tracing
from backends.memory import MemoryBackend
from worker import Message, Worker
from worker.sending.producer import Producer
from worker.testing import run_worker
from worker.types import QueueSpec, ReceivedMessage

_EXPORTER = InMemorySpanExporter()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    if not isinstance(trace.get_tracer_provider(), TracerProvider):  # set once per process
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(provider)
    worker.envelope.tracing.forget_provider()  # a check without a provider is kept for a second
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()


async def _backend() -> MemoryBackend:
    backend = MemoryBackend()
    await backend.create_queue(QueueSpec("orders"))
    return backend


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_the_producers_trace_continues_in_the_handlers_span(
    spans: InMemorySpanExporter,
) -> None:
    app = Worker()

    @app.handler("orders")
    async def handle(order: dict[str, int], message: Message) -> None:
        if order["n"] == 2:
            raise RuntimeError("fails")

    backend = await _backend()
    producer = Producer(backend)
    tracer = trace.get_tracer("checkout")
    with tracer.start_as_current_span("checkout") as parent:
        ids = [await producer.send("orders", {"n": n}) for n in (1, 2)]
    async with run_worker(app, backend=backend) as harness:
        await harness.wait_for_handled(2)
        harness.shutdown()
    runs = sorted(
        (s for s in spans.get_finished_spans() if s.name == "orders process"),
        key=lambda s: str(s.attributes and s.attributes["messaging.message.id"]),
    )
    assert len(runs) == 2
    for span in runs:
        assert span.context is not None and span.parent is not None
        assert span.context.trace_id == parent.get_span_context().trace_id
        assert span.parent.span_id == parent.get_span_context().span_id
        assert span.kind is trace.SpanKind.CONSUMER
    by_id = {str(s.attributes["messaging.message.id"]): s for s in runs if s.attributes}
    ok, failed = by_id[ids[0]].attributes, by_id[ids[1]].attributes
    assert ok is not None and failed is not None
    assert ok["messaging.destination.name"] == "orders"
    assert ok["lease_worker.receive_count"] == 1
    assert (ok["lease_worker.outcome"], failed["lease_worker.outcome"]) == ("succeeded", "failed")
    assert by_id[ids[1]].status.status_code is trace.StatusCode.ERROR


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_a_batch_span_links_every_messages_trace(spans: InMemorySpanExporter) -> None:
    app = Worker()

    @app.batch_handler("orders", max_size=2, max_wait_s=5)
    async def handle(messages: list[Message]) -> None: ...

    backend = await _backend()
    producer = Producer(backend)
    tracer = trace.get_tracer("checkout")
    parents = []
    for n in range(2):
        with tracer.start_as_current_span(f"checkout {n}") as span:
            parents.append(span.get_span_context())
            await producer.send("orders", {"n": n})
    async with run_worker(app, backend=backend) as harness:
        await harness.wait_for_handled(2)
        harness.shutdown()
    [batch] = [s for s in spans.get_finished_spans() if s.name == "orders process"]
    assert batch.parent is None
    assert {link.context.span_id for link in batch.links} == {p.span_id for p in parents}
    assert batch.attributes is not None
    assert batch.attributes["messaging.batch.message_count"] == 2


def test_aws_trace_header_is_continued(spans: InMemorySpanExporter) -> None:
    header = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
    received = ReceivedMessage(
        queue="orders",
        message_id="m1",
        receipt_handle="h",
        body="{}",
        receive_count=3,
        attributes={"AWSTraceHeader": header},
    )
    with worker.envelope.tracing.handler_span(received) as span:
        worker.envelope.tracing.set_outcome(span, "succeeded")
    [finished] = spans.get_finished_spans()
    assert finished.context is not None and finished.parent is not None
    assert finished.context.trace_id == 0x5759E988BD862E3FE1BE46A994272793
    assert finished.parent.span_id == 0x53995C3F42CD8AD8


def test_without_opentelemetry_nothing_is_injected_or_traced(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry", None)  # `import opentelemetry` fails
    monkeypatch.setattr(worker.envelope.tracing, "_loaded", False)  # both restored after the test
    monkeypatch.setattr(worker.envelope.tracing, "_otel", None)
    worker.envelope.tracing.forget_provider()  # what an earlier test found is not kept
    tracer = trace.get_tracer("checkout")
    with tracer.start_as_current_span("checkout"):
        assert worker.envelope.tracing.inject() == {}
    received = ReceivedMessage(
        queue="q", message_id="m", receipt_handle="h", body="", receive_count=1
    )
    with worker.envelope.tracing.handler_span(received) as span:
        assert span is None


def test_importing_the_worker_imports_neither_opentelemetry_nor_pydantic() -> None:
    code = (
        "import sys, worker, worker.sending.producer, worker.sending.sync_producer, "
        "worker.envelope.tracing; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('opentelemetry', 'pydantic')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


@pytest.mark.asyncio
async def test_the_producer_also_sets_aws_trace_header(spans: InMemorySpanExporter) -> None:
    # For consumers that read only X-Ray's header (Lambda, other SDKs): the same trace.
    backend = await _backend()
    tracer = trace.get_tracer("test")
    with tracer.start_as_current_span("produce") as span:
        await Producer(backend).send("orders", {"n": 1})
        context = span.get_span_context()
    [received] = await backend.receive("orders", max_messages=1, wait_s=0)
    trace_id = f"{context.trace_id:032x}"
    assert received.attributes["AWSTraceHeader"] == (
        f"Root=1-{trace_id[:8]}-{trace_id[8:]};Parent={context.span_id:016x};Sampled=1"
    )
    await backend.aclose()


def test_the_sqs_wire_carries_the_trace_header_as_a_system_attribute() -> None:
    from backends.sqs.wire import send_entry
    from worker.types import OutgoingMessage

    entry = send_entry(OutgoingMessage(body="b", trace_header="Root=1-a-b;Parent=c;Sampled=1"))
    assert entry["MessageSystemAttributes"] == {
        "AWSTraceHeader": {"DataType": "String", "StringValue": "Root=1-a-b;Parent=c;Sampled=1"}
    }
    assert "MessageSystemAttributes" not in send_entry(OutgoingMessage(body="b"))


def test_with_the_api_but_no_tracer_provider_no_span_is_made() -> None:
    # The API alone (often installed by another package) made a no-op span per message:
    # 27 us each, a quarter of the engine's throughput (bench.engine_throughput).
    code = (
        "from worker.envelope.tracing import handler_span\n"
        "from worker.types import ReceivedMessage\n"
        "m = ReceivedMessage(queue='q', message_id='1', receipt_handle='h', body='b',"
        " receive_count=1)\n"
        "with handler_span(m) as span:\n"
        "    assert span is None, span\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
