"""Payload codecs: a handler's annotation decides how a body is decoded, and the producer
encodes with the same rules, so what one sends the other reads.

    annotation            body on the wire              decoded as
    str                   the text as is                the text
    bytes                 base64 (a body must be text)  the bytes
    a dataclass           a JSON object                 cls(**fields), nested dataclasses too
    a TypedDict           a JSON object                 a dict with its required keys
    a pydantic model      JSON                          Model.model_validate_json(body)
    anything else JSON    JSON                          worker.jsonlib.loads (json.loads' values)

A body that does not fit raises `PayloadError`, whose `reason` names fields and positions,
never values: it is logged, and a body may hold personal data. pydantic is never imported
here: a model class can only exist if its user imported pydantic already.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import sys
import typing
from collections.abc import Callable
from typing import Any

from worker import jsonlib

__all__ = ["Codec", "PayloadError", "codec_for", "encode"]

#: Longest reason kept: a validation error of a big model would flood the log.
MAX_REASON = 300

_PRIMITIVES: tuple[type, ...] = (str, int, float, bool)


class PayloadError(ValueError):
    """A body that does not decode into the handler's type. `reason` holds no body."""

    def __init__(self, reason: str) -> None:
        reason = reason if len(reason) <= MAX_REASON else reason[: MAX_REASON - 1] + "…"
        super().__init__(reason)
        self.reason = reason


@dataclasses.dataclass(frozen=True, slots=True)
class Codec:
    """How one annotation travels: `decode(body) -> value`; `kind` for messages and docs."""

    kind: str
    decode: Callable[[str], Any]


def codec_for(annotation: Any) -> Codec | None:
    """The codec for a parameter annotated `annotation`, or None if no codec fits it."""
    if annotation is str:
        return Codec("str", _text)
    if annotation is bytes:
        return Codec("bytes", _bytes)
    if _is_pydantic_model(annotation):
        return Codec(f"pydantic model {annotation.__qualname__}", _pydantic(annotation))
    if isinstance(annotation, type) and dataclasses.is_dataclass(annotation):
        _hints(annotation)  # an unresolvable field annotation fails at registration
        return Codec(f"dataclass {annotation.__qualname__}", _dataclass(annotation))
    if typing.is_typeddict(annotation):
        return Codec(f"TypedDict {annotation.__qualname__}", _typeddict(annotation))
    origin = typing.get_origin(annotation) or annotation
    if origin in (dict, list, int, float, bool):
        return Codec(f"JSON {origin.__name__}", _json_of(origin))
    return None


def encode(value: Any) -> str:
    """The body for `value`, as the matching codec reads it (see the module's table)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if _is_pydantic_model(type(value)):
        return str(value.model_dump_json())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return json.dumps(dataclasses.asdict(value), separators=(",", ":"))
    try:
        return json.dumps(value, separators=(",", ":"))
    except (TypeError, ValueError) as error:
        raise PayloadError(f"cannot encode a {type(value).__name__} as JSON: {error}") from None


def _text(body: str) -> str:
    return body


def _bytes(body: str) -> bytes:
    try:
        return base64.b64decode(body, validate=True)
    except (binascii.Error, ValueError):
        raise PayloadError("bytes: the body is not base64") from None


def _loads(body: str) -> Any:
    try:
        return jsonlib.loads(body)
    except json.JSONDecodeError as error:
        raise PayloadError(
            f"invalid JSON: {error.msg} (line {error.lineno}, column {error.colno})"
        ) from None


def _json_object(body: str, what: str) -> dict[str, Any]:
    data = _loads(body)
    if not isinstance(data, dict):
        raise PayloadError(f"{what}: expected a JSON object, got a {type(data).__name__}")
    return data


def _json_of(kind: type) -> Callable[[str], Any]:
    def decode(body: str) -> Any:
        data = _loads(body)
        if kind in _PRIMITIVES:
            return _check_field("body", "value", kind, data)
        return _of_kind(kind, data)

    return decode


def _of_kind(kind: type, data: Any) -> Any:
    if not isinstance(data, kind):
        raise PayloadError(f"expected a JSON {kind.__name__}, got a {type(data).__name__}")
    return data


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _check_field(owner: str, name: str, hint: Any, value: Any) -> Any:
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        if not isinstance(value, dict):
            raise PayloadError(f"{owner}.{name}: expected an object")
        return _build(hint, value)
    if hint in _PRIMITIVES:
        ok = isinstance(value, hint) and not (hint is not bool and isinstance(value, bool))
        if hint is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        if not ok:
            raise PayloadError(f"{owner}.{name}: expected {hint.__name__}")
    return value


def _build(cls: type, data: dict[str, Any]) -> Any:
    hints = _hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise PayloadError(f"{cls.__qualname__}: unexpected fields {unknown}")
    missing = sorted(
        name
        for name, f in fields.items()
        if name not in data
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    )
    if missing:
        raise PayloadError(f"{cls.__qualname__}: missing fields {missing}")
    values = {
        name: _check_field(cls.__qualname__, name, hints.get(name), value)
        for name, value in data.items()
    }
    return cls(**values)


def _dataclass(cls: type) -> Callable[[str], Any]:
    def decode(body: str) -> Any:
        return _build(cls, _json_object(body, cls.__qualname__))

    return decode


def _typeddict(cls: Any) -> Callable[[str], Any]:
    required: frozenset[str] = cls.__required_keys__
    hints = typing.get_type_hints(cls)

    def decode(body: str) -> Any:
        data = _json_object(body, cls.__qualname__)
        missing = sorted(required - set(data))
        if missing:
            raise PayloadError(f"{cls.__qualname__}: missing keys {missing}")
        for name, value in data.items():
            if name in hints:
                _check_field(cls.__qualname__, name, hints[name], value)
        return data

    return decode


def _is_pydantic_model(annotation: Any) -> bool:
    pydantic = sys.modules.get("pydantic")
    return (
        pydantic is not None
        and isinstance(annotation, type)
        and issubclass(annotation, pydantic.BaseModel)
    )


#: pydantic error types whose message comes from user code (a validator), which may quote
#: the value it refused: only the type is kept.
_USER_MESSAGES = frozenset({"value_error", "assertion_error"})


def _problem(problem: Any) -> str:
    where = ".".join(str(part) for part in problem["loc"]) or "<body>"
    text = problem["type"] if problem["type"] in _USER_MESSAGES else problem["msg"]
    return f"{where}: {text}"


def _pydantic(model: Any) -> Callable[[str], Any]:
    validation_error = sys.modules["pydantic"].ValidationError

    def decode(body: str) -> Any:
        try:
            return model.model_validate_json(body)
        except validation_error as error:
            # errors() without the input: pydantic's own text quotes the offending values.
            problems = error.errors(include_input=False, include_url=False, include_context=False)
            text = "; ".join(_problem(problem) for problem in problems)
            raise PayloadError(f"{model.__qualname__}: {text}") from None

    return decode
