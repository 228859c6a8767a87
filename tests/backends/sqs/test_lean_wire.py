"""The lean path's shapes and error mapping, without a network.

Each answer the lean path parses is checked against what botocore's own JSON parser makes of
the same bytes (the parser of the client the lean path stands in for), and each error against
what `backends.sqs.errors.map_error` makes of botocore's `ClientError` for it.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import aiohttp
import pytest
from aiobotocore.session import AioSession
from botocore.configprovider import NEW_RETRIES_ENABLED
from botocore.exceptions import (
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    HTTPClientError,
    ReadTimeoutError,
)
from botocore.model import ServiceModel
from botocore.parsers import create_parser
from botocore.retries.standard import RetryQuotaChecker

from backends.sqs import lean_wire, wire
from backends.sqs.errors import map_error
from backends.sqs.lean import transport_error
from backends.sqs.lean_retry import StandardRetry
from worker.errors import (
    FatalBackendError,
    OverLimit,
    QueueNotFound,
    TransientBackendError,
)
from worker.types import Deletion, MessageAttribute, OutgoingMessage


@pytest.fixture(scope="module")
def sqs_model() -> ServiceModel:
    loader = AioSession().get_component("data_loader")
    return ServiceModel(loader.load_service_model("sqs", "service-2"), "sqs")


def botocore_parse(
    model: ServiceModel, operation: str, status: int, headers: dict[str, str], body: bytes
) -> dict[str, Any]:
    parser = create_parser("json")
    response = {"status_code": status, "headers": headers, "body": body}
    parsed: dict[str, Any] = parser.parse(response, model.operation_model(operation).output_shape)
    return parsed


RECEIVED = {
    "Messages": [
        {
            "MessageId": "m-1",
            "ReceiptHandle": "h-1",
            "MD5OfBody": "x",
            "Body": "héllo",
            "Attributes": {"ApproximateReceiveCount": "3", "SentTimestamp": "1700000000000"},
            "MessageAttributes": {
                "blob": {
                    "DataType": "Binary",
                    "BinaryValue": base64.b64encode(b"\x00\xff").decode(),
                },
                "text": {"DataType": "String", "StringValue": "v"},
            },
        },
        {"MessageId": "m-2", "ReceiptHandle": "h-2", "Body": "{}"},
    ]
}


def test_a_receive_answer_reads_as_botocore_reads_it(sqs_model: ServiceModel) -> None:
    body = json.dumps(RECEIVED).encode()
    ours = lean_wire.answer("ReceiveMessage", body)
    theirs = botocore_parse(sqs_model, "ReceiveMessage", 200, {}, body)
    assert ours["Messages"] == theirs["Messages"]
    messages = [wire.message_from_wire("jobs", raw) for raw in ours["Messages"]]
    assert [m.message_id for m in messages] == ["m-1", "m-2"]
    assert messages[0].receive_count == 3
    assert messages[0].body == "héllo"
    assert messages[0].message_attributes["blob"] == MessageAttribute(
        "Binary", binary_value=b"\x00\xff"
    )
    assert messages[1].receive_count == 1


def test_what_json_reads_the_lean_path_reads_too(sqs_model: ServiceModel) -> None:
    """Answers are read with json.loads' results (worker.jsonlib), as botocore reads them:
    raw orjson refused a lone surrogate that botocore accepts (a review found it)."""
    body = (
        '{"Messages": [{"MessageId": "m", "ReceiptHandle": "h", "MD5OfBody": "x", "Body": '
        + '"\\ud800 a lone surrogate"'  # escaped in the JSON, as a non-AWS server may send
        + "}]}"
    ).encode()
    theirs = botocore_parse(sqs_model, "ReceiveMessage", 200, {}, body)
    assert lean_wire.answer("ReceiveMessage", body)["Messages"] == theirs["Messages"]


AWKWARD_JSON = [
    '{"n": 18446744073709551616}',  # beyond 64 bits: orjson would make it a float
    '{"n": -9223372036854775809}',  # 19 digits, below a signed 64-bit integer
    '{"n": 1234567890123456789, "m": 123456789012345678901234567890}',
    '{"s": "12345678901234567890", "f": 1.5, "e": 1e-7}',  # a long run inside a string
    '{"n": NaN, "i": -Infinity, "big": 1e400}',  # values in json, errors in orjson
    '{"s": "\\ud800"}',  # an escaped lone surrogate
    '{"s": "\u0661\u0662\u0663\u0664\u0665\u0666\u0667\u0668\u0669\u0660'
    '\u0661\u0662\u0663\u0664\u0665\u0666\u0667\u0668\u0669\u0660"}',  # not ASCII
    '{"a": [1, 2.5, true, null, "h\u00e9"], "b": {"c": "d"}, "a": 0}',  # a key twice
]


@pytest.mark.parametrize("text", AWKWARD_JSON)
def test_an_answer_has_json_loads_values(text: str) -> None:
    """Whichever library reads it, an answer's values are json.loads' (botocore's)."""
    ours = lean_wire.answer("DeleteMessageBatch", text.encode())
    theirs = json.loads(text)
    assert repr(ours) == repr(theirs)  # repr: NaN is not equal to itself
    assert [type(v) for v in ours.values()] == [type(v) for v in theirs.values()]


@pytest.mark.parametrize("body", [b'{"a": ', b'{"a": 1}}', b'{"a": "\xff"}'])
def test_an_unreadable_answer_is_a_value_error(body: bytes) -> None:
    with pytest.raises(ValueError):
        lean_wire.answer("DeleteMessageBatch", body)


@pytest.mark.parametrize("body", [b"", b"{}"])
def test_an_empty_receive_is_no_messages(body: bytes) -> None:
    assert lean_wire.answer("ReceiveMessage", body) == {}


def test_a_batch_answer_keeps_partial_failure_as_a_value(sqs_model: ServiceModel) -> None:
    raw = {
        "Successful": [{"Id": "a"}],
        "Failed": [{"Id": "b", "Code": "ReceiptHandleIsInvalid", "SenderFault": True}],
    }
    body = json.dumps(raw).encode()
    ours = lean_wire.answer("DeleteMessageBatch", body)
    theirs = botocore_parse(sqs_model, "DeleteMessageBatch", 200, {}, body)
    assert (ours["Successful"], ours["Failed"]) == (theirs["Successful"], theirs["Failed"])
    result = wire.batch_result(ours)
    assert result.succeeded == ("a",)
    assert [(f.entry_id, f.code, f.sender_fault) for f in result.failed] == [
        ("b", "ReceiptHandleIsInvalid", True)
    ]


def test_an_answer_that_is_not_an_object_is_refused() -> None:
    with pytest.raises(ValueError, match="not a JSON object"):
        lean_wire.answer("ReceiveMessage", b"[1]")


def test_a_request_body_is_the_parameters_as_json_with_blobs_in_base64() -> None:
    message = OutgoingMessage(
        entry_id="0",
        body="b",
        message_attributes={"blob": MessageAttribute("Binary", binary_value=b"\x01\x02")},
    )
    params = {"QueueUrl": "http://q", "Entries": [wire.send_entry(message)]}
    decoded = json.loads(lean_wire.encode(params))
    assert decoded["Entries"][0]["MessageAttributes"]["blob"] == {
        "DataType": "Binary",
        "BinaryValue": base64.b64encode(b"\x01\x02").decode(),
    }
    deletes = {"QueueUrl": "http://q", "Entries": wire.delete_entries([Deletion("1", "h")])}
    assert json.loads(lean_wire.encode(deletes)) == {
        "QueueUrl": "http://q",
        "Entries": [{"Id": "1", "ReceiptHandle": "h"}],
    }


def test_a_value_json_cannot_carry_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        lean_wire.encode({"Entries": {1}})


ERRORS = [
    # status, __type, x-amzn-query-error, the worker error, its code
    (400, "com.amazonaws.sqs#QueueDoesNotExist", "AWS.SimpleQueueService.NonExistentQueue;Sender",
     QueueNotFound, "AWS.SimpleQueueService.NonExistentQueue"),
    (400, "com.amazonaws.sqs#RequestThrottled", "RequestThrottled;Sender",
     TransientBackendError, "RequestThrottled"),
    (403, "com.amazonaws.sqs#OverLimit", "OverLimit;Sender", OverLimit, "OverLimit"),
    (500, "com.amazonaws.sqs#InternalError", None, TransientBackendError, "InternalError"),
    (400, "com.amazonaws.sqs#InvalidParameterValue", None, FatalBackendError,
     "InvalidParameterValue"),
    (502, None, None, TransientBackendError, "502"),
    (503, "", None, TransientBackendError, "503"),
]  # fmt: skip


@pytest.mark.parametrize(("status", "kind", "query", "expected", "code"), ERRORS)
def test_an_error_answer_maps_as_botocores_client_error_does(
    sqs_model: ServiceModel,
    status: int,
    kind: str | None,
    query: str | None,
    expected: type[Exception],
    code: str,
) -> None:
    raw: dict[str, str] = {"message": "the service's words " * 30}
    if kind is not None:
        raw["__type"] = kind
    body = b"<html>bad gateway</html>" if kind is None else json.dumps(raw).encode()
    if kind == "":
        body = b""
    headers = {"x-amzn-requestid": "r-1"}
    if query is not None:
        headers["x-amzn-query-error"] = query
    ours = lean_wire.error_answer(status, headers, body)
    theirs = botocore_parse(sqs_model, "ReceiveMessage", status, headers, body)
    assert ours["Error"] == theirs["Error"]
    from_lean = map_error(
        ClientError(ours, "ReceiveMessage"), operation="ReceiveMessage", queue="q"
    )
    from_botocore = map_error(
        ClientError(theirs, "ReceiveMessage"),
        operation="ReceiveMessage",
        queue="q",
    )
    assert type(from_lean) is expected
    assert str(from_lean) == str(from_botocore)
    assert from_lean is not None and from_lean.code == code
    assert len(str(from_lean)) < 400  # capped: one line, whatever the service wrote


TRANSPORT = [
    (aiohttp.ServerDisconnectedError(), ConnectionClosedError, "ConnectionClosedError"),
    (aiohttp.ServerTimeoutError("Connection timeout to host"), ConnectTimeoutError, None),
    (aiohttp.ServerTimeoutError("Timeout on reading data from socket"), ReadTimeoutError, None),
    (TimeoutError(), ReadTimeoutError, "ReadTimeoutError"),
    (aiohttp.ClientConnectionError("refused"), EndpointConnectionError, None),
    (RuntimeError("odd"), HTTPClientError, None),
]


@pytest.mark.parametrize(("raised", "botocore_type", "code"), TRANSPORT)
def test_transport_failures_become_botocores_exceptions_and_map_as_transient(
    raised: Exception, botocore_type: type[Exception], code: str | None
) -> None:
    error = transport_error(raised, "http://127.0.0.1:1/")
    assert type(error) is botocore_type
    mapped = map_error(error, operation="DeleteMessageBatch", queue="q")
    assert isinstance(mapped, TransientBackendError)
    assert mapped.code == (code or botocore_type.__name__)


def _context_error(status: int, code: str) -> tuple[int, dict[str, str], dict[str, Any]]:
    body = json.dumps({"__type": f"com.amazonaws.sqs#{code}", "message": "m"}).encode()
    headers: dict[str, str] = {}
    return status, headers, lean_wire.error_answer(status, headers, body)


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("status", "code", "retried"),
    [
        (400, "RequestThrottled", True),
        (500, "InternalError", True),
        (503, "ServiceUnavailable", True),
        (400, "InvalidParameterValue", False),
        (400, "QueueDoesNotExist", False),
    ],
)
async def test_standard_mode_decides_which_answers_are_retried(
    sqs_model: ServiceModel, status: int, code: str, retried: bool
) -> None:
    retry = StandardRetry(sqs_model, max_attempts=3)
    answer = _context_error(status, code)
    first = await retry.delay("DeleteMessageBatch", 1, {}, answer=answer)
    assert (first is not None) is retried
    if retried:
        # botocore's numbers: rand * min(scale * 2 ** (attempt - 1), 20); the scale is 1, or
        # with AWS_NEW_RETRIES_2026 1 when throttled and 0.05 otherwise.
        scale = 1.0 if code == "RequestThrottled" or not NEW_RETRIES_ENABLED else 0.05
        assert first is not None and 0 <= first <= scale
        # The third attempt was the last one.
        assert await retry.delay("DeleteMessageBatch", 3, {}, answer=answer) is None


@pytest.mark.asyncio
async def test_connection_errors_are_retried_until_the_attempts_run_out(
    sqs_model: ServiceModel,
) -> None:
    retry = StandardRetry(sqs_model, max_attempts=2)
    reset = transport_error(aiohttp.ServerDisconnectedError(), "http://x/")
    assert await retry.delay("ReceiveMessage", 1, {}, exception=reset) is not None
    assert await retry.delay("ReceiveMessage", 2, {}, exception=reset) is None


@pytest.mark.asyncio
async def test_the_retry_quota_runs_out_and_comes_back_after_successes(
    sqs_model: ServiceModel,
) -> None:
    retry = StandardRetry(sqs_model, max_attempts=5)
    answer = _context_error(500, "InternalError")
    # botocore's quota: 500 tokens, 5 per retry (14 with AWS_NEW_RETRIES_2026).
    cost = (
        RetryQuotaChecker._RETRY_COST_V2 if NEW_RETRIES_ENABLED else RetryQuotaChecker._RETRY_COST
    )
    granted = 0
    while await retry.delay("DeleteMessageBatch", 1, {}, answer=answer) is not None:
        granted += 1
    assert granted == 500 // cost
    # Each success after a retry gives back what that retry took.
    context: dict[str, Any] = {"retry_quota_capacity": cost}
    retry.succeeded(context, 200)
    assert await retry.delay("DeleteMessageBatch", 1, {}, answer=answer) is not None


def test_an_unreadable_answer_maps_as_transient() -> None:
    """A garbled 2xx answer (the lean path's stricter reading) is retried by the runtime
    with its backoff, not a fatal error that stops the worker."""
    from botocore.parsers import ResponseParserError

    from backends.sqs.errors import map_error
    from worker.errors import TransientBackendError

    error = map_error(ResponseParserError("ReceiveMessage: unreadable answer"), operation="X")
    assert isinstance(error, TransientBackendError)
