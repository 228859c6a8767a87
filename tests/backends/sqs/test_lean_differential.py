"""The lean path against botocore as the oracle, on generated inputs (hypothesis).

For the four hot operations (ReceiveMessage, DeleteMessageBatch, ChangeMessageVisibilityBatch,
SendMessageBatch; SendMessage is not hot: the backend sends in batches):

- Requests: generated parameters, shaped as `SqsBackend` builds them and beyond (every
  member the backend sets, attributes of every data type, text outside ASCII), are written
  by `lean_wire.encode` into the JSON botocore's own serialiser writes, header by header
  for the headers botocore's serialiser sets (target, content type, query mode).
- Answers: generated raw HTTP answers (success with messages, attributes and MD5s; partial
  failures; modelled errors in both spellings, with and without `x-amzn-query-error`;
  throttling; 5xx with empty, HTML or JSON bodies; odd 2xx bodies) are served by one
  loopback server to an aiobotocore client and to a `LeanTransport` made from that same
  client (one attempt each, so each reads exactly the answer generated). Both must answer
  the same dictionary, `ResponseMetadata` included, or raise the same exception class
  with the same `response`. The documented differences are asserted as such: a 2xx body
  that is not a JSON object is a `ResponseParserError` on the lean path (botocore reads
  text that is not JSON as an empty answer, and fails with an AttributeError from inside
  its parser on JSON that is not an object), and the lean path keeps members the model
  does not name, which botocore drops.
- On the wire: the lean request carries every header botocore's does, the same signed
  header list, and the same body JSON.

Bounds: `LEASE_WORKER_HYPOTHESIS=thorough` runs 400 examples a test (minutes); the default
profile runs 25 a test with no deadline, a few seconds for the whole module.
"""

from __future__ import annotations

import base64
import json
import string
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.from_thread
import pytest
from aiobotocore.session import AioSession
from aiohttp import web
from botocore import xform_name
from botocore.exceptions import ClientError
from botocore.parsers import ResponseParserError
from botocore.serialize import create_serializer
from botocore.session import get_session
from hypothesis import given
from hypothesis import strategies as st

from backends.sqs import lean_wire
from backends.sqs.lean import LEAN_OPERATIONS, LeanTransport
from backends.sqs.settings import SqsSettings
from tests import hypothesis_bounds
from tests.local_http import serving

bounded = hypothesis_bounds.bounded(25, 400)

SQS = get_session().get_service_model("sqs")
QUEUE_URL = "http://127.0.0.1:9/000000000000/jobs"

# ---------------------------------------------------------------- generated requests

_text = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=40)
_ids = st.text(string.ascii_letters + string.digits + "-_", min_size=1, max_size=80)
_names = st.text(string.ascii_letters + string.digits + "_-.", min_size=1, max_size=20)


@st.composite
def _attribute(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["String", "Number", "Binary", "String.custom"]))
    if kind == "Binary":
        return {"DataType": kind, "BinaryValue": draw(st.binary(max_size=40))}
    value = str(draw(st.integers())) if kind == "Number" else draw(_text)
    return {"DataType": kind, "StringValue": value}


_attributes = st.dictionaries(_names, _attribute(), max_size=4)


def _distinct(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return list({entry["Id"]: entry for entry in entries}.values())


@st.composite
def _send_entry(draw: st.DrawFn) -> dict[str, Any]:
    entry: dict[str, Any] = {"Id": draw(_ids), "MessageBody": draw(_text.filter(bool))}
    optional = {
        "DelaySeconds": st.integers(0, 900),
        "MessageAttributes": _attributes.filter(bool),
        "MessageGroupId": _ids,
        "MessageDeduplicationId": _ids,
        "MessageSystemAttributes": st.just(
            {"AWSTraceHeader": {"DataType": "String", "StringValue": "Root=1-5e1b4151-x"}}
        ),
    }
    for name, strategy in optional.items():
        if draw(st.booleans()):
            entry[name] = draw(strategy)
    return entry


def _entries(entry: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[Any]:
    return st.lists(entry, min_size=1, max_size=10).map(_distinct)


_handles = st.text(string.ascii_letters + string.digits + "+/=", min_size=1, max_size=120)
_REQUESTS: dict[str, st.SearchStrategy[dict[str, Any]]] = {
    "ReceiveMessage": st.fixed_dictionaries(
        {
            "QueueUrl": st.just(QUEUE_URL),
            "MaxNumberOfMessages": st.integers(1, 10),
            "WaitTimeSeconds": st.integers(0, 20),
            "MessageSystemAttributeNames": st.lists(
                st.sampled_from(["All", "ApproximateReceiveCount", "SentTimestamp"]), max_size=3
            ),
            "MessageAttributeNames": st.lists(_names, max_size=3) | st.just(["All"]),
        },
        optional={"VisibilityTimeout": st.integers(0, 43_200)},
    ),
    "DeleteMessageBatch": st.fixed_dictionaries(
        {
            "QueueUrl": st.just(QUEUE_URL),
            "Entries": _entries(st.fixed_dictionaries({"Id": _ids, "ReceiptHandle": _handles})),
        }
    ),
    "ChangeMessageVisibilityBatch": st.fixed_dictionaries(
        {
            "QueueUrl": st.just(QUEUE_URL),
            "Entries": _entries(
                st.fixed_dictionaries(
                    {
                        "Id": _ids,
                        "ReceiptHandle": _handles,
                        "VisibilityTimeout": st.integers(0, 43_200),
                    }
                )
            ),
        }
    ),
    "SendMessageBatch": st.fixed_dictionaries(
        {"QueueUrl": st.just(QUEUE_URL), "Entries": _entries(_send_entry())}
    ),
}
_operation_and_params = st.sampled_from(sorted(_REQUESTS)).flatmap(
    lambda operation: st.tuples(st.just(operation), _REQUESTS[operation])
)


def test_the_generated_operations_are_the_lean_ones() -> None:
    assert set(_REQUESTS) == LEAN_OPERATIONS


def _botocore_request(operation: str, params: dict[str, Any]) -> dict[str, Any]:
    serializer = create_serializer(SQS.protocol, include_validation=False)
    request: dict[str, Any] = serializer.serialize_to_request(
        params, SQS.operation_model(operation)
    )
    return request


@bounded
@given(_operation_and_params)
def test_a_request_is_written_as_botocores_serialiser_writes_it(
    operation_and_params: tuple[str, dict[str, Any]],
) -> None:
    operation, params = operation_and_params
    botocore = _botocore_request(operation, params)
    assert json.loads(lean_wire.encode(params)) == json.loads(botocore["body"])
    assert botocore["headers"] == {
        "X-Amz-Target": lean_wire.TARGET_PREFIX + operation,
        "Content-Type": lean_wire.CONTENT_TYPE,
        "x-amzn-query-mode": "true",
    }


# ---------------------------------------------------------------- generated answers


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


_md5 = st.text("0123456789abcdef", min_size=32, max_size=32)


@st.composite
def _wire_attribute(draw: st.DrawFn) -> dict[str, Any]:
    attribute = draw(_attribute())
    if "BinaryValue" in attribute:
        attribute["BinaryValue"] = base64.b64encode(attribute["BinaryValue"]).decode()
    if draw(st.booleans()):  # reserved by SQS, but in the model: botocore decodes them
        values = draw(st.lists(st.binary(max_size=8), max_size=2))
        attribute["BinaryListValues"] = [base64.b64encode(v).decode() for v in values]
    return attribute


_message = st.fixed_dictionaries(
    {
        "MessageId": _ids,
        "ReceiptHandle": _handles,
        "MD5OfBody": _md5,
        "Body": _text,
    },
    optional={
        "Attributes": st.dictionaries(
            st.sampled_from(["ApproximateReceiveCount", "SentTimestamp", "MessageGroupId"]),
            st.text(string.digits, min_size=1, max_size=13),
        ),
        "MD5OfMessageAttributes": _md5,
        "MessageAttributes": st.dictionaries(_names, _wire_attribute(), max_size=3),
    },
)
_failed = st.fixed_dictionaries(
    {"Id": _ids, "SenderFault": st.booleans(), "Code": _names},
    optional={"Message": _text},
)
_SUCCESS: dict[str, st.SearchStrategy[dict[str, Any]]] = {
    "ReceiveMessage": st.fixed_dictionaries({}, optional={"Messages": st.lists(_message)}),
    "DeleteMessageBatch": st.fixed_dictionaries(
        {"Successful": st.lists(st.fixed_dictionaries({"Id": _ids})), "Failed": st.lists(_failed)}
    ),
    "ChangeMessageVisibilityBatch": st.fixed_dictionaries(
        {"Successful": st.lists(st.fixed_dictionaries({"Id": _ids})), "Failed": st.lists(_failed)}
    ),
    "SendMessageBatch": st.fixed_dictionaries(
        {
            "Successful": st.lists(
                st.fixed_dictionaries(
                    {"Id": _ids, "MessageId": _ids, "MD5OfMessageBody": _md5},
                    optional={"MD5OfMessageAttributes": _md5, "SequenceNumber": st.just("18")},
                )
            ),
            "Failed": st.lists(_failed),
        }
    ),
}
_request_id = st.one_of(st.none(), st.uuids().map(str))
_MODELLED = [
    ("com.amazonaws.sqs#QueueDoesNotExist", "AWS.SimpleQueueService.NonExistentQueue;Sender"),
    ("com.amazonaws.sqs#OverLimit", "OverLimit;Sender"),
    ("com.amazonaws.sqs#ReceiptHandleIsInvalid", "ReceiptHandleIsInvalid;Sender"),
    ("com.amazonaws.sqs#TooManyEntriesInBatchRequest", None),
    (
        "com.amazonaws.sqs#BatchEntryIdsNotDistinct",
        "AWS.SimpleQueueService.BatchEntryIdsNotDistinct;Sender",
    ),
    ("com.amazonaws.sqs#InvalidAddress", None),
    ("com.amazon.coral.service#AccessDeniedException", "AccessDenied;Sender"),
    ("ThrottlingException", "RequestThrottled;Sender"),
    ("com.amazonaws.sqs#RequestThrottled", None),
    ("com.amazonaws.sqs#KmsThrottled", "KMS.ThrottlingException;Sender"),
    ("InternalFailure", "InternalError;Receiver"),
    ("SomethingNew:http://internal.amazon.com/", None),
]


def _with_id(headers: dict[str, str], request_id: str | None) -> dict[str, str]:
    return headers if request_id is None else {**headers, "x-amzn-RequestId": request_id}


@st.composite
def _error_answer(draw: st.DrawFn) -> Answer:
    status = draw(st.sampled_from([400, 403, 404, 413, 500, 502, 503]))
    kind = draw(st.sampled_from(["modelled", "empty", "html", "text", "json-no-type"]))
    headers: dict[str, str] = {}
    if kind == "modelled":
        code, query_error = draw(st.sampled_from(_MODELLED))
        key = draw(st.sampled_from(["message", "Message"]))
        body = json.dumps({"__type": code, key: draw(_text)}).encode()
        if query_error is not None and draw(st.booleans()):
            headers["x-amzn-query-error"] = query_error
    elif kind == "empty":
        body = b""
    elif kind == "html":
        body = b"<html><body><b>Http/1.1 Service Unavailable</b></body></html>"
    elif kind == "text":
        body = draw(_text).encode()
    else:
        body = json.dumps({"message": draw(_text)}).encode()
    return Answer(status, body, _with_id(headers, draw(_request_id)))


_ODD_BODIES = st.sampled_from(
    [b"", b"{}", b"  {}  ", b"[]", b"null", b"42", b'"text"', b"<html>ok</html>", b"not json"]
) | st.binary(max_size=20)


@st.composite
def _answer(draw: st.DrawFn, operation: str) -> Answer:
    kind = draw(st.sampled_from(["success", "success", "error", "odd"]))
    if kind == "success":
        body = json.dumps(draw(_SUCCESS[operation])).encode()
        return Answer(200, body, _with_id({}, draw(_request_id)))
    if kind == "error":
        return draw(_error_answer())
    return Answer(200, draw(_ODD_BODIES), _with_id({}, draw(_request_id)))


_operation_and_answer = st.sampled_from(sorted(_SUCCESS)).flatmap(
    lambda operation: st.tuples(st.just(operation), _answer(operation))
)


@dataclass(repr=False)
class Rig:
    """One loopback server answering what `answer` holds; both clients pointed at it."""

    portal: anyio.from_thread.BlockingPortal
    client: Any
    lean: LeanTransport
    answer: Answer = field(default_factory=lambda: Answer(200, b"{}"))
    requests: list[tuple[dict[str, str], bytes]] = field(default_factory=list)

    def both(self, operation: str, params: dict[str, Any]) -> tuple[Any, Any]:
        """What each client made of the same answer: its answer, or the exception raised."""
        return self._outcome(self._botocore, operation, params), self._outcome(
            self.lean.call, operation, params
        )

    async def _botocore(self, operation: str, params: dict[str, Any]) -> Any:
        return await getattr(self.client, xform_name(operation))(**params)

    def _outcome(self, call: Any, operation: str, params: dict[str, Any]) -> Any:
        try:
            outcome = self.portal.call(call, operation, params)
        except Exception as exc:
            outcome = exc
        # The two answers may be served in different seconds: their Date is not compared.
        answer = getattr(outcome, "response", outcome)
        if isinstance(answer, dict) and "ResponseMetadata" in answer:
            answer["ResponseMetadata"]["HTTPHeaders"].pop("date", None)
        return outcome


@pytest.fixture(scope="module")
def rig() -> Iterator[Rig]:
    with anyio.from_thread.start_blocking_portal() as portal:
        holder: list[Rig] = []

        async def handler(request: web.Request) -> web.Response:
            current = holder[0]
            current.requests.append((dict(request.headers), await request.read()))
            answer = current.answer
            return web.Response(status=answer.status, body=answer.body, headers=answer.headers)

        @asynccontextmanager
        async def opened() -> AsyncIterator[Rig]:
            async with serving(handler) as url:
                settings = SqsSettings(
                    region="us-east-1",
                    endpoint_url=url,
                    access_key_id="AKIDEXAMPLE",
                    secret_access_key="secret",
                    max_attempts=1,
                )
                session = AioSession()
                async with session.create_client(
                    "sqs",
                    region_name="us-east-1",
                    endpoint_url=url,
                    aws_access_key_id="AKIDEXAMPLE",
                    aws_secret_access_key="secret",
                    config=settings.client_config(),
                ) as client:
                    lean = await LeanTransport.open(client, settings, session=session)
                    try:
                        yield Rig(portal, client, lean)
                    finally:
                        await lean.aclose()

        with portal.wrap_async_context_manager(opened()) as made:
            holder.append(made)
            yield made


_PARAMS: dict[str, dict[str, Any]] = {
    "ReceiveMessage": {"QueueUrl": QUEUE_URL, "MaxNumberOfMessages": 10, "WaitTimeSeconds": 0},
    "DeleteMessageBatch": {"QueueUrl": QUEUE_URL, "Entries": [{"Id": "a", "ReceiptHandle": "h"}]},
    "ChangeMessageVisibilityBatch": {
        "QueueUrl": QUEUE_URL,
        "Entries": [{"Id": "a", "ReceiptHandle": "h", "VisibilityTimeout": 30}],
    },
    "SendMessageBatch": {"QueueUrl": QUEUE_URL, "Entries": [{"Id": "a", "MessageBody": "b"}]},
}


def _not_a_json_object(body: bytes) -> bool:
    if not body:
        return False
    try:
        return not isinstance(json.loads(body.decode("utf-8")), dict)
    except ValueError:
        return True


@bounded
@given(_operation_and_answer)
def test_an_answer_reads_as_botocore_reads_it(
    rig: Rig, operation_and_answer: tuple[str, Answer]
) -> None:
    operation, answer = operation_and_answer
    rig.answer = answer
    rig.requests.clear()
    botocore, lean = rig.both(operation, _PARAMS[operation])
    if answer.status < 300 and _not_a_json_object(answer.body):
        # The documented stricter reading: botocore answers an empty result (text that is
        # not JSON) or fails inside its parser (JSON that is not an object); lean refuses.
        assert isinstance(lean, ResponseParserError)
        assert isinstance(botocore, dict | AttributeError | UnicodeDecodeError), botocore
        if isinstance(botocore, dict):
            assert set(botocore) == {"ResponseMetadata"}
        return
    if isinstance(botocore, AttributeError) and _not_a_json_object(answer.body):
        # An error answer whose body is JSON but not an object (null, a list): botocore's
        # error parser fails inside itself; lean reads an error with the status alone.
        assert isinstance(lean, ClientError), lean
        return
    if isinstance(botocore, Exception):
        assert type(lean) is type(botocore), (lean, botocore)
        assert isinstance(lean, ClientError) and isinstance(botocore, ClientError)
        assert lean.response == botocore.response
        assert str(lean) == str(botocore)
        return
    assert lean == botocore


@pytest.mark.parametrize("body", [b"null", b"[]", b"7"])
def test_an_error_answer_whose_body_is_json_but_no_object_is_a_client_error(
    rig: Rig, body: bytes
) -> None:
    """botocore's own parser fails on these (AttributeError); the lean path raises the
    ClientError a caller handles, with the status's error."""
    rig.answer = Answer(400, body, {})
    botocore, lean = rig.both("ReceiveMessage", _PARAMS["ReceiveMessage"])
    assert isinstance(lean, ClientError), lean
    assert lean.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert isinstance(botocore, AttributeError | ClientError), botocore


def test_the_modelled_classes_are_the_clients_own(rig: Rig) -> None:
    """`except client.exceptions.QueueDoesNotExist` catches the lean path's error."""
    rig.answer = Answer(
        400,
        b'{"__type":"com.amazonaws.sqs#QueueDoesNotExist","message":"gone"}',
        {"x-amzn-query-error": "AWS.SimpleQueueService.NonExistentQueue;Sender"},
    )
    botocore, lean = rig.both("ReceiveMessage", _PARAMS["ReceiveMessage"])
    assert isinstance(lean, rig.client.exceptions.QueueDoesNotExist)
    assert isinstance(botocore, rig.client.exceptions.QueueDoesNotExist)
    assert lean.response["Error"]["Code"] == "AWS.SimpleQueueService.NonExistentQueue"
    assert lean.response["ResponseMetadata"]["RetryAttempts"] == 0


def test_members_the_model_does_not_name_are_kept_by_lean_only(rig: Rig) -> None:
    """The one difference on well-formed answers: botocore drops what its model does not
    name; the lean path keeps it (the backend reads only what the model names)."""
    rig.answer = Answer(200, b'{"Successful":[{"Id":"a","Extra":1}],"Failed":[],"New":true}')
    botocore, lean = rig.both("DeleteMessageBatch", _PARAMS["DeleteMessageBatch"])
    assert lean["New"] is True and "New" not in botocore
    assert lean["Successful"] == [{"Id": "a", "Extra": 1}]
    assert botocore["Successful"] == [{"Id": "a"}]


def _signed_headers(headers: dict[str, str]) -> str:
    return headers["Authorization"].split("SignedHeaders=")[1].split(",")[0]


@bounded
@given(_operation_and_params)
def test_on_the_wire_the_lean_request_is_botocores(
    rig: Rig, operation_and_params: tuple[str, dict[str, Any]]
) -> None:
    operation, params = operation_and_params
    rig.answer = Answer(200, b"{}")
    rig.requests.clear()
    rig.both(operation, params)
    (botocore_headers, botocore_body), (lean_headers, lean_body) = rig.requests
    assert json.loads(lean_body) == json.loads(botocore_body)
    assert {name.lower() for name in lean_headers} == {name.lower() for name in botocore_headers}
    assert _signed_headers(lean_headers) == _signed_headers(botocore_headers)
    assert "x-amzn-query-mode" in _signed_headers(lean_headers).split(";")
    same = ("X-Amz-Target", "Content-Type", "x-amzn-query-mode", "amz-sdk-request", "Host")
    for name in same:
        assert lean_headers[name] == botocore_headers[name], name
    assert lean_headers["amz-sdk-invocation-id"] != botocore_headers["amz-sdk-invocation-id"]
