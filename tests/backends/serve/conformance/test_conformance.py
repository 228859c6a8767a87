"""The conformance cases: each runs over SQS's JSON protocol and over its query protocol
(the `sqs` fixture), against one `serve-sqs` endpoint with SQS's receipt-handle rules.

What a case expects is SQS's documented behaviour: codes as SQS's API reference spells them
(the legacy `AWS.SimpleQueueService.*` codes that both protocols give clients), statuses as
its model gives them.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

import pytest
from botocore.exceptions import ClientError

ARN = "arn:aws:sqs:us-east-1:000000000000:"


def error(call: Any, *args: Any, **kwargs: Any) -> tuple[str, int]:
    """(Code, HTTP status) of the error `call` raises."""
    with pytest.raises(ClientError) as caught:
        call(*args, **kwargs)
    response = caught.value.response
    return response["Error"]["Code"], response["ResponseMetadata"]["HTTPStatusCode"]


def md5(text: str) -> str:
    return hashlib.md5(text.encode(), usedforsecurity=False).hexdigest()


def receive_all(sqs: Any, url: str, count: int, **kwargs: Any) -> list[dict[str, Any]]:
    """Receive until `count` messages came (bounded: a few short polls)."""
    got: list[dict[str, Any]] = []
    for _ in range(20):
        answer = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, **kwargs)
        got.extend(answer.get("Messages", []))
        if len(got) >= count:
            break
    return got


def test_queue_lifecycle(sqs: Any, name: str) -> None:
    url = sqs.create_queue(QueueName=name, Attributes={"VisibilityTimeout": "40"})["QueueUrl"]
    assert url.endswith(f"/000000000000/{name}")
    assert sqs.get_queue_url(QueueName=name)["QueueUrl"] == url
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert attributes["VisibilityTimeout"] == "40"
    assert attributes["MaximumMessageSize"] == "1048576"
    assert attributes["QueueArn"] == ARN + name
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"MaximumMessageSize": "2048"})
    got = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["MaximumMessageSize"])
    assert got["Attributes"] == {"MaximumMessageSize": "2048"}
    assert sqs.list_queues(QueueNamePrefix=name)["QueueUrls"] == [url]
    assert error(sqs.create_queue, QueueName=name, Attributes={"DelaySeconds": "5"}) == (
        "QueueAlreadyExists",
        400,
    )
    sqs.delete_queue(QueueUrl=url)
    assert error(sqs.get_queue_url, QueueName=name) == (
        "AWS.SimpleQueueService.NonExistentQueue",
        400,
    )


def test_bad_queue_attributes(sqs: Any, name: str) -> None:
    assert error(sqs.create_queue, QueueName=name, Attributes={"MaximumMessageSize": "10"}) == (
        "InvalidAttributeValue",
        400,
    )
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    assert error(sqs.get_queue_attributes, QueueUrl=url, AttributeNames=["Nope"]) == (
        "InvalidAttributeName",
        400,
    )


def test_list_queues_pages(sqs: Any, name: str) -> None:
    urls = [sqs.create_queue(QueueName=f"{name}-{i}")["QueueUrl"] for i in range(3)]
    first = sqs.list_queues(QueueNamePrefix=name, MaxResults=2)
    assert first["QueueUrls"] == urls[:2]
    rest = sqs.list_queues(QueueNamePrefix=name, MaxResults=2, NextToken=first["NextToken"])
    assert rest["QueueUrls"] == urls[2:] and "NextToken" not in rest


def test_send_receive_delete(sqs: Any, name: str) -> None:
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    body = "line\r\nnext <&> \u00e9\U0001f600"
    attributes = {
        "s": {"DataType": "String", "StringValue": "v\r"},
        "n": {"DataType": "Number", "StringValue": "1.5"},
        "b": {"DataType": "Binary", "BinaryValue": b"\x00\xff"},
    }
    sent = sqs.send_message(QueueUrl=url, MessageBody=body, MessageAttributes=attributes)
    assert sent["MD5OfMessageBody"] == md5(body)
    [message] = sqs.receive_message(
        QueueUrl=url, AttributeNames=["All"], MessageAttributeNames=["All"]
    )["Messages"]
    assert message["Body"] == body and message["MD5OfBody"] == md5(body)
    assert message["MessageId"] == sent["MessageId"]
    assert message["MessageAttributes"] == attributes
    assert message["MD5OfMessageAttributes"] == sent["MD5OfMessageAttributes"]
    assert message["Attributes"]["ApproximateReceiveCount"] == "1"
    sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    # SQS: a second delete with a used handle succeeds on a standard queue.
    sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    assert error(sqs.delete_message, QueueUrl=url, ReceiptHandle="never-issued") == (
        "ReceiptHandleIsInvalid",
        404,
    )
    assert sqs.receive_message(QueueUrl=url).get("Messages", []) == []


def test_message_size_limits(sqs: Any, name: str) -> None:
    url = sqs.create_queue(QueueName=name, Attributes={"MaximumMessageSize": "1024"})["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="x" * 1024)
    assert error(sqs.send_message, QueueUrl=url, MessageBody="x" * 1025) == (
        "InvalidParameterValue",
        400,
    )
    batch = sqs.send_message_batch(
        QueueUrl=url,
        Entries=[{"Id": "ok", "MessageBody": "x"}, {"Id": "big", "MessageBody": "x" * 1025}],
    )
    assert [e["Id"] for e in batch["Successful"]] == ["ok"]
    assert [(f["Id"], f["Code"]) for f in batch["Failed"]] == [("big", "InvalidParameterValue")]
    big = sqs.create_queue(QueueName=f"{name}-big")["QueueUrl"]
    assert error(sqs.send_message, QueueUrl=big, MessageBody="x" * (1024 * 1024 + 1)) == (
        "InvalidParameterValue",
        400,
    )
    entries = [{"Id": f"e{i}", "MessageBody": "x" * 300_000} for i in range(4)]
    assert error(sqs.send_message_batch, QueueUrl=big, Entries=entries) == (
        "AWS.SimpleQueueService.BatchRequestTooLong",
        400,
    )


def test_batches(sqs: Any, name: str) -> None:
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    sent = sqs.send_message_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "a", "MessageBody": "a"},
            {"Id": "b", "MessageBody": "b", "DelaySeconds": 901},
        ],
    )
    assert [e["Id"] for e in sent["Successful"]] == ["a"]
    assert [(f["Id"], f["Code"], f["SenderFault"]) for f in sent["Failed"]] == [
        ("b", "InvalidParameterValue", True)
    ]
    [message] = receive_all(sqs, url, 1)
    handle = message["ReceiptHandle"]
    changed = sqs.change_message_visibility_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "ok", "ReceiptHandle": handle, "VisibilityTimeout": 60},
            {"Id": "bad", "ReceiptHandle": "never-issued", "VisibilityTimeout": 60},
        ],
    )
    assert [e["Id"] for e in changed["Successful"]] == ["ok"]
    assert [f["Code"] for f in changed["Failed"]] == ["ReceiptHandleIsInvalid"]
    deleted = sqs.delete_message_batch(
        QueueUrl=url,
        Entries=[{"Id": "ok", "ReceiptHandle": handle}, {"Id": "bad", "ReceiptHandle": "nope"}],
    )
    assert [e["Id"] for e in deleted["Successful"]] == ["ok"]
    assert [f["Code"] for f in deleted["Failed"]] == ["ReceiptHandleIsInvalid"]
    for entries, code in [
        ([], "EmptyBatchRequest"),
        ([{"Id": "x", "MessageBody": "m"}] * 2, "BatchEntryIdsNotDistinct"),
        ([{"Id": f"e{i}", "MessageBody": "m"} for i in range(11)], "TooManyEntriesInBatchRequest"),
        ([{"Id": "bad id", "MessageBody": "m"}], "InvalidBatchEntryId"),
    ]:
        got = error(sqs.send_message_batch, QueueUrl=url, Entries=entries)
        assert got == (f"AWS.SimpleQueueService.{code}", 400)


def test_visibility(sqs: Any, name: str) -> None:
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="m")
    [message] = receive_all(sqs, url, 1)
    handle = message["ReceiptHandle"]
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=0)
    assert error(
        sqs.change_message_visibility, QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=5
    ) == ("AWS.SimpleQueueService.MessageNotInflight", 400)
    assert error(
        sqs.change_message_visibility, QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=43_201
    ) == ("InvalidParameterValue", 400)
    [again] = receive_all(sqs, url, 1, AttributeNames=["ApproximateReceiveCount"])
    assert again["Attributes"] == {"ApproximateReceiveCount": "2"}


def test_purge(sqs: Any, name: str) -> None:
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="m")
    sqs.purge_queue(QueueUrl=url)
    assert error(sqs.purge_queue, QueueUrl=url) == (
        "AWS.SimpleQueueService.PurgeQueueInProgress",
        403,
    )
    assert sqs.receive_message(QueueUrl=url).get("Messages", []) == []


def test_fifo(sqs: Any, name: str) -> None:
    attributes = {"FifoQueue": "true", "ContentBasedDeduplication": "true"}
    url = sqs.create_queue(QueueName=f"{name}.fifo", Attributes=attributes)["QueueUrl"]
    first = sqs.send_message(QueueUrl=url, MessageBody="a", MessageGroupId="g")
    again = sqs.send_message(QueueUrl=url, MessageBody="a", MessageGroupId="g")
    assert again["MessageId"] == first["MessageId"] and first["SequenceNumber"]
    sqs.send_message(QueueUrl=url, MessageBody="b", MessageGroupId="g")
    got = sqs.receive_message(
        QueueUrl=url, MaxNumberOfMessages=10, ReceiveRequestAttemptId="try-1"
    )["Messages"]
    assert [m["Body"] for m in got] == ["a", "b"]
    # A retried receive with the same attempt id gets the same messages and handles.
    retried = sqs.receive_message(
        QueueUrl=url, MaxNumberOfMessages=10, ReceiveRequestAttemptId="try-1"
    )["Messages"]
    assert [m["ReceiptHandle"] for m in retried] == [m["ReceiptHandle"] for m in got]
    assert sqs.receive_message(QueueUrl=url).get("Messages", []) == []  # the group is held
    handle = got[0]["ReceiptHandle"]
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=0)
    # SQS refuses a FIFO delete with an expired handle.
    assert error(sqs.delete_message, QueueUrl=url, ReceiptHandle=handle) == (
        "InvalidParameterValue",
        400,
    )
    assert error(sqs.send_message, QueueUrl=url, MessageBody="c") == ("MissingParameter", 400)


@pytest.mark.parametrize("attempt", ["a" * 129, "", "two words", "caf\u00e9"])
def test_a_fifo_receive_attempt_id_is_1_to_128_printable_ascii(
    sqs: Any, name: str, attempt: str
) -> None:
    attributes = {"FifoQueue": "true", "ContentBasedDeduplication": "true"}
    url = sqs.create_queue(QueueName=f"{name}.fifo", Attributes=attributes)["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="a", MessageGroupId="g")
    refused = error(sqs.receive_message, QueueUrl=url, ReceiveRequestAttemptId=attempt)
    assert refused == ("InvalidParameterValue", 400)
    longest = "!~" * 64  # 128 characters, the first and last printable ASCII
    [got] = sqs.receive_message(QueueUrl=url, ReceiveRequestAttemptId=longest)["Messages"]
    assert got["Body"] == "a"


def test_sse_sqs_is_on_by_default_and_settable(sqs: Any, name: str) -> None:
    def sse(url: str) -> str:
        got = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["SqsManagedSseEnabled"])
        value: str = got["Attributes"]["SqsManagedSseEnabled"]
        return value

    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    assert sse(url) == "true"
    # The default is the queue's value: asking for it again is the same queue.
    same = sqs.create_queue(QueueName=name, Attributes={"SqsManagedSseEnabled": "true"})
    assert same["QueueUrl"] == url
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"SqsManagedSseEnabled": "false"})
    assert sse(url) == "false"
    refused = error(
        sqs.set_queue_attributes, QueueUrl=url, Attributes={"SqsManagedSseEnabled": "yes"}
    )
    assert refused == ("InvalidAttributeValue", 400)
    kms = sqs.create_queue(QueueName=f"{name}-kms", Attributes={"KmsMasterKeyId": "alias/aws/sqs"})
    assert sse(kms["QueueUrl"]) == "false"


def test_trace_header(sqs: Any, name: str) -> None:
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    trace = "Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=1"
    system = {"AWSTraceHeader": {"DataType": "String", "StringValue": trace}}
    sent = sqs.send_message(QueueUrl=url, MessageBody="m", MessageSystemAttributes=system)
    assert len(sent["MD5OfMessageSystemAttributes"]) == 32
    [message] = receive_all(sqs, url, 1, AttributeNames=["All"])
    assert message["Attributes"]["AWSTraceHeader"] == trace


def test_tags(sqs: Any, name: str) -> None:
    url = sqs.create_queue(QueueName=name, tags={"team": "a"})["QueueUrl"]
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"team": "a"}
    sqs.tag_queue(QueueUrl=url, Tags={"env": "test", "team": "b"})
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"team": "b", "env": "test"}
    sqs.untag_queue(QueueUrl=url, TagKeys=["team", "absent"])
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"env": "test"}
    too_many = {f"k{i}": "v" for i in range(50)}
    assert error(sqs.tag_queue, QueueUrl=url, Tags=too_many) == ("InvalidParameterValue", 400)


def test_permissions(sqs: Any, name: str) -> None:
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    grant = {"AWSAccountIds": ["111122223333"], "Actions": ["SendMessage"]}
    sqs.add_permission(QueueUrl=url, Label="send", **grant)
    assert error(sqs.add_permission, QueueUrl=url, Label="send", **grant) == (
        "InvalidParameterValue",
        400,
    )
    sqs.remove_permission(QueueUrl=url, Label="send")
    assert error(sqs.remove_permission, QueueUrl=url, Label="send") == (
        "InvalidParameterValue",
        400,
    )


def _dead_lettered(sqs: Any, name: str, count: int) -> tuple[str, str, list[str]]:
    """A source queue whose `count` messages went to its DLQ; (source, dlq, message ids)."""
    dlq = sqs.create_queue(QueueName=f"{name}-dlq")["QueueUrl"]
    policy = f'{{"deadLetterTargetArn": "{ARN}{name}-dlq", "maxReceiveCount": 1}}'
    source = sqs.create_queue(QueueName=name, Attributes={"RedrivePolicy": policy})["QueueUrl"]
    sent = sqs.send_message_batch(
        QueueUrl=source, Entries=[{"Id": f"e{i}", "MessageBody": f"m{i}"} for i in range(count)]
    )
    assert len(receive_all(sqs, source, count, VisibilityTimeout=0)) == count
    # Each was received once and is visible again: the next receive dead-letters them.
    assert sqs.receive_message(QueueUrl=source, MaxNumberOfMessages=10).get("Messages", []) == []
    return source, dlq, [entry["MessageId"] for entry in sent["Successful"]]


def test_dead_letters_and_a_move_back(sqs: Any, name: str) -> None:
    source, dlq, ids = _dead_lettered(sqs, name, 3)
    assert sqs.list_dead_letter_source_queues(QueueUrl=dlq)["queueUrls"] == [source]
    dead = receive_all(sqs, dlq, 3, AttributeNames=["All"], VisibilityTimeout=0)
    assert sorted(m["MessageId"] for m in dead) == sorted(ids)
    assert {m["Attributes"]["DeadLetterQueueSourceArn"] for m in dead} == {ARN + name}
    handle = sqs.start_message_move_task(SourceArn=ARN + f"{name}-dlq")["TaskHandle"]
    assert handle
    [task] = sqs.list_message_move_tasks(SourceArn=ARN + f"{name}-dlq")["Results"]
    assert task["Status"] == "COMPLETED" and "TaskHandle" not in task
    assert (
        task["ApproximateNumberOfMessagesMoved"],
        task["ApproximateNumberOfMessagesToMove"],
    ) == (3, 3)
    moved = receive_all(sqs, source, 3)
    assert sorted(m["Body"] for m in moved) == ["m0", "m1", "m2"]
    assert not {m["MessageId"] for m in moved} & set(ids)  # new MessageIds


def test_a_rate_limited_move_can_be_cancelled(sqs: Any, name: str) -> None:
    _dead_lettered(sqs, name, 3)
    dlq_arn = ARN + f"{name}-dlq"
    destination = sqs.create_queue(QueueName=f"{name}-back")["QueueUrl"]
    started = time.time()
    handle = sqs.start_message_move_task(
        SourceArn=dlq_arn, DestinationArn=ARN + f"{name}-back", MaxNumberOfMessagesPerSecond=1
    )["TaskHandle"]
    [task] = sqs.list_message_move_tasks(SourceArn=dlq_arn, MaxResults=10)["Results"]
    assert (task["Status"], task["TaskHandle"]) == ("RUNNING", handle)
    assert task["DestinationArn"] == ARN + f"{name}-back"
    assert task["MaxNumberOfMessagesPerSecond"] == 1
    assert abs(task["StartedTimestamp"] / 1000 - started) < 5
    assert error(sqs.start_message_move_task, SourceArn=dlq_arn) == ("InvalidParameterValue", 400)
    moved = sqs.cancel_message_move_task(TaskHandle=handle)["ApproximateNumberOfMessagesMoved"]
    assert moved < 3  # one a second: the test took less than 3 s
    [task] = sqs.list_message_move_tasks(SourceArn=dlq_arn)["Results"]
    assert task["Status"] == "CANCELLED"
    assert error(sqs.cancel_message_move_task, TaskHandle=handle) == (
        "ResourceNotFoundException",
        404,
    )
    assert len(receive_all(sqs, destination, moved)) == moved


def test_move_task_refusals(sqs: Any, name: str) -> None:
    sqs.create_queue(QueueName=name)
    assert error(sqs.start_message_move_task, SourceArn=ARN + name) == (
        "InvalidParameterValue",
        400,
    )
    assert error(sqs.list_message_move_tasks, SourceArn=ARN + f"{name}-absent") == (
        "ResourceNotFoundException",
        404,
    )
