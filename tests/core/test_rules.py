"""`worker.rules`, the one home of SQS's rules on names, ids, bodies and error codes, and the
registry that refuses at import a queue name the backend would refuse."""

from __future__ import annotations

import pytest

from worker import Message, RegistrationError, Worker
from worker.rules import (
    bare_code,
    is_entry_id,
    is_message_text,
    is_queue_name,
    is_url,
    legacy_code,
    queue_name,
    queue_name_in_arn,
)

#: Names by whether SQS accepts them: the suffix `.fifo` counts toward the 80 characters.
GOOD_NAMES = ["a", "Jobs_2-x", "x" * 80, "x" * 75 + ".fifo", "a.fifo"]
BAD_NAMES = ["", "x" * 81, "x" * 76 + ".fifo", ".fifo", "a.b", "a b", "jobs.fifo.fifo", "é"]


async def _noop(message: Message) -> None:
    return None


def test_the_registry_refuses_an_81_character_fifo_name() -> None:
    # Defect: the registry's own pattern allowed 80 characters *and* ".fifo", which SQS refuses.
    name = "x" * 76 + ".fifo"
    assert len(name) == 81
    with pytest.raises(RegistrationError, match=r"counting the '\.fifo'"):
        Worker().handler(name)(_noop)
    with pytest.raises(RegistrationError, match="queue name"):
        Worker().handler(f"https://sqs.eu-west-1.amazonaws.com/123456789012/{name}")(_noop)


@pytest.mark.parametrize("name", GOOD_NAMES)
def test_good_names_are_queue_names_and_register(name: str) -> None:
    assert is_queue_name(name)
    app = Worker()
    app.handler(name)(_noop)
    assert app.registry.queues == [name]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_bad_names_are_not_queue_names_and_do_not_register(name: str) -> None:
    assert not is_queue_name(name)
    app = Worker()
    with pytest.raises(RegistrationError):
        app.handler(name)(_noop)
    assert len(app.registry) == 0


@pytest.mark.parametrize(
    ("queue", "name"),
    [
        ("jobs", "jobs"),
        ("https://sqs.us-east-1.amazonaws.com/123456789012/jobs", "jobs"),
        ("http://127.0.0.1:9324/000000000000/jobs.fifo/", "jobs.fifo"),
        ("http://memory.invalid/000000000000/jobs", "jobs"),
    ],
)
def test_the_name_in_a_name_or_url(queue: str, name: str) -> None:
    assert queue_name(queue) == name
    assert is_url(queue) == (queue != name)


def test_the_name_in_an_arn() -> None:
    assert queue_name_in_arn("arn:aws:sqs:us-east-1:123456789012:jobs-dlq.fifo") == "jobs-dlq.fifo"


def test_a_url_is_http_or_https_only() -> None:
    assert not is_url("s3://bucket/jobs")
    assert queue_name("s3://bucket/jobs") == "s3://bucket/jobs"  # not a name: the caller refuses


@pytest.mark.parametrize(
    ("entry_id", "ok"),
    [
        *[("0", True), ("a-B_9", True), ("x" * 80, True)],
        *[("", False), ("x" * 81, False), ("a.b", False), ("a b", False), ("é", False)],
    ],
)
def test_entry_ids(entry_id: str, ok: bool) -> None:
    assert is_entry_id(entry_id) is ok


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("plain", True),
        ("\t\n\r", True),
        ("\U0001f600 \ud7ff \ue000 \ufffd", True),
        ("", True),  # the characters only: whether it may be empty is the caller's rule
        ("\x00", False),
        ("a\x1fb", False),
        ("\ufffe", False),
        ("\ud800", False),  # a lone surrogate
    ],
)
def test_message_text_is_xml_1_0_characters(text: str, ok: bool) -> None:
    assert is_message_text(text) is ok


def test_legacy_and_bare_codes() -> None:
    assert legacy_code("NonExistentQueue") == "AWS.SimpleQueueService.NonExistentQueue"
    assert legacy_code(legacy_code("OverLimit")) == "AWS.SimpleQueueService.OverLimit"
    assert bare_code("AWS.SimpleQueueService.NonExistentQueue") == "NonExistentQueue"
    assert bare_code("QueueDoesNotExist") == "QueueDoesNotExist"
