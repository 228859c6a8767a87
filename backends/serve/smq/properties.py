"""SMQ's message properties: a send's `<UserProperties>` and `<SystemProperties>` in, a
received or peeked message's out, kept by the engine as message attributes.

Rules, as SMQ documents them (its "message properties" page) and its SDK writes them:
- `<UserProperties>` holds `<PropertyValue>`s, each with Name, Value and Type (STRING,
  NUMBER, BOOLEAN or BINARY, which the SDK spells in capitals; other spellings of the four
  are taken). At most 50 per message; a name is 1-256 of `A-Za-z0-9_.-`, with no leading,
  trailing or doubled dot, and unique; a value at most 4,096 characters; a BOOLEAN is `true`
  or `false`; a BINARY is base64 (kept decoded); a NUMBER is not checked (SMQ does not
  either). Anything else is 400 `InvalidArgument`.
- `<SystemProperties>` holds `<SystemPropertyValue>`s (Name, Value, Type STRING), of the
  names a sender may set: `traceparent`, `tracestate`, `baggage`.
- Both count toward the message's size (the engine counts names, types and values).
- The engine keeps a system property under its name with a leading dot, which no user
  property can have, so the two never collide.
"""

from __future__ import annotations

import base64
import binascii
import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from types import MappingProxyType

from backends.serve.smq import wire
from backends.serve.smq.wire import SmqError
from worker.types import MessageAttribute

__all__ = ["properties_from_wire", "properties_to_wire"]

_TYPES = frozenset({"STRING", "NUMBER", "BOOLEAN", "BINARY"})
_SYSTEM_NAMES = frozenset({"traceparent", "tracestate", "baggage"})
_NAME = re.compile(r"(?!\.)(?!.*\.\.)(?!.*\.\Z)[A-Za-z0-9_.-]{1,256}\Z")
_MAX_PROPERTIES = 50
_MAX_VALUE_CHARS = 4096
_SYSTEM = "."


def properties_from_wire(message: ET.Element) -> Mapping[str, MessageAttribute]:
    """The user and system properties of one `<Message>` of a send, as engine attributes."""
    found: dict[str, MessageAttribute] = {}
    for holder in wire.children(message, "UserProperties"):
        for item in wire.children(holder, "PropertyValue"):
            name, attribute = _user_property(item)
            _add(found, name, attribute)
    for holder in wire.children(message, "SystemProperties"):
        for item in wire.children(holder, "SystemPropertyValue"):
            name, value = _parts(item)
            if name not in _SYSTEM_NAMES or (wire.text(item, "Type") or "").upper() != "STRING":
                raise SmqError("InvalidArgument", "A system property is not one a sender sets.")
            _add(found, _SYSTEM + name, MessageAttribute("STRING", string_value=value))
    if sum(not name.startswith(_SYSTEM) for name in found) > _MAX_PROPERTIES:
        raise SmqError("InvalidArgument", f"A message has at most {_MAX_PROPERTIES} properties.")
    return MappingProxyType(found)


def properties_to_wire(attributes: Mapping[str, MessageAttribute]) -> dict[str, object]:
    """`UserProperties` and `SystemProperties` fields of an answer's `<Message>`."""
    user: list[dict[str, object]] = []
    system: list[dict[str, object]] = []
    for name, attribute in attributes.items():
        if name.startswith(_SYSTEM):
            system.append(_row(name[len(_SYSTEM) :], "STRING", attribute.string_value or ""))
        elif attribute.binary_value is not None:
            encoded = base64.b64encode(attribute.binary_value).decode("ascii")
            user.append(_row(name, "BINARY", encoded))
        else:
            user.append(_row(name, attribute.data_type, attribute.string_value or ""))
    fields: dict[str, object] = {}
    if user:
        fields["UserProperties"] = {"PropertyValue": user}
    if system:
        fields["SystemProperties"] = {"SystemPropertyValue": system}
    return fields


def _row(name: str, kind: str, value: str) -> dict[str, object]:
    return {"Name": name, "Value": value, "Type": kind}


def _add(found: dict[str, MessageAttribute], name: str, attribute: MessageAttribute) -> None:
    if name in found:
        raise SmqError("InvalidArgument", "A property name is given twice.")
    found[name] = attribute


def _parts(item: ET.Element) -> tuple[str, str]:
    name, value = wire.text(item, "Name") or "", wire.text(item, "Value")
    if value is None or len(value) > _MAX_VALUE_CHARS:
        raise SmqError("InvalidArgument", "A property value is 0-4096 characters.")
    return name, value


def _user_property(item: ET.Element) -> tuple[str, MessageAttribute]:
    name, value = _parts(item)
    kind = (wire.text(item, "Type") or "").upper()
    if not _NAME.match(name):
        raise SmqError("InvalidArgument", "A property name is 1-256 of A-Za-z0-9_.- .")
    if kind not in _TYPES:
        raise SmqError("InvalidArgument", "A property type is String, Number, Boolean or Binary.")
    if kind == "BOOLEAN" and value not in ("true", "false"):
        raise SmqError("InvalidArgument", "A Boolean property is true or false.")
    if kind != "BINARY":
        return name, MessageAttribute(kind, string_value=value)
    try:
        decoded = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise SmqError("InvalidArgument", "A Binary property's value is base64.") from None
    return name, MessageAttribute(kind, binary_value=decoded)
