"""The query protocol's decoder and encoder on hostile input (pure, no server)."""

from __future__ import annotations

import time
import xml.etree.ElementTree as ET

import pytest

from backends.serve.sqs.errors import SqsError
from backends.serve.sqs.query import decode, encode


def test_a_key_of_a_million_segments_is_refused_at_once() -> None:
    # Once: a 4 MB key "a.a.a...." built two million nested dicts (457 MB, 1.7 s), then
    # ended in a RecursionError answered as a 500.
    form = {"Action": "SendMessage", "a." * 1_000_000 + "a": "x"}
    started = time.perf_counter()
    with pytest.raises(SqsError) as refused:
        decode(form)
    assert refused.value.code == "MalformedQueryString"
    assert time.perf_counter() - started < 0.5


def test_a_deep_but_real_key_still_decodes() -> None:
    form = {
        "Action": "SendMessageBatch",
        "QueueUrl": "http://x/1/q",
        "SendMessageBatchRequestEntry.1.Id": "a",
        "SendMessageBatchRequestEntry.1.MessageBody": "b",
        "SendMessageBatchRequestEntry.1.MessageAttribute.1.Name": "n",
        "SendMessageBatchRequestEntry.1.MessageAttribute.1.Value.DataType": "String",
        "SendMessageBatchRequestEntry.1.MessageAttribute.1.Value.StringValue": "v",
    }
    action, members = decode(form)
    assert action == "SendMessageBatch"
    [entry] = members["Entries"]
    assert entry["MessageAttributes"] == {"n": {"DataType": "String", "StringValue": "v"}}


def test_characters_xml_forbids_never_reach_an_answer() -> None:
    # Once: a tag value with \x01 made every query-protocol ListQueueTags unparseable.
    answer = encode("ListQueueTags", {"Tags": {"k": "a\x01b\x1fc\ufffed"}}, "request-1")
    root = ET.fromstring(answer)  # parses
    assert "a\ufffdb\ufffdc\ufffdd" in ET.tostring(root, encoding="unicode")
