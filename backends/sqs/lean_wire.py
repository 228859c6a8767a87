"""SQS's JSON protocol (AWS JSON 1.0) as the lean path writes and reads it. Pure: no I/O.

The lean path (`backends.sqs.lean`) sends the same parameters `SqsBackend` gives botocore and
hands back the same dictionaries botocore's parser would make, so `backends.sqs.wire` turns
both into `worker.types` and `backends.sqs.errors` maps both failures. Rules this module keeps:
- A request is `POST /` with `X-Amz-Target: AmazonSQS.<Operation>` and a JSON object body;
  blobs (a message attribute's `BinaryValue`) travel as base64, as botocore sends them.
- An answer below 301 (botocore's line) is a JSON object (an empty body is `{}`); a
  `ReceiveMessage` answer's `BinaryValue`s and `BinaryListValues` are decoded back to bytes,
  as botocore's are. Stricter than botocore: a body that is not a JSON object is a
  ValueError (botocore reads text that is not JSON as an empty answer, so a proxy's page or
  a cut body would read as "no messages" or as a batch that neither succeeded nor failed,
  and it fails on JSON that is not an object with an AttributeError from inside its parser).
- Every answer, error or not, carries botocore's `ResponseMetadata`: `RequestId` (from
  `x-amzn-requestid`, when there is one), `HTTPStatusCode`, `HTTPHeaders` (names
  lower-cased: the headers are taken as the lean path's transports hand them over, already
  lower-cased and fresh for each answer, so they are neither lower-cased nor copied again);
  `RetryAttempts` is the caller's (`backends.sqs.lean`).
- An answer from 301 on is an error shaped as botocore's JSON parser shapes it: `Error.Code` from
  `__type` (the part after `#`), or the HTTP status when there is none; `Error.Message` from
  `message` or `Message`; SQS's query-compatible code from the `x-amzn-query-error` header
  (`Code;Sender`) becomes `Code`, the JSON one `QueryErrorCode`. A 5xx whose body is empty
  or an HTML page is read by its status alone (and, as botocore does, without a RequestId).
- Answers are read with `json.loads`' results (which botocore's parser uses), by
  `worker.jsonlib.loads_utf8` (orjson where it agrees); requests are written by orjson when
  it is importable (the `fast` extra), else the standard library's json.
"""

from __future__ import annotations

import base64
import http.client
import json
from collections.abc import Callable, Mapping
from typing import Any

from worker import jsonlib

__all__ = ["CONTENT_TYPE", "TARGET_PREFIX", "answer", "encode", "error_answer", "metadata"]

CONTENT_TYPE = "application/x-amz-json-1.0"
TARGET_PREFIX = "AmazonSQS."


def _blob(value: object) -> str:
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(value).decode("ascii")
    raise TypeError(f"cannot send a {type(value).__name__} in an SQS request")


def _json_dumps(params: Mapping[str, Any]) -> bytes:
    return json.dumps(params, separators=(",", ":"), default=_blob).encode()


_dumps: Callable[[Mapping[str, Any]], bytes]
try:
    import orjson
except ImportError:  # pragma: no cover - orjson is in the dev environment
    _dumps = _json_dumps
else:

    def _orjson_dumps(params: Mapping[str, Any]) -> bytes:
        return orjson.dumps(params, default=_blob)

    _dumps = _orjson_dumps

#: Text as botocore reads it (UTF-8; a bad byte is a ValueError), then `json.loads`' values
#: (by orjson where they are the same: `worker.jsonlib`).
_loads = jsonlib.loads_utf8


def encode(params: Mapping[str, Any]) -> bytes:
    """The request body for these parameters (as `SqsBackend` builds them for botocore)."""
    return _dumps(params)


def _decode_blobs(messages: list[dict[str, Any]]) -> None:
    for message in messages:
        for attribute in (message.get("MessageAttributes") or {}).values():
            binary = attribute.get("BinaryValue")
            if isinstance(binary, str):
                attribute["BinaryValue"] = base64.b64decode(binary)
            binaries = attribute.get("BinaryListValues")
            if binaries:
                attribute["BinaryListValues"] = [
                    base64.b64decode(item) if isinstance(item, str) else item for item in binaries
                ]


def metadata(status: int, headers: dict[str, str]) -> dict[str, Any]:
    """botocore's `ResponseMetadata` for an answer (without `RetryAttempts`); `headers`
    with lower-cased names, kept as its `HTTPHeaders`."""
    found: dict[str, Any] = {}
    request_id = headers.get("x-amzn-requestid")
    if request_id is not None:
        found["RequestId"] = request_id
    found["HTTPStatusCode"] = status
    found["HTTPHeaders"] = headers
    return found


def answer(operation: str, body: bytes) -> dict[str, Any]:
    """A 2xx answer's body as botocore's parser would give it (without its metadata);
    ValueError if it is not a JSON object."""
    parsed = _loads(body) if body else {}
    if not isinstance(parsed, dict):
        raise ValueError(f"{operation}: the answer is not a JSON object")
    if operation == "ReceiveMessage" and parsed.get("Messages"):
        _decode_blobs(parsed["Messages"])
    return parsed


def _error_body(body: bytes) -> dict[str, Any]:
    if not body:
        return {}
    try:
        parsed = _loads(body)
    except ValueError:
        # botocore keeps a body that is not JSON (a proxy's page) as the message.
        return {"message": body.decode("utf-8", "replace")}
    return parsed if isinstance(parsed, dict) else {}


def _service_error(headers: Mapping[str, str], status: int, body: bytes) -> dict[str, Any]:
    raw = _error_body(body)
    error: dict[str, Any] = {"Message": raw.get("message", raw.get("Message", ""))}
    code = str(raw.get("__type") or status)
    code = code.split(":", 1)[0].rsplit("#", 1)[-1]
    query_error = headers.get("x-amzn-query-error")
    if query_error is not None:
        parts = query_error.split(";")
        if len(parts) == 2 and parts[0]:
            error["QueryErrorCode"] = code
            error["Type"] = parts[1]
            code = parts[0]
    error["Code"] = code
    return error


def error_answer(status: int, headers: dict[str, str], body: bytes) -> dict[str, Any]:
    """A non-2xx answer as botocore's JSON parser shapes it (what `ClientError` carries);
    `headers` with lower-cased names."""
    stripped = body.strip()
    found = metadata(status, headers)
    if status >= 500 and (not stripped or stripped.startswith(b"<html>")):
        # A load balancer's or a proxy's own page: botocore reads only the status (and
        # takes no request id from the headers).
        error = {"Code": str(status), "Message": http.client.responses.get(status, "")}
        found.pop("RequestId", None)
    else:
        error = _service_error(headers, status, body)
    return {"Error": error, "ResponseMetadata": found}
