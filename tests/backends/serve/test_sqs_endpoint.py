"""The embedded SQS endpoint as SQS clients see it: boto3 (synchronous, against a server in a
background thread) and aiobotocore (against a server in the test's own event loop).

Real sockets on loopback and real time (looptime cannot drive sockets): every wait is short
and bounded. botocore does not check MD5s itself, so the tests check every MD5 the server
sends against an implementation written here from SQS's documentation (and two published
vectors).
"""

from __future__ import annotations

import hashlib
import json
import struct
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import anyio
import boto3
import pytest
from aiobotocore.session import AioSession
from aiohttp import web
from aiohttp.test_utils import make_mocked_request
from botocore.config import Config
from botocore.exceptions import ClientError

from backends.memory import MemoryBackend
from backends.serve.sqs.endpoint import (
    SqsEndpoint,
    _Bounds,
    _Handler,
    serve_sqs,
    sqs_endpoint_in_thread,
)
from backends.serve.sqs.messages import md5_of_message_attributes
from backends.serve.sqs.service import SqsService
from worker.types import MessageAttribute

_CLIENT = {
    "region_name": "us-east-1",
    "aws_access_key_id": "testing",
    "aws_secret_access_key": "testing",
}
# One attempt, and no client-side validation: the server's answer is what is tested.
_CONFIG = Config(retries={"total_max_attempts": 1}, parameter_validation=False)


@pytest.fixture
def endpoint() -> Iterator[SqsEndpoint]:
    with sqs_endpoint_in_thread(max_in_flight=3) as running:
        yield running


@pytest.fixture
def sqs(endpoint: SqsEndpoint) -> Any:
    return boto3.client("sqs", endpoint_url=endpoint.url, config=_CONFIG, **_CLIENT)


def error_of(caught: pytest.ExceptionInfo[ClientError]) -> tuple[str, str, int]:
    """(Code, QueryErrorCode, HTTP status) of a botocore ClientError."""
    response = caught.value.response
    error = response["Error"]
    status = response["ResponseMetadata"]["HTTPStatusCode"]
    return error["Code"], error.get("QueryErrorCode", ""), status


# -- MD5s, written from SQS's documentation ---------------------------------------------------


def expected_attributes_md5(attributes: Mapping[str, Mapping[str, Any]]) -> str:
    def field(raw: bytes) -> bytes:
        return struct.pack(">I", len(raw)) + raw

    out = b""
    for name in sorted(attributes):
        value = attributes[name]
        out += field(name.encode()) + field(value["DataType"].encode())
        if "BinaryValue" in value:
            out += b"\x02" + field(bytes(value["BinaryValue"]))
        else:
            out += b"\x01" + field(value["StringValue"].encode())
    return hashlib.md5(out).hexdigest()


def md5(text: str) -> str:
    return hashlib.md5(text.encode()).hexdigest()


def test_attribute_md5_matches_published_vectors() -> None:
    one = {"SellerName": MessageAttribute("String", "Example Store")}
    assert md5_of_message_attributes(one) == "cd28f3b68aeee4b2eac9c66f2f694b58"
    two = {
        "ordinal": MessageAttribute("Number", "1"),
        "category": MessageAttribute("String", "test"),
    }
    assert md5_of_message_attributes(two) == "d21ae90c49061e927f57df5f5d72be1f"


# -- queues ---------------------------------------------------------------------------------


def test_queue_lifecycle(sqs: Any, endpoint: SqsEndpoint) -> None:
    url = sqs.create_queue(QueueName="orders")["QueueUrl"]
    assert url == f"{endpoint.url}/000000000000/orders"
    assert sqs.get_queue_url(QueueName="orders")["QueueUrl"] == url
    for name in ("orders-dlq", "emails"):
        sqs.create_queue(QueueName=name)
    assert sqs.list_queues()["QueueUrls"] == [
        f"{endpoint.url}/000000000000/{name}" for name in ("emails", "orders", "orders-dlq")
    ]
    assert len(sqs.list_queues(QueueNamePrefix="orders")["QueueUrls"]) == 2
    assert "QueueUrls" not in sqs.list_queues(QueueNamePrefix="nothing")
    first = sqs.list_queues(MaxResults=2)
    assert len(first["QueueUrls"]) == 2
    rest = sqs.list_queues(MaxResults=2, NextToken=first["NextToken"])
    assert rest["QueueUrls"] == [f"{endpoint.url}/000000000000/orders-dlq"]
    assert "NextToken" not in rest

    sqs.delete_queue(QueueUrl=url)
    with pytest.raises(sqs.exceptions.QueueDoesNotExist) as caught:
        sqs.get_queue_url(QueueName="orders")
    assert error_of(caught) == ("AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist", 400)
    with pytest.raises(sqs.exceptions.QueueDeletedRecently):
        sqs.create_queue(QueueName="orders")


def test_create_queue_compares_only_the_attributes_given(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="q", Attributes={"VisibilityTimeout": "60"})["QueueUrl"]
    assert sqs.create_queue(QueueName="q")["QueueUrl"] == url
    assert (
        sqs.create_queue(QueueName="q", Attributes={"VisibilityTimeout": "60"})["QueueUrl"] == url
    )
    with pytest.raises(sqs.exceptions.QueueNameExists) as caught:
        sqs.create_queue(QueueName="q", Attributes={"VisibilityTimeout": "61"})
    assert error_of(caught) == ("QueueAlreadyExists", "QueueNameExists", 400)


@pytest.mark.parametrize(
    ("name", "attributes", "code"),
    [
        ("x.fifo", {}, "InvalidParameterValue"),
        ("x", {"FifoQueue": "true"}, "InvalidParameterValue"),
        ("bad name", {}, "InvalidParameterValue"),
        ("x", {"VisibilityTimeout": "43201"}, "InvalidAttributeValue"),
        ("x", {"VisibilityTimeout": "soon"}, "InvalidAttributeValue"),
        ("x", {"Colour": "blue"}, "InvalidAttributeName"),
        ("x", {"RedrivePolicy": "{}"}, "InvalidParameterValue"),
        ("x", {"ReceiveMessageWaitTimeSeconds": "21"}, "InvalidAttributeValue"),
    ],
)
def test_create_queue_refusals(sqs: Any, name: str, attributes: dict[str, str], code: str) -> None:
    with pytest.raises(ClientError) as caught:
        sqs.create_queue(QueueName=name, Attributes=attributes)
    # botocore's QueryErrorCode is the `__type` shape; AWS names InvalidParameterValue's so.
    shape = {"InvalidParameterValue": "InvalidParameterValueException"}.get(code, code)
    assert error_of(caught) == (code, shape, 400)


def test_queue_attributes(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="q", Attributes={"VisibilityTimeout": "45"})["QueueUrl"]
    sqs.send_message_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "a", "MessageBody": "a"},
            {"Id": "b", "MessageBody": "b"},
            {"Id": "c", "MessageBody": "c", "DelaySeconds": 60},
        ],
    )
    sqs.receive_message(QueueUrl=url)
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert attributes["QueueArn"] == "arn:aws:sqs:us-east-1:000000000000:q"
    assert attributes["ApproximateNumberOfMessages"] == "1"
    assert attributes["ApproximateNumberOfMessagesNotVisible"] == "1"
    assert attributes["ApproximateNumberOfMessagesDelayed"] == "1"
    assert attributes["VisibilityTimeout"] == "45"
    assert attributes["MessageRetentionPeriod"] == "345600"
    assert abs(int(attributes["CreatedTimestamp"]) - time.time()) < 60
    assert "FifoQueue" not in attributes and "RedrivePolicy" not in attributes

    some = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn", "DelaySeconds"])
    assert set(some["Attributes"]) == {"QueueArn", "DelaySeconds"}
    assert "Attributes" not in sqs.get_queue_attributes(QueueUrl=url)
    with pytest.raises(sqs.exceptions.InvalidAttributeName):
        sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["Colour"])


def test_set_queue_attributes(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    sqs.set_queue_attributes(
        QueueUrl=url,
        Attributes={
            "VisibilityTimeout": "5",
            "DelaySeconds": "1",
            "MessageRetentionPeriod": "600",
            "ReceiveMessageWaitTimeSeconds": "1",
            "Policy": "{}",
        },
    )
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert attributes["VisibilityTimeout"] == "5"
    assert attributes["DelaySeconds"] == "1"
    assert attributes["MessageRetentionPeriod"] == "600"
    assert attributes["ReceiveMessageWaitTimeSeconds"] == "1"
    assert attributes["Policy"] == "{}"

    # ReceiveMessageWaitTimeSeconds is the default long poll.
    start = time.monotonic()
    assert "Messages" not in sqs.receive_message(QueueUrl=url)
    assert time.monotonic() - start >= 0.9

    for refused, error in [
        ({"VisibilityTimeout": "-1"}, sqs.exceptions.InvalidAttributeValue),
        ({"FifoQueue": "true"}, sqs.exceptions.InvalidAttributeName),
        ({"Colour": "blue"}, sqs.exceptions.InvalidAttributeName),
    ]:
        with pytest.raises(error):
            sqs.set_queue_attributes(QueueUrl=url, Attributes=refused)


def test_purge(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="m")
    sqs.purge_queue(QueueUrl=url)
    assert "Messages" not in sqs.receive_message(QueueUrl=url)
    with pytest.raises(sqs.exceptions.PurgeQueueInProgress) as caught:
        sqs.purge_queue(QueueUrl=url)
    assert error_of(caught) == (
        "AWS.SimpleQueueService.PurgeQueueInProgress",
        "PurgeQueueInProgress",
        403,
    )


# -- messages -------------------------------------------------------------------------------

ATTRIBUTES: dict[str, dict[str, Any]] = {
    "colour": {"DataType": "String", "StringValue": "blue"},
    "count": {"DataType": "Number", "StringValue": "42"},
    "blob": {"DataType": "Binary", "BinaryValue": b"\x00\x01\xff"},
    "meta.json": {"DataType": "String.json", "StringValue": '{"k": "é"}'},
}


def test_send_receive_delete_with_md5s(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    body = "héllo, wörld ✓"
    sent = sqs.send_message(QueueUrl=url, MessageBody=body, MessageAttributes=ATTRIBUTES)
    assert sent["MD5OfMessageBody"] == md5(body)
    assert sent["MD5OfMessageAttributes"] == expected_attributes_md5(ATTRIBUTES)
    assert "SequenceNumber" not in sent

    got = sqs.receive_message(
        QueueUrl=url, MessageAttributeNames=["All"], MessageSystemAttributeNames=["All"]
    )
    [message] = got["Messages"]
    assert message["MessageId"] == sent["MessageId"]
    assert message["Body"] == body
    assert message["MD5OfBody"] == md5(body)
    assert message["MessageAttributes"] == ATTRIBUTES
    assert message["MD5OfMessageAttributes"] == expected_attributes_md5(ATTRIBUTES)
    system = message["Attributes"]
    assert system["ApproximateReceiveCount"] == "1"
    # A standard queue's message has these four: no group, no sequence, no dead-letter source.
    assert set(system) == {
        "SenderId",
        "SentTimestamp",
        "ApproximateReceiveCount",
        "ApproximateFirstReceiveTimestamp",
    }

    sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    with pytest.raises(sqs.exceptions.ReceiptHandleIsInvalid) as caught:
        sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    assert error_of(caught) == ("ReceiptHandleIsInvalid", "ReceiptHandleIsInvalid", 404)


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        ([], set()),
        ([".*"], set(ATTRIBUTES)),
        (["colour", "missing"], {"colour"}),
        (["meta.*", "count"], {"meta.json", "count"}),
    ],
)
def test_received_attributes_are_filtered_and_their_md5_follows(
    sqs: Any, names: list[str], expected: set[str]
) -> None:
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="m", MessageAttributes=ATTRIBUTES)
    [message] = sqs.receive_message(QueueUrl=url, MessageAttributeNames=names)["Messages"]
    picked = message.get("MessageAttributes", {})
    assert set(picked) == expected
    if expected:
        assert message["MD5OfMessageAttributes"] == expected_attributes_md5(picked)
    else:
        assert "MD5OfMessageAttributes" not in message
    assert "Attributes" not in message


def test_system_attributes_are_filtered(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="m")
    [message] = sqs.receive_message(
        QueueUrl=url,
        MessageSystemAttributeNames=["ApproximateReceiveCount"],
        AttributeNames=["SentTimestamp"],
        VisibilityTimeout=0,
    )["Messages"]
    assert set(message["Attributes"]) == {"ApproximateReceiveCount", "SentTimestamp"}
    [again] = sqs.receive_message(QueueUrl=url, AttributeNames=["All"])["Messages"]
    assert again["Attributes"]["ApproximateReceiveCount"] == "2"


@pytest.mark.parametrize(
    "attributes",
    [
        {"AWS.x": {"DataType": "String", "StringValue": "v"}},
        {"a..b": {"DataType": "String", "StringValue": "v"}},
        {"n": {"DataType": "Number", "StringValue": "forty"}},
        {"n": {"DataType": "Text", "StringValue": "v"}},
        {"n": {"DataType": "String"}},
        {"n": {"DataType": "Binary", "BinaryValue": b""}},
        {f"a{i}": {"DataType": "String", "StringValue": "v"} for i in range(11)},
    ],
)
def test_invalid_message_attributes(sqs: Any, attributes: dict[str, Any]) -> None:
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    with pytest.raises(ClientError) as caught:
        sqs.send_message(QueueUrl=url, MessageBody="m", MessageAttributes=attributes)
    assert error_of(caught)[0] == "InvalidParameterValue"


def test_send_message_batch_with_failed_entries(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    answer = sqs.send_message_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "good", "MessageBody": "g", "MessageAttributes": ATTRIBUTES},
            {"Id": "empty", "MessageBody": ""},
            {"Id": "badattr", "MessageBody": "b", "MessageAttributes": {"n": {"DataType": "X"}}},
            {"Id": "dedup", "MessageBody": "d", "MessageDeduplicationId": "x"},
            {"Id": "plain", "MessageBody": "p"},
        ],
    )
    successful = {item["Id"]: item for item in answer["Successful"]}
    assert set(successful) == {"good", "plain"}
    assert successful["good"]["MD5OfMessageBody"] == md5("g")
    assert successful["good"]["MD5OfMessageAttributes"] == expected_attributes_md5(ATTRIBUTES)
    assert "MD5OfMessageAttributes" not in successful["plain"]
    failed = {item["Id"]: item for item in answer["Failed"]}
    assert failed["empty"]["Code"] == "MissingParameter"
    assert failed["badattr"]["Code"] == "InvalidParameterValue"
    assert failed["dedup"]["Code"] == "InvalidParameterValue"
    assert all(item["SenderFault"] for item in failed.values())


def _send_batch(sqs: Any, url: str, ids: list[str]) -> Any:
    return sqs.send_message_batch(
        QueueUrl=url, Entries=[{"Id": i, "MessageBody": "m"} for i in ids]
    )


def _delete_batch(sqs: Any, url: str, ids: list[str]) -> Any:
    return sqs.delete_message_batch(
        QueueUrl=url, Entries=[{"Id": i, "ReceiptHandle": "h"} for i in ids]
    )


def _change_batch(sqs: Any, url: str, ids: list[str]) -> Any:
    return sqs.change_message_visibility_batch(
        QueueUrl=url,
        Entries=[{"Id": i, "ReceiptHandle": "h", "VisibilityTimeout": 1} for i in ids],
    )


@pytest.mark.parametrize("call", [_send_batch, _delete_batch, _change_batch])
@pytest.mark.parametrize(
    ("ids", "shape"),
    [
        ([], "EmptyBatchRequest"),
        ([f"e{i}" for i in range(11)], "TooManyEntriesInBatchRequest"),
        (["a", "b", "a"], "BatchEntryIdsNotDistinct"),
        (["not ok"], "InvalidBatchEntryId"),
    ],
)
def test_whole_batch_refusals(sqs: Any, call: Any, ids: list[str], shape: str) -> None:
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    with pytest.raises(getattr(sqs.exceptions, shape)) as caught:
        call(sqs, url, ids)
    assert error_of(caught) == (f"AWS.SimpleQueueService.{shape}", shape, 400)


def test_visibility_changes(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    sqs.send_message_batch(
        QueueUrl=url, Entries=[{"Id": "a", "MessageBody": "a"}, {"Id": "b", "MessageBody": "b"}]
    )
    messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    handles = [m["ReceiptHandle"] for m in messages]
    assert len(handles) == 2
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=handles[0], VisibilityTimeout=60)
    answer = sqs.change_message_visibility_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "ok", "ReceiptHandle": handles[0], "VisibilityTimeout": 0},
            {"Id": "long", "ReceiptHandle": handles[1], "VisibilityTimeout": 43_201},
            {"Id": "bogus", "ReceiptHandle": "bogus", "VisibilityTimeout": 5},
        ],
    )
    assert [item["Id"] for item in answer["Successful"]] == ["ok"]
    codes = {item["Id"]: item["Code"] for item in answer["Failed"]}
    assert codes == {"long": "InvalidParameterValue", "bogus": "ReceiptHandleIsInvalid"}

    # Released at visibility 0: its handle no longer names a message in flight.
    with pytest.raises(sqs.exceptions.MessageNotInflight) as caught:
        sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=handles[0], VisibilityTimeout=5)
    assert error_of(caught) == (
        "AWS.SimpleQueueService.MessageNotInflight",
        "MessageNotInflight",
        400,
    )
    with pytest.raises(sqs.exceptions.ReceiptHandleIsInvalid):
        sqs.change_message_visibility(QueueUrl=url, ReceiptHandle="bogus", VisibilityTimeout=5)

    deleted = sqs.delete_message_batch(
        QueueUrl=url,
        Entries=[{"Id": "a", "ReceiptHandle": handles[1]}, {"Id": "b", "ReceiptHandle": "x"}],
    )
    assert [item["Id"] for item in deleted["Successful"]] == ["a"]
    assert [item["Code"] for item in deleted["Failed"]] == ["ReceiptHandleIsInvalid"]


def test_receive_parameters_are_checked(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    for params in (
        {"MaxNumberOfMessages": 11},
        {"MaxNumberOfMessages": 0},
        {"WaitTimeSeconds": 21},
        {"VisibilityTimeout": -1},
    ):
        with pytest.raises(ClientError) as caught:
            sqs.receive_message(QueueUrl=url, **params)
        assert error_of(caught)[0] == "InvalidParameterValue"


def test_over_limit(sqs: Any) -> None:
    # The endpoint fixture allows 3 messages in flight per queue.
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    _send_batch(sqs, url, [f"m{i}" for i in range(5)])
    assert len(sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]) == 3
    with pytest.raises(sqs.exceptions.OverLimit) as caught:
        sqs.receive_message(QueueUrl=url)
    assert error_of(caught) == ("OverLimit", "OverLimit", 403)
    assert "Messages" not in sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1)


def test_fifo_through_the_wire(sqs: Any) -> None:
    url = sqs.create_queue(
        QueueName="jobs.fifo",
        Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"},
    )["QueueUrl"]
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert (attributes["FifoQueue"], attributes["ContentBasedDeduplication"]) == ("true", "true")
    sent = [sqs.send_message(QueueUrl=url, MessageBody=b, MessageGroupId="g") for b in "abc"]
    numbers = [int(s["SequenceNumber"]) for s in sent]
    assert numbers == sorted(numbers) and len(set(numbers)) == 3
    again = sqs.send_message(QueueUrl=url, MessageBody="a", MessageGroupId="g")
    assert again["MessageId"] == sent[0]["MessageId"]
    with pytest.raises(ClientError) as caught:
        sqs.send_message(QueueUrl=url, MessageBody="x")
    assert error_of(caught) == ("MissingParameter", "MissingRequiredParameterException", 400)

    [first] = sqs.receive_message(QueueUrl=url, AttributeNames=["All"])["Messages"]
    assert first["Body"] == "a"
    assert first["Attributes"]["MessageGroupId"] == "g"
    assert first["Attributes"]["SequenceNumber"] == sent[0]["SequenceNumber"]
    assert "Messages" not in sqs.receive_message(QueueUrl=url), "the group is blocked"
    sqs.delete_message(QueueUrl=url, ReceiptHandle=first["ReceiptHandle"])
    rest = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert [m["Body"] for m in rest] == ["b", "c"]


def test_redrive_through_the_wire(sqs: Any) -> None:
    dlq = sqs.create_queue(QueueName="dead")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]
    policy = json.dumps({"deadLetterTargetArn": arn["QueueArn"], "maxReceiveCount": "2"})
    url = sqs.create_queue(QueueName="work", Attributes={"RedrivePolicy": policy})["QueueUrl"]
    stored = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["RedrivePolicy"])
    assert json.loads(stored["Attributes"]["RedrivePolicy"]) == {
        "deadLetterTargetArn": "arn:aws:sqs:us-east-1:000000000000:dead",
        "maxReceiveCount": 2,
    }
    message_id = sqs.send_message(QueueUrl=url, MessageBody="poison")["MessageId"]
    for _ in range(2):
        [message] = sqs.receive_message(QueueUrl=url, VisibilityTimeout=0)["Messages"]
        assert message["MessageId"] == message_id
    assert "Messages" not in sqs.receive_message(QueueUrl=url)
    [dead] = sqs.receive_message(QueueUrl=dlq, AttributeNames=["All"])["Messages"]
    assert (dead["MessageId"], dead["Body"]) == (message_id, "poison")
    assert dead["Attributes"]["ApproximateReceiveCount"] == "3"

    sqs.set_queue_attributes(QueueUrl=url, Attributes={"RedrivePolicy": ""})
    stored = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert "RedrivePolicy" not in stored


# -- the wire itself ------------------------------------------------------------------------


def post(url: str, target: str | None, body: bytes) -> tuple[int, dict[str, str], bytes]:
    headers = {"Content-Type": "application/x-amz-json-1.0"}
    if target is not None:
        headers["X-Amz-Target"] = f"AmazonSQS.{target}"
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


@pytest.mark.parametrize(
    ("target", "body", "status", "shape", "query"),
    [
        ("GetQueueUrl", b'{"QueueName": "nope"}', 400, "QueueDoesNotExist",
         "AWS.SimpleQueueService.NonExistentQueue;Sender"),
        ("SendMessage", b'{"MessageBody": "m"}', 400, "MissingRequiredParameterException",
         "MissingParameter;Sender"),
        ("ListQueues", b'{"MaxResults": 0}', 400, "InvalidParameterValueException",
         "InvalidParameterValue;Sender"),
        ("SendMessage", b'{"QueueUrl": "q", "MessageBody": "m"}', 404, "InvalidAddress",
         "InvalidAddress;Sender"),
        ("ListQueues", b"[]", 400, "SerializationException", "SerializationException;Sender"),
        ("ListQueues", b"{nope", 400, "SerializationException", "SerializationException;Sender"),
        ("DescribeQueue", b"{}", 400, "UnknownOperationException", "InvalidAction;Sender"),
        ("ListQueues", b"[" * 100_000, 400, "SerializationException",
         "SerializationException;Sender"),
    ],
)  # fmt: skip
def test_error_shapes_on_the_wire(
    endpoint: SqsEndpoint, target: str | None, body: bytes, status: int, shape: str, query: str
) -> None:
    got_status, headers, raw = post(endpoint.url, target, body)
    assert got_status == status
    assert headers["Content-Type"] == "application/x-amz-json-1.0"
    assert headers["x-amzn-query-error"] == query
    error = json.loads(raw)
    assert error["__type"] == f"com.amazonaws.sqs#{shape}"
    assert isinstance(error["message"], str)


def test_answers_on_the_wire(endpoint: SqsEndpoint) -> None:
    status, headers, raw = post(endpoint.url, "CreateQueue", b'{"QueueName": "q"}')
    assert (status, json.loads(raw)) == (200, {"QueueUrl": f"{endpoint.url}/000000000000/q"})
    assert headers["x-amzn-RequestId"]
    queue = json.dumps({"QueueUrl": f"{endpoint.url}/000000000000/q"}).encode()
    assert post(endpoint.url, "PurgeQueue", queue)[::2] == (200, b"")
    assert post(endpoint.url, "ReceiveMessage", queue)[::2] == (200, b"{}")
    with urllib.request.urlopen(endpoint.url + "/", timeout=5) as response:
        assert response.status == 200


def test_engine_hooks_from_another_thread(sqs: Any, endpoint: SqsEndpoint) -> None:
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="m")
    counts = endpoint.call(endpoint.engine.counts, "q")
    assert (counts.visible, counts.in_flight, counts.delayed) == (1, 0, 0)


# -- aiobotocore, with the server in the test's event loop ----------------------------------


@asynccontextmanager
async def served() -> AsyncIterator[tuple[Any, MemoryBackend]]:
    """(aiobotocore client, the backend the server uses) for a server in this loop (a
    context manager, not a fixture: a task group must end in the task it began in)."""
    backend = MemoryBackend()
    async with anyio.create_task_group() as tg:
        url = await tg.start(serve_sqs, backend)
        session = AioSession()
        async with session.create_client(
            "sqs", endpoint_url=url, config=_CONFIG, **_CLIENT
        ) as client:
            yield client, backend
        tg.cancel_scope.cancel()
    await backend.aclose()


@pytest.mark.asyncio
async def test_aiobotocore_round_trip() -> None:
    async with served() as (client, _):
        await _round_trip(client)


async def _round_trip(client: Any) -> None:
    url = (await client.create_queue(QueueName="q"))["QueueUrl"]
    entries = [{"Id": f"m{i}", "MessageBody": f"body-{i}"} for i in range(10)]
    sent = await client.send_message_batch(QueueUrl=url, Entries=entries)
    assert len(sent["Successful"]) == 10 and sent["Failed"] == []
    got = (await client.receive_message(QueueUrl=url, MaxNumberOfMessages=10))["Messages"]
    assert sorted(m["Body"] for m in got) == sorted(e["MessageBody"] for e in entries)
    assert all(m["MD5OfBody"] == md5(m["Body"]) for m in got)
    changes = [
        {"Id": f"c{i}", "ReceiptHandle": m["ReceiptHandle"], "VisibilityTimeout": 120}
        for i, m in enumerate(got)
    ]
    changed = await client.change_message_visibility_batch(QueueUrl=url, Entries=changes)
    assert len(changed["Successful"]) == 10
    deletions = [{"Id": f"d{i}", "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)]
    deleted = await client.delete_message_batch(QueueUrl=url, Entries=deletions)
    assert len(deleted["Successful"]) == 10

    with pytest.raises(ClientError) as caught:
        await client.get_queue_url(QueueName="missing")
    assert error_of(caught)[:2] == ("AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist")


@pytest.mark.asyncio
async def test_long_poll_wakes_when_a_message_arrives() -> None:
    async with served() as (client, _):
        await _long_polls(client)


async def _long_polls(client: Any) -> None:
    url = (await client.create_queue(QueueName="q"))["QueueUrl"]
    start = anyio.current_time()
    async with anyio.create_task_group() as tg:

        async def send_later() -> None:
            await anyio.sleep(0.3)
            await client.send_message(QueueUrl=url, MessageBody="late")

        tg.start_soon(send_later)
        with anyio.fail_after(5):
            got = await client.receive_message(QueueUrl=url, WaitTimeSeconds=10)
    elapsed = anyio.current_time() - start
    assert [m["Body"] for m in got["Messages"]] == ["late"]
    assert 0.3 <= elapsed < 2, elapsed

    start = anyio.current_time()
    empty = await client.receive_message(QueueUrl=url, WaitTimeSeconds=1)
    assert "Messages" not in empty
    assert anyio.current_time() - start >= 0.9


@pytest.mark.asyncio
async def test_a_client_that_hangs_up_during_a_long_poll_takes_nothing() -> None:
    async with served() as (client, backend):
        await _hang_up(client, backend)


async def _hang_up(client: Any, backend: MemoryBackend) -> None:
    url = (await client.create_queue(QueueName="q"))["QueueUrl"]
    with anyio.move_on_after(0.3):
        await client.receive_message(QueueUrl=url, WaitTimeSeconds=10)
    await anyio.sleep(0.2)  # the server notices the closed connection and ends the poll
    await client.send_message(QueueUrl=url, MessageBody="m")
    got = await client.receive_message(QueueUrl=url)
    assert [m["Body"] for m in got["Messages"]] == ["m"]
    assert backend.engine.counts("q").in_flight == 1


class _Body:
    """The request body stream, as aiohttp's handler reads it."""

    def __init__(self, raw: bytes) -> None:
        self._raw = raw

    async def read(self, n: int = -1) -> bytes:
        taken, self._raw = (self._raw, b"") if n < 0 else (self._raw[:n], self._raw[n:])
        return taken


@pytest.mark.asyncio
async def test_bound_to_a_wildcard_address_queue_urls_follow_the_request_host() -> None:
    backend = MemoryBackend()
    handler = _Handler(SqsService(backend), None, _Bounds())  # what serve_sqs builds for 0.0.0.0
    headers = {"Host": "sqs.internal:9324", "X-Amz-Target": "AmazonSQS.CreateQueue"}
    body: Any = _Body(b'{"QueueName": "q"}')
    request = make_mocked_request("POST", "/", headers=headers, payload=body)
    response = await handler(request)
    assert isinstance(response, web.Response) and isinstance(response.body, bytes)
    assert json.loads(response.body) == {"QueueUrl": "http://sqs.internal:9324/000000000000/q"}
    await backend.aclose()


def test_stats_count_requests_by_operation(sqs: Any, endpoint: SqsEndpoint) -> None:
    url = sqs.create_queue(QueueName="counted")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="a")
    sqs.send_message(QueueUrl=url, MessageBody="b")
    with pytest.raises(ClientError):
        sqs.get_queue_url(QueueName="missing")  # refused, and counted all the same
    with urllib.request.urlopen(f"{endpoint.url}/_stats", timeout=10) as answer:
        stats = json.load(answer)
    assert stats["requests"] == {"CreateQueue": 1, "SendMessage": 2, "GetQueueUrl": 1}


def test_an_error_repeats_little_of_a_large_bad_input(endpoint: SqsEndpoint) -> None:
    """A 1 MiB queue URL, queue name and attribute name, refused in both protocols and in a
    batch entry: each answer is the right error and a few KiB, not the input again."""
    huge = "a" * (1024 * 1024)
    body = json.dumps({"QueueUrl": huge, "MessageBody": "m"}).encode()
    status, _, raw = post(endpoint.url, "SendMessage", body)
    assert (status, json.loads(raw)["__type"]) == (404, "com.amazonaws.sqs#InvalidAddress")
    assert len(raw) < 2048
    form = urllib.parse.urlencode({"Action": "GetQueueUrl", "QueueName": huge}).encode()
    status, _, raw = post(endpoint.url, None, form)
    assert status == 400 and b"<Code>AWS.SimpleQueueService.NonExistentQueue</Code>" in raw
    assert len(raw) < 2048
    queue = json.loads(post(endpoint.url, "CreateQueue", b'{"QueueName": "echo"}')[2])
    entry = {
        "Id": "e",
        "MessageBody": "m",
        "MessageAttributes": {huge: {"DataType": "String", "StringValue": "v"}},
    }
    batch = json.dumps({**queue, "Entries": [entry]}).encode()
    status, _, raw = post(endpoint.url, "SendMessageBatch", batch)
    [failed] = json.loads(raw)["Failed"]
    assert (status, failed["Id"], failed["Code"]) == (200, "e", "InvalidParameterValue")
    assert len(raw) < 2048
