"""Typed payloads with pydantic (the optional `[pydantic]` extra): a model and a dataclass
handler each get a typed value; a body that fails validation is dead-lettered after one
receive, its logged reason holding no body."""

from __future__ import annotations

import anyio
import pytest
from structlog.testing import capture_logs

from tests.api.test_typed_payloads import SECRET, Address, Order, _decode
from tests.recording import RecordingBackend
from worker import Message, Outcome, RedrivePolicy, Worker
from worker.envelope.codecs import PayloadError, encode
from worker.testing import run_worker
from worker.types import QueueSpec

pydantic = pytest.importorskip("pydantic")
from pydantic import BaseModel, field_validator  # noqa: E402  (after the skip: pydantic is an optional extra)


class Invoice(BaseModel):
    number: int
    customer: str


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


def test_a_validators_own_message_is_not_logged() -> None:
    class Card(BaseModel):
        number: str

        @field_validator("number")
        @classmethod
        def luhn(cls, value: str) -> str:
            raise ValueError(f"{value} fails the Luhn check")

    with pytest.raises(PayloadError) as caught:
        _decode(Card, f'{{"number": "{SECRET}"}}')
    assert caught.value.reason.endswith(".Card: number: value_error")


def test_a_model_round_trips_through_the_producers_encoding() -> None:
    assert _decode(Invoice, encode(Invoice(number=1, customer="c"))) == Invoice(
        number=1, customer="c"
    )


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
