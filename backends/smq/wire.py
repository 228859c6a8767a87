"""SMQ's XML as the client reads and writes it, and what its answers mean for a worker.

Rules:
- Elements are matched by local name (SMQ puts every document in its namespace).
- Error codes become the runtime's (`worker.backend`'s entry codes are SQS's words):
  ReceiptHandleError -> ReceiptHandleIsInvalid (the handle is not ours any more),
  MessageNotExist -> MessageNotInflight (its visibility ended, or it is gone),
  InvalidArgument -> InvalidParameterValue. A whole call: QueueNotExist is `QueueNotFound`,
  AccessDenied / SignatureDoesNotMatch / InvalidAccessKeyId are `AccessDenied`, a 5xx or
  a broken connection is transient, any other 4xx fatal.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping, Sequence
from xml.sax.saxutils import escape

from worker.errors import (
    AccessDenied,
    BackendError,
    FatalBackendError,
    QueueNotFound,
    TransientBackendError,
)

__all__ = ["ENTRY_CODES", "call_error", "fields", "items", "parse", "render"]

XMLNS = "http://mns.aliyuncs.com/doc/v1/"
ENTRY_CODES = {
    "ReceiptHandleError": "ReceiptHandleIsInvalid",
    "MessageNotExist": "MessageNotInflight",
    "InvalidArgument": "InvalidParameterValue",
}
_DENIED = frozenset({"AccessDenied", "SignatureDoesNotMatch", "InvalidAccessKeyId"})


def render(root: str, item: str | None, rows: Iterable[Mapping[str, object]]) -> bytes:
    """`<root>` with one `<item>` per row (or, with no `item`, the one row's fields)."""
    parts = [f'<?xml version="1.0" encoding="UTF-8"?><{root} xmlns="{XMLNS}">']
    for row in rows:
        inner = "".join(f"<{k}>{escape(str(v))}</{k}>" for k, v in row.items() if v is not None)
        parts.append(f"<{item}>{inner}</{item}>" if item else inner)
    parts.append(f"</{root}>")
    return "".join(parts).encode()


def parse(raw: bytes) -> ET.Element:
    try:
        return ET.fromstring(raw)
    except ET.ParseError:
        raise TransientBackendError("SMQ answered a document that is not XML") from None


def fields(element: ET.Element) -> dict[str, str]:
    """A flat element's children by local name."""
    return {child.tag.rpartition("}")[2]: (child.text or "") for child in element}


def items(element: ET.Element) -> Sequence[dict[str, str]]:
    """The fields of each child of a list document (`<Messages><Message>...`)."""
    return [fields(child) for child in element]


def call_error(status: int, raw: bytes, operation: str, queue: str) -> BackendError:
    """The exception for a refused whole call."""
    code, message, request_id = "HTTP" + str(status), "", ""
    try:
        found = fields(ET.fromstring(raw))
        code = found.get("Code", code)
        message, request_id = found.get("Message", ""), found.get("RequestId", "")
    except ET.ParseError:
        pass
    text = f"{operation} on {queue!r}: {code}: {message} (RequestId {request_id or '?'})"
    kind: type[BackendError]
    if code == "QueueNotExist":
        kind = QueueNotFound
    elif code in _DENIED:
        kind = AccessDenied
    elif status >= 500:
        kind = TransientBackendError
    else:
        kind = FatalBackendError
    return kind(text, operation=operation, queue=queue, code=code)
