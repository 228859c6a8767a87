"""Typed payloads: the handler's annotation decides the decoding, checked at registration."""

from __future__ import annotations

import dataclasses
from typing import Any, TypedDict

import anyio
import pytest
from structlog.testing import capture_logs

from tests.recording import RecordingBackend
from worker import Message, Outcome, RedrivePolicy, RegistrationError, Worker
from worker.payloads import PayloadError, codec_for, encode
from worker.testing import run_worker
from worker.types import QueueSpec

pydantic = pytest.importorskip("pydantic")
from pydantic import BaseModel  # noqa: E402  (after the skip: pydantic is an optional extra)

SECRET = "4111-1111-1111-1111"  # a body value that must never reach a log


@dataclasses.dataclass(frozen=True)
class Address:
    city: str


@dataclasses.dataclass(frozen=True)
class Order:
    id: int
    total: float
    address: Address
    note: str = ""


class Invoice(BaseModel):
    number: int
    customer: str


class Ping(TypedDict):
    seq: int


class Opaque:
    pass


def _decode(annotation: Any, body: str) -> Any:
    codec = codec_for(annotation)
    assert codec is not None
    return codec.decode(body)


def test_dataclass_decodes_nested_fields_and_widens_ints_to_float() -> None:
    order = _decode(Order, '{"id": 7, "total": 3, "address": {"city": "Oslo"}}')
    assert order == Order(id=7, total=3.0, address=Address("Oslo"))
    assert _decode(Order, encode(order)) == order


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ('{"id": 7, "total": 1}', "Order: missing fields ['address']"),
        ('{"id": "7", "total": 1, "address": {"city": "x"}}', "Order.id: expected int"),
        ('{"id": 7, "total": 1, "address": {}, "x": 1}', "Order: unexpected fields ['x']"),
        ("[1]", "Order: expected a JSON object, got a list"),
        ("{", "invalid JSON: Expecting property name enclosed in double quotes (line 1, column 2)"),
    ],
)
def test_dataclass_refusals_name_fields_not_values(body: str, reason: str) -> None:
    with pytest.raises(PayloadError) as caught:
        _decode(Order, body)
    assert caught.value.reason == reason


def test_pydantic_reason_holds_no_input_and_is_truncated() -> None:
    with pytest.raises(PayloadError) as caught:
        _decode(Invoice, f'{{"number": "{SECRET}", "customer": 1}}')
    assert SECRET not in caught.value.reason
    assert caught.value.reason.startswith("Invoice: number: Input should be a valid integer")
    many = {f"f{i}": int for i in range(100)}
    big = pydantic.create_model("Big", **many)
    with pytest.raises(PayloadError) as caught:
        _decode(big, "{}")
    assert len(caught.value.reason) == 300 and caught.value.reason.endswith("…")


def test_typeddict_str_bytes_and_json_kinds() -> None:
    assert _decode(Ping, '{"seq": 1}') == {"seq": 1}
    with pytest.raises(PayloadError, match=r"Ping: missing keys \['seq'\]"):
        _decode(Ping, "{}")
    assert _decode(str, "not json") == "not json"
    assert _decode(bytes, encode(b"\x00\xff")) == b"\x00\xff"
    with pytest.raises(PayloadError, match="not base64"):
        _decode(bytes, "%%%")
    assert _decode(dict[str, int], '{"a": 1}') == {"a": 1}
    with pytest.raises(PayloadError, match="expected a JSON list, got a dict"):
        _decode(list[int], "{}")
    assert _decode(Invoice, encode(Invoice(number=1, customer="c"))) == Invoice(
        number=1, customer="c"
    )


def test_a_signature_the_registry_cannot_decode_fails_at_import_naming_the_parameter() -> None:
    app = Worker()

    with pytest.raises(RegistrationError, match=r"parameter 'thing' is annotated .*Opaque"):

        @app.handler("a")
        async def handle(thing: Opaque, message: Message) -> None: ...

    with pytest.raises(RegistrationError, match="at most one Message and one typed payload"):

        @app.handler("b")
        async def two(order: Order, invoice: Invoice) -> None: ...

    with pytest.raises(RegistrationError, match="decode='raw' and a typed parameter"):

        @app.handler("c", decode="raw")
        async def both(order: Order) -> None: ...

    with pytest.raises(RegistrationError, match="takes no parameter"):

        @app.handler("d")
        async def none() -> None: ...

    assert app.registry.queues == []


async def _dlq_backend() -> RecordingBackend:
    backend = RecordingBackend()
    await backend.create_queue(QueueSpec("orders-dlq"))
    await backend.create_queue(QueueSpec("orders", redrive=RedrivePolicy("orders-dlq", 1)))
    await backend.create_queue(QueueSpec("invoices"))
    return backend


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_typed_handlers_receive_values_and_a_bad_body_is_dead_lettered_once() -> None:
    app = Worker()
    got: list[object] = []

    @app.handler("orders")
    async def on_order(message: Message, order: Order) -> None:
        assert message.body is order
        got.append(order)

    @app.handler("invoices")
    def on_invoice(invoice: Invoice) -> None:  # sync: runs in a thread with the same binding
        got.append(invoice)

    backend = await _dlq_backend()
    with capture_logs() as logs:
        async with run_worker(app, backend=backend) as harness:
            await harness.send("orders", encode(Order(1, 2.5, Address("Oslo"))))
            await harness.send("invoices", {"number": 9, "customer": "ACME"})
            await harness.send("orders", {"id": SECRET, "total": 1, "address": {"city": "x"}})
            records = await harness.wait_for_handled(3)
            await harness.wait_until_idle()
            # A second receive of the bad one moves it to the DLQ (maxReceiveCount 1).
            with anyio.fail_after(5):
                while backend.inner.engine.counts("orders-dlq").visible < 1:
                    assert not await backend.inner.receive("orders", max_messages=1, wait_s=1)
    assert sorted(o.value for o in {r.outcome for r in records}) == ["failed", "succeeded"]
    assert [r.outcome for r in records].count(Outcome.FAILED) == 1
    assert sorted(map(repr, got)) == sorted(
        [repr(Order(1, 2.5, Address("Oslo"))), repr(Invoice(number=9, customer="ACME"))]
    )
    [failure] = [r for r in records if r.outcome is Outcome.FAILED]
    assert failure.message.receive_count == 1
    assert backend.inner.engine.counts("orders-dlq").visible == 1
    assert backend.inner.engine.counts("orders").visible == 0
    [logged] = [e for e in logs if e["event"] == "handler.undecodable_body"]
    assert logged["reason"] == "Order.id: expected int"
    assert all(SECRET not in repr(event) for event in logs)
