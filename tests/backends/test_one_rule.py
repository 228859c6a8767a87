"""Each of SQS's rules on names, ids, bodies and codes has one home (`worker.rules`): the
registry, the in-memory engine, the SQS client and the SQS endpoint answer alike."""

from __future__ import annotations

import pytest

from backends.memory.engine import MemoryEngine
from backends.serve.sqs.errors import SqsError, render_error
from backends.serve.sqs.messages import message_attributes_from_wire
from backends.sqs.errors import check_entry_ids, classify_code
from worker import Message, RegistrationError, Worker
from worker.clock import ManualClock
from worker.errors import FatalBackendError, QueueNotFound
from worker.types import Deletion, OutgoingMessage, QueueSpec

NAMES = ["a", "x" * 80, "x" * 81, "x" * 75 + ".fifo", "x" * 76 + ".fifo", ".fifo", "a.b", ""]
ENTRY_IDS = ["0", "a-B_9", "x" * 80, "x" * 81, "a.b", ""]


async def _noop(message: Message) -> None:
    return None


def _engine() -> MemoryEngine:
    return MemoryEngine(ManualClock(1000.0))


def _registers(name: str) -> bool:
    try:
        Worker().handler(name)(_noop)
    except RegistrationError:
        return False
    return True


def _engine_creates(name: str) -> bool:
    try:
        _engine().create_queue(QueueSpec(name))
    except FatalBackendError as error:
        assert error.code == "InvalidParameterValue"
        return False
    return True


@pytest.mark.parametrize("name", NAMES)
def test_the_registry_and_the_engine_agree_on_queue_names(name: str) -> None:
    assert _registers(name) == _engine_creates(name)


def _engine_takes_id(entry_id: str) -> bool:
    engine = _engine()
    engine.create_queue(QueueSpec("jobs"))
    try:
        engine.delete("jobs", [Deletion(entry_id, "handle")])
    except FatalBackendError as error:
        assert error.code == "AWS.SimpleQueueService.InvalidBatchEntryId"
        return False
    return True


def _client_takes_id(entry_id: str) -> bool:
    try:
        check_entry_ids("DeleteMessageBatch", [entry_id], 10)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize("entry_id", ENTRY_IDS)
def test_the_engine_and_the_sqs_client_agree_on_entry_ids(entry_id: str) -> None:
    assert _engine_takes_id(entry_id) == _client_takes_id(entry_id)


@pytest.mark.parametrize(("text", "ok"), [("caf\u00e9 \U0001f600", True), ("a\x00b", False)])
def test_the_engine_and_the_endpoint_agree_on_text(text: str, ok: bool) -> None:
    engine = _engine()
    engine.create_queue(QueueSpec("jobs"))
    result = engine.send("jobs", [OutgoingMessage(body=text)])
    assert [f.code for f in result.failed] == ([] if ok else ["InvalidMessageContents"])
    attribute = {"a": {"DataType": "String", "StringValue": text}}
    if ok:
        assert message_attributes_from_wire(attribute)["a"].string_value == text
    else:
        with pytest.raises(SqsError):
            message_attributes_from_wire(attribute)


def test_the_engine_s_codes_read_alike_in_the_client_and_the_endpoint() -> None:
    with pytest.raises(QueueNotFound) as caught:
        _engine().queue_info("nope")
    code = caught.value.code
    assert code == "AWS.SimpleQueueService.NonExistentQueue"
    assert classify_code((code,)) is QueueNotFound
    status, header, body = render_error(SqsError.from_backend(caught.value))
    assert (status, header) == (400, "AWS.SimpleQueueService.NonExistentQueue;Sender")
    assert body["__type"] == "com.amazonaws.sqs#QueueDoesNotExist"


def test_the_engine_finds_a_queue_by_any_url_ending_in_its_name() -> None:
    engine = _engine()
    engine.create_queue(QueueSpec("jobs"))
    assert engine.queue_info("https://sqs.us-east-1.amazonaws.com/123456789012/jobs").name == "jobs"
