"""SQS's query protocol: form-encoded `Action=<Operation>` requests, XML answers.

The operations (`backends.serve.sqs.service`) take the members as SQS's JSON protocol names
them; this module moves between the two spellings. The rules kept:

- A request's members are flattened: lists as `<Item>.<n>` (`AttributeName.1`,
  `SendMessageBatchRequestEntry.2.Id`), maps as `<Item>.<n>.Name|Key` and `.Value`
  (`Attribute.1.Name`, `Tag.1.Key`, `MessageAttribute.1.Value.StringValue`), n from 1.
  `_LISTS` and `_MAPS` name each flattened item and the JSON member it becomes; an empty list
  or map arrives as a name with no value: the JSON member's (`Entries=`, as botocore sends
  it) or the item's (`SendMessageBatchRequestEntry=`, as the JavaScript SDK does). Numbers
  arrive as text and are read as integers where the JSON protocol has integers.
- An answer is `<{Op}Response xmlns=...><{Op}Result>...</{Op}Result><ResponseMetadata>
  <RequestId/></ResponseMetadata></{Op}Response>` (no Result for operations without output);
  lists and maps are flattened the same way, booleans are `true`/`false`.
- An error is an `ErrorResponse` with the legacy code (`AWS.SimpleQueueService...`), as
  `backends.serve.sqs.errors` gives it. Text is escaped for XML, a carriage return as
  `&#xD;` so that a parser does not turn it into a line feed (the MD5s would not match).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from xml.sax.saxutils import escape

from backends.serve.sqs.errors import SqsError, error_parts

__all__ = ["CONTENT_TYPE", "decode", "encode", "encode_error"]

CONTENT_TYPE = "text/xml"
_NAMESPACE = "http://queue.amazonaws.com/doc/2012-11-05/"
_ACTION = re.compile(r"[A-Za-z]{1,64}\Z")

#: Flattened list item -> JSON member.
_LISTS = {
    "AttributeName": "AttributeNames",
    "MessageAttributeName": "MessageAttributeNames",
    "MessageSystemAttributeName": "MessageSystemAttributeNames",
    "SendMessageBatchRequestEntry": "Entries",
    "DeleteMessageBatchRequestEntry": "Entries",
    "ChangeMessageVisibilityBatchRequestEntry": "Entries",
    "AWSAccountId": "AWSAccountIds",
    "ActionName": "Actions",
    "TagKey": "TagKeys",
}
#: Flattened map item -> (JSON member, key's name, value's name).
_MAPS = {
    "Attribute": ("Attributes", "Name", "Value"),
    "Tag": ("Tags", "Key", "Value"),
    "MessageAttribute": ("MessageAttributes", "Name", "Value"),
    "MessageSystemAttribute": ("MessageSystemAttributes", "Name", "Value"),
}
_INTEGERS = frozenset(
    {
        "MaxResults", "VisibilityTimeout", "DelaySeconds", "MaxNumberOfMessages",
        "WaitTimeSeconds", "MaxNumberOfMessagesPerSecond",
    }
)  # fmt: skip
#: JSON answer member -> the item each of its entries is written as (op-dependent: Successful).
_ANSWER_LISTS = {
    "QueueUrls": "QueueUrl",
    "queueUrls": "QueueUrl",
    "Messages": "Message",
    "Failed": "BatchResultErrorEntry",
    "Results": "ListMessageMoveTasksResultEntry",
}
_EMPTY_LISTS = frozenset(_LISTS.values())
_EMPTY_MAPS = frozenset(name for name, _, _ in _MAPS.values())
_ANSWER_MAPS = {name: (item, key, value) for item, (name, key, value) in _MAPS.items()}
_INTEGER = re.compile(r"-?[0-9]{1,18}\Z")


def decode(form: Mapping[str, str]) -> tuple[str, dict[str, Any]]:
    """(operation, members in the JSON protocol's shape) of a query request."""
    action = form.get("Action")
    if not action:
        raise SqsError("MissingAction", "The request must contain the parameter Action.")
    if not _ACTION.match(action):
        raise SqsError("InvalidAction", "The action is not valid for this web service.")
    tree: dict[str, Any] = {}
    for key, value in form.items():
        if key in ("Action", "Version") or key.startswith("X-Amz-"):
            continue
        path = key.split(".", _MAX_KEY_SEGMENTS)
        if len(path) > _MAX_KEY_SEGMENTS or len(key) > _MAX_KEY_LENGTH:
            raise SqsError("MalformedQueryString", "A parameter name is too long.")
        _place(tree, path, value)
    return action, _members(tree)


#: SQS's deepest parameter has 7 segments
#: (SendMessageBatchRequestEntry.1.MessageAttribute.1.Value.DataType, and the like); a
#: deeper or longer name is refused before anything is built from it.
_MAX_KEY_SEGMENTS = 10
_MAX_KEY_LENGTH = 512


def _place(tree: dict[str, Any], path: list[str], value: str) -> None:
    node = tree
    for part in path[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise SqsError("MalformedQueryString", "A parameter is both a value and a group.")
        node = child
    if isinstance(node.get(path[-1]), dict):
        raise SqsError("MalformedQueryString", "A parameter is both a value and a group.")
    node[path[-1]] = value


def _members(node: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in node.items():
        if value == "" and (key in _LISTS or key in _MAPS):
            out[_LISTS[key] if key in _LISTS else _MAPS[key][0]] = [] if key in _LISTS else {}
        elif key in _LISTS:
            out[_LISTS[key]] = [_value(item) for item in _numbered(key, value)]
        elif key in _MAPS:
            name, key_name, value_name = _MAPS[key]
            out[name] = {
                str(entry.get(key_name)): _value(entry.get(value_name))
                for entry in _numbered(key, value)
                if isinstance(entry, dict)
            }
        elif value == "" and key in _EMPTY_LISTS | _EMPTY_MAPS:
            out[key] = [] if key in _EMPTY_LISTS else {}
        elif key in _INTEGERS and isinstance(value, str) and _INTEGER.match(value):
            out[key] = int(value)
        else:
            out[key] = _value(value)
    return out


def _numbered(key: str, value: Any) -> list[Any]:
    if not isinstance(value, dict) or not all(n.isdigit() for n in value):
        raise SqsError("MalformedQueryString", f"{key} must be numbered from 1.")
    return [value[n] for n in sorted(value, key=int)]


def _value(value: Any) -> Any:
    return _members(value) if isinstance(value, dict) else value


# -- answers --------------------------------------------------------------------------------


def encode(operation: str, answer: Mapping[str, Any] | None, request_id: str) -> bytes:
    result = ""
    if answer is not None:
        result = f"<{operation}Result>{_children(operation, answer)}</{operation}Result>"
    return (
        f'<?xml version="1.0"?><{operation}Response xmlns="{_NAMESPACE}">{result}'
        f"<ResponseMetadata><RequestId>{request_id}</RequestId></ResponseMetadata>"
        f"</{operation}Response>"
    ).encode()


def encode_error(error: SqsError, request_id: str) -> tuple[int, bytes]:
    parts = error_parts(error)
    body = (
        f'<?xml version="1.0"?><ErrorResponse xmlns="{_NAMESPACE}"><Error>'
        f"<Type>{parts.fault}</Type><Code>{_text(parts.legacy)}</Code>"
        f"<Message>{_text(error.message)}</Message><Detail/></Error>"
        f"<RequestId>{request_id}</RequestId></ErrorResponse>"
    )
    return parts.status, body.encode()


def _children(operation: str, members: Mapping[str, Any]) -> str:
    out: list[str] = []
    for name, value in members.items():
        if name in _ANSWER_MAPS and isinstance(value, Mapping):
            item, key, value_name = _ANSWER_MAPS[name]
            for entry_key, entry in value.items():
                inner = _element(value_name, operation, entry)
                out.append(f"<{item}><{key}>{_text(entry_key)}</{key}>{inner}</{item}>")
        elif isinstance(value, list):
            item = _ANSWER_LISTS.get(name) or f"{operation}ResultEntry"
            out.extend(_element(item, operation, entry) for entry in value)
        else:
            out.append(_element(name, operation, value))
    return "".join(out)


def _element(name: str, operation: str, value: Any) -> str:
    if isinstance(value, Mapping):
        return f"<{name}>{_children(operation, value)}</{name}>"
    if isinstance(value, bool):
        return f"<{name}>{'true' if value else 'false'}</{name}>"
    return f"<{name}>{_text(str(value))}</{name}>"


#: What XML 1.0 cannot carry at all, escaped or not: control characters but tab, newline and
#: carriage return, lone surrogates, U+FFFE and U+FFFF.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _text(text: str) -> str:
    # A value stored through the JSON protocol (a tag, a policy) may hold such characters:
    # answered as U+FFFD, so that the answer stays XML a client can parse.
    return escape(_NOT_XML.sub("\ufffd", text), {"\r": "&#xD;"})
