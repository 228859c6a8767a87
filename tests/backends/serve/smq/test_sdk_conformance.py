"""serve-smq checked by foreign clients: the official SDK (`aliyun-mns-sdk`, module `mns`)
and its `mnscmd` script. Every operation the worker uses, their errors, and batch partial
failures. Skipped, with the reason, where the SDK is not installed."""

from __future__ import annotations

import itertools
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from backends.serve.smq import SmqEndpoint, smq_endpoint_in_thread
from worker.types import QueueSpec, RedrivePolicy

mns_account = pytest.importorskip("mns.account", reason="aliyun-mns-sdk is not installed")
mns_queue = pytest.importorskip("mns.queue")
mns_exception = pytest.importorskip("mns.mns_exception")
mns_property = pytest.importorskip("mns.message_property")

# SDK 1.3.0 marks the queue-depth accessors deprecated (SMQ's console moved them to
# metrics); the endpoint still answers them, and the ops metrics read them.
pytestmark = pytest.mark.filterwarnings("ignore:Call to deprecated function:DeprecationWarning")

_names = itertools.count(1)


@pytest.fixture(scope="module")
def endpoint() -> Iterator[SmqEndpoint]:
    with smq_endpoint_in_thread() as running:
        yield running


def _queue(endpoint: SmqEndpoint, visibility: int = 30, secret: str = "test") -> Any:
    account = mns_account.Account(endpoint.url, "test", secret)
    queue = account.get_queue(f"sdk-{next(_names)}")
    if secret == "test":
        meta = mns_queue.QueueMeta()
        meta.set_visibilitytimeout(visibility)
        queue.create(meta)
    return queue


def _server_error(call: Any, *args: Any, batch: bool = False) -> Any:
    with pytest.raises(mns_exception.MNSServerException) as raised:
        call(*args)
    error = raised.value
    assert error.request_id  # from <Error>, or from x-mns-request-id for a batch's <Errors>
    assert batch or error.host_id  # every <Error> has a HostId
    return error


def test_create_and_attributes_count_active_inactive_and_delayed(endpoint: SmqEndpoint) -> None:
    queue = _queue(endpoint, visibility=45)
    for body, delay in (("a", 0), ("b", 0), ("c", 60)):
        message = mns_queue.Message(body)
        message.set_delayseconds(delay)
        queue.send_message(message)
    queue.receive_message(0)
    attributes = queue.get_attributes()
    assert attributes.visibility_timeout == 45
    assert (attributes.active_messages, attributes.inactive_messages) == (1, 1)
    assert attributes.delay_messages == 1


def test_a_visibility_change_hands_out_a_new_handle_and_retires_the_old(
    endpoint: SmqEndpoint,
) -> None:
    queue = _queue(endpoint)
    queue.send_message(mns_queue.Message("payload"))
    received = queue.receive_message(0)
    # The SDK base64-encodes bodies by default, and decodes them to bytes.
    assert (received.message_body, received.dequeue_count) == (b"payload", 1)
    assert received.first_dequeue_time > 0 and received.enqueue_time > 0
    changed = queue.change_message_visibility(received.receipt_handle, 120)
    assert changed.receipt_handle != received.receipt_handle
    assert int(changed.next_visible_time) > received.next_visible_time
    error = _server_error(queue.change_message_visibility, received.receipt_handle, 60)
    assert error.type == "ReceiptHandleError"
    error = _server_error(queue.delete_message, received.receipt_handle)
    assert error.type == "ReceiptHandleError"
    queue.delete_message(changed.receipt_handle)
    assert _server_error(queue.receive_message, 0).type == "MessageNotExist"


def test_batches_of_16_and_a_batch_delete_failing_in_part(endpoint: SmqEndpoint) -> None:
    queue = _queue(endpoint)
    queue.batch_send_message([mns_queue.Message(str(i)) for i in range(16)])
    received = queue.batch_receive_message(16, 0)
    assert sorted(int(m.message_body) for m in received) == list(range(16))
    handles = [m.receipt_handle for m in received[:15]]
    stale = received[15].receipt_handle
    queue.change_message_visibility(stale, 60)  # retires `stale`
    error = _server_error(queue.batch_delete_message, [*handles, stale], batch=True)
    assert [(e["ReceiptHandle"], e["ErrorCode"]) for e in error.sub_errors] == [
        (stale, "ReceiptHandleError")
    ]
    attributes = queue.get_attributes()
    assert (attributes.active_messages, attributes.inactive_messages) == (0, 1)


def test_peek_changes_neither_visibility_nor_dequeue_count(endpoint: SmqEndpoint) -> None:
    queue = _queue(endpoint)
    queue.batch_send_message([mns_queue.Message(str(i)) for i in range(3)])
    peeked = queue.batch_peek_message(16)
    assert [m.dequeue_count for m in peeked] == [0, 0, 0]
    assert queue.peek_message().dequeue_count == 0
    assert queue.get_attributes().active_messages == 3
    assert [m.dequeue_count for m in queue.batch_receive_message(16, 0)] == [1, 1, 1]


def test_the_dead_letter_policy_moves_a_message_after_its_maximum(endpoint: SmqEndpoint) -> None:
    endpoint.call(endpoint.engine.create_queue, QueueSpec("sdk-dead"))
    spec = QueueSpec("sdk-source", visibility_timeout_s=30, redrive=RedrivePolicy("sdk-dead", 2))
    endpoint.call(endpoint.engine.create_queue, spec)
    account = mns_account.Account(endpoint.url, "test", "test")
    source, dead = account.get_queue("sdk-source"), account.get_queue("sdk-dead")
    source.send_message(mns_queue.Message("poison"))
    for expected in (1, 2):
        received = source.receive_message(0)
        assert received.dequeue_count == expected
        source.change_message_visibility(received.receipt_handle, 1)
        endpoint.call(endpoint.engine.expire, "sdk-source", received.message_id)
    assert _server_error(source.receive_message, 0).type == "MessageNotExist"
    assert dead.receive_message(0).message_body == b"poison"


def test_errors_carry_code_message_request_id_and_host_id(endpoint: SmqEndpoint) -> None:
    missing = mns_account.Account(endpoint.url, "test", "test").get_queue("sdk-missing")
    assert _server_error(missing.receive_message, 0).type == "QueueNotExist"
    wrong = _queue(endpoint, secret="wrong")
    assert _server_error(wrong.get_attributes).type == "SignatureDoesNotMatch"
    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.urlopen(f"{endpoint.url}/queues", timeout=5)  # unsigned
    answer = raised.value
    root = ET.fromstring(answer.read())
    fields = {child.tag.rpartition("}")[2]: child.text for child in root}
    assert (answer.code, fields["Code"]) == (400, "MissingAuthorizationHeader")
    assert fields["RequestId"] == answer.headers["x-mns-request-id"]
    assert fields["Message"] and fields["HostId"]


def _mnscmd(endpoint: SmqEndpoint, home: Path, *args: str) -> dict[str, str]:
    script = shutil.which("mnscmd", path=str(Path(sys.executable).parent))
    if script is None:
        pytest.skip("mnscmd (from aliyun-mns-sdk) is not installed")
    credentials = [f"--mnsendpoint={endpoint.url}", "--accesskeyid=test", "--accesskeysecret=test"]
    done = subprocess.run(
        [sys.executable, script, *args, *credentials],
        capture_output=True,
        text=True,
        timeout=30,
        env={"HOME": str(home), "PATH": "/usr/bin:/bin"},
        check=True,
    )
    # mnscmd prints the SDK's debug blocks first; its answer starts at "<action> succeed!".
    lines = done.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.endswith((" succeed!", " fail!")))
    fields = {k.strip(): v for k, _, v in (line.partition(":") for line in lines[start + 1 :])}
    return {"status": lines[start], **fields}


def test_mnscmd_receive_changevisibility_delete(endpoint: SmqEndpoint, tmp_path: Path) -> None:
    queue = _queue(endpoint)
    queue.set_encoding(False)
    queue.send_message(mns_queue.Message("from the sdk"))
    name = queue.queue_name
    received = _mnscmd(
        endpoint, tmp_path, "receivemessage", f"--queuename={name}", "--base64=False"
    )
    assert received["status"] == "receivemessage succeed!"
    assert (received["MessageBody"], received["DequeueCount"]) == ("from the sdk", "1")
    old = received["ReceiptHandle"]
    changed = _mnscmd(
        endpoint, tmp_path, "changevisibility", f"--queuename={name}", f"--handle={old}", "-v", "60"
    )
    assert changed["status"] == "changevisibility succeed!" and changed["ReceiptHandle"] != old
    refused = _mnscmd(endpoint, tmp_path, "deletemessage", f"--queuename={name}", f"--handle={old}")
    assert refused["status"] == "deletemessage fail!"
    new = changed["ReceiptHandle"]
    deleted = _mnscmd(endpoint, tmp_path, "deletemessage", f"--queuename={name}", f"--handle={new}")
    assert deleted["status"] == "deletemessage succeed!"
    assert queue.get_attributes().inactive_messages == 0


def test_set_attributes_changes_only_what_it_names(endpoint: SmqEndpoint) -> None:
    queue = _queue(endpoint, visibility=45)
    meta = mns_queue.QueueMeta()
    meta.set_delay_seconds(5)
    meta.set_polling_wait_seconds(3)
    queue.set_attributes(meta)
    got = queue.get_attributes()
    assert (got.visibility_timeout, got.delay_seconds, got.polling_wait_seconds) == (45, 5, 3)
    refused = mns_queue.QueueMeta()
    refused.set_visibilitytimeout(43_201)
    assert _server_error(queue.set_attributes, refused).type == "InvalidArgument"
    missing = mns_account.Account(endpoint.url, "test", "test").get_queue("sdk-nowhere")
    assert _server_error(missing.set_attributes, meta).type == "QueueNotExist"


def test_message_properties_come_back_with_every_receive_and_peek(endpoint: SmqEndpoint) -> None:
    property_value = mns_property.MessagePropertyValue
    queue = _queue(endpoint)
    message = mns_queue.Message("with properties")
    message.add_user_property("city", property_value.create_string("hangzhou"))
    message.add_user_property("count", property_value.create_number(42))
    message.add_user_property("urgent", property_value.create_boolean(True))
    message.add_user_property("blob", property_value.create_binary(b"\x00\xff raw"))
    trace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    system = mns_property.MessageSystemPropertyValue.create_string(trace)
    message.add_system_property("traceparent", system)
    queue.send_message(message)
    for got in (queue.peek_message(), queue.batch_peek_message(16)[0], queue.receive_message(0)):
        user = {name: value.get_raw_value() for name, value in got.user_properties.items()}
        assert user == {
            "city": "hangzhou",
            "count": "42",
            "urgent": "true",
            "blob": b"\x00\xff raw",
        }
        types = {name: value.get_data_type() for name, value in got.user_properties.items()}
        assert types == {"city": "STRING", "count": "NUMBER", "urgent": "BOOLEAN", "blob": "BINARY"}
        assert got.system_properties["traceparent"].get_raw_value() == trace
    bad = mns_queue.Message("bad")
    bad.add_user_property(".leading-dot", property_value.create_string("x"))
    assert _server_error(queue.send_message, bad).type == "InvalidArgument"
    too_many = mns_queue.Message("many")
    for i in range(51):
        too_many.add_user_property(f"p{i}", property_value.create_string("x"))
    assert _server_error(queue.send_message, too_many).type == "InvalidArgument"
