"""Typed payloads: the handler's annotation decides the decoding, checked at registration."""

from __future__ import annotations

import dataclasses
from typing import Any, TypedDict

import pytest

from worker import Message, RegistrationError, Worker
from worker.envelope.codecs import PayloadError, codec_for, encode

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


def test_a_signature_the_registry_cannot_decode_fails_at_import_naming_the_parameter() -> None:
    app = Worker()

    with pytest.raises(RegistrationError, match=r"parameter 'thing' is annotated .*Opaque"):

        @app.handler("a")
        async def handle(thing: Opaque, message: Message) -> None: ...

    with pytest.raises(RegistrationError, match="at most one Message and one typed payload"):

        @app.handler("b")
        async def two(order: Order, ping: Ping) -> None: ...

    with pytest.raises(RegistrationError, match="decode='raw' and a typed parameter"):

        @app.handler("c", decode="raw")
        async def both(order: Order) -> None: ...

    with pytest.raises(RegistrationError, match="takes no parameter"):

        @app.handler("d")
        async def none() -> None: ...

    assert app.registry.queues == []
