"""SMQ's XML, both ways: the documents the endpoint reads and the ones it answers.

Rules:
- Every answer's root element carries SMQ's namespace (`XMLNS`); the SDK matches elements
  by name. An element with no text is left out (the SDK skips empty ones, then misses them).
- A request document is at most `MAX_XML_BYTES` and has no DTD (no entity tricks); anything
  else unreadable is `SmqError("MalformedXML")`.
- An error is `<Error>` with Code, Message, RequestId and HostId; a batch delete's partial
  failure is `<Errors>` with one `<Error>` (ErrorCode, ErrorMessage, ReceiptHandle) each.
  Whatever of the request an error repeats (a name in a message, a refused handle) is at
  most `backends.serve.echo.MAX_ECHO_CHARS` long.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from backends.serve.echo import bounded

__all__ = [
    "MAX_XML_BYTES",
    "TOO_LARGE",
    "XMLNS",
    "SmqError",
    "children",
    "document",
    "error_document",
    "list_document",
    "local_name",
    "parse",
    "text",
]

XMLNS = "http://mns.aliyuncs.com/doc/v1/"
#: A request document holds at most 16 messages of 64 KiB, base64-encoded.
MAX_XML_BYTES = 2 * 1024 * 1024
#: The message of a body refused for its size (its rest is never read).
TOO_LARGE = "The request body is too large."

#: HTTP status per error code, as SMQ answers them.
_STATUS = {
    "AccessDenied": 403,
    "RequestTimeout": 408,
    "SignatureDoesNotMatch": 403,
    "InvalidAccessKeyId": 403,
    "QueueNotExist": 404,
    "MessageNotExist": 404,
    "QueueAlreadyExist": 409,
    "InternalError": 500,
}


@dataclass(frozen=True, slots=True)
class SmqError(Exception):
    """A refusal the endpoint renders as SMQ's `<Error>`; 400 unless `_STATUS` says."""

    code: str
    message: str

    @property
    def status(self) -> int:
        return _STATUS.get(self.code, 400)


def document(root: str, fields: Mapping[str, object]) -> bytes:
    """`<root xmlns=...><Name>value</Name>...</root>`, empty values left out."""
    element = ET.Element(root, xmlns=XMLNS)
    _fill(element, fields)
    return _bytes(element)


def list_document(
    root: str,
    item: str,
    items: Iterable[Mapping[str, object]],
    tail: Mapping[str, object] | None = None,
) -> bytes:
    """`<root><item>...</item>...[tail]</root>`, as batch answers and lists are shaped."""
    element = ET.Element(root, xmlns=XMLNS)
    for fields in items:
        _fill(ET.SubElement(element, item), fields)
    _fill(element, tail or {})
    return _bytes(element)


def error_document(error: SmqError, request_id: str, host_id: str) -> bytes:
    fields = {"Code": error.code, "Message": bounded(error.message)}
    return document("Error", {**fields, "RequestId": request_id, "HostId": bounded(host_id)})


def parse(raw: bytes, root: str, *others: str) -> ET.Element:
    """The request document whose root element is `root` or one of `others` (any
    namespace)."""
    if len(raw) > MAX_XML_BYTES:
        raise SmqError("InvalidArgument", "The request document is too large.")
    if b"<!DOCTYPE" in raw or b"<!ENTITY" in raw:
        raise SmqError("MalformedXML", "The request document may not declare a DTD.")
    try:
        element = ET.fromstring(raw)
    except ET.ParseError:
        raise SmqError("MalformedXML", "The request body is not well-formed XML.") from None
    if _local(element.tag) not in (root, *others):
        raise SmqError("MalformedXML", f"The request document's root is not <{root}>.")
    return element


def children(element: ET.Element, name: str) -> Sequence[ET.Element]:
    return [child for child in element if _local(child.tag) == name]


def text(element: ET.Element, name: str) -> str | None:
    """The text of `element`'s child `name`; None when absent ("" when empty)."""
    for child in children(element, name):
        return child.text or ""
    return None


def _fill(element: ET.Element, fields: Mapping[str, object]) -> None:
    for name, value in fields.items():
        if value is None or value == "":
            continue
        if isinstance(value, Mapping):
            _fill(ET.SubElement(element, name), value)
        elif isinstance(value, list):  # a repeated element: one per item
            for item in value:
                _fill(ET.SubElement(element, name), item)
        else:
            ET.SubElement(element, name).text = str(value)


def _bytes(element: ET.Element) -> bytes:
    written: bytes = ET.tostring(element, encoding="utf-8", xml_declaration=True)
    return written


def local_name(element: ET.Element) -> str:
    return _local(element.tag)


def _local(tag: str) -> str:
    return tag.rpartition("}")[2]
