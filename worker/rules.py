"""The rules SQS keeps on names, ids, bodies and error codes, each written once.

The registry, the in-memory engine, the SQS client and the SQS endpoint all check these; they
call the functions here and never spell a rule again, so that a name one of them accepts is a
name every one of them accepts.

- A queue name is 1-80 characters of `[A-Za-z0-9_-]`; a FIFO queue's name ends in `.fifo`,
  and the suffix counts toward the 80 (so at most 75 characters come before it).
- A queue is named by its name or by its URL (`http://` or `https://`); the name is the URL's
  last path segment. A queue's ARN (`arn:aws:sqs:<region>:<account>:<name>`), as a redrive
  policy names its dead-letter queue, ends in the name.
- A batch entry id is 1-80 characters of `[A-Za-z0-9_-]`.
- A body, and a String or Number attribute value, holds only characters of XML 1.0: tab, line
  feed, carriage return, U+0020-U+D7FF, U+E000-U+FFFD and U+10000-U+10FFFF.
- What one call may carry is `SQS_LIMITS`: 10 messages a receive or a batch, long polls up
  to 20 s, visibility 0-43,200 s, and at most 12 h invisible counted from the receive.
- SQS's legacy error codes carry the prefix `AWS.SimpleQueueService.` (its JSON protocol may
  report one code with or without it); `bare_code` and `legacy_code` move between the two.
"""

from __future__ import annotations

import re

from worker.backend import Limits

__all__ = [
    "ENTRY_ID_RULE",
    "LEGACY_CODE_PREFIX",
    "QUEUE_NAME_RULE",
    "SMQ_LIMITS",
    "SQS_IN_FLIGHT_LIMIT",
    "SQS_LIMITS",
    "bare_code",
    "is_entry_id",
    "is_message_text",
    "is_queue_name",
    "is_url",
    "legacy_code",
    "queue_name",
    "queue_name_in_arn",
]

#: Messages in flight per queue, standard and FIFO alike (the AWS quota pages; older docs
#: said 20,000 for FIFO). A quota, not a call limit: AWS Support can raise it.
SQS_IN_FLIGHT_LIMIT = 120_000

#: What Amazon SQS allows per call.
SQS_LIMITS = Limits(
    receive_batch=10,
    delete_batch=10,
    extend_batch=10,
    release_batch=10,
    send_batch=10,
    max_wait_s=20,
    min_release_visibility_s=0,
    max_visibility_s=43_200,
    max_lease_s=43_200,
    extension_returns_new_handle=False,
    supports_peek=False,
    cancelled_receive_takes_nothing=False,
)

#: What Alibaba Cloud SMQ allows per call: receive, delete and send 16; one visibility
#: change per call, handing out a new receipt handle; releases to 1 s; 30 s long polls;
#: BatchPeekMessage. SMQ documents no cap counted from the receive: 12 h is the
#: conservative reading (one visibility change may not reach past it either).
SMQ_LIMITS = Limits(
    receive_batch=16,
    delete_batch=16,
    extend_batch=1,
    release_batch=1,
    send_batch=16,
    max_wait_s=30,
    min_release_visibility_s=1,
    max_visibility_s=43_200,
    max_lease_s=43_200,
    extension_returns_new_handle=True,
    supports_peek=True,
    cancelled_receive_takes_nothing=False,
)

#: The queue-name rule in words, for error messages.
QUEUE_NAME_RULE = "1-80 letters, digits, '-' or '_', counting the '.fifo' that ends a FIFO name"
#: The entry-id rule in words, for error messages.
ENTRY_ID_RULE = "1-80 letters, digits, '-' or '_'"
#: The prefix of SQS's legacy error codes (`AWS.SimpleQueueService.NonExistentQueue`).
LEGACY_CODE_PREFIX = "AWS.SimpleQueueService."

# The lookahead bounds the whole name, suffix included.
_QUEUE_NAME = re.compile(r"(?=.{1,80}\Z)[A-Za-z0-9_-]+(\.fifo)?\Z")
_ENTRY_ID = re.compile(r"[A-Za-z0-9_-]{1,80}\Z")
# Negated, so that one search finds the first character SQS refuses.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def is_queue_name(name: str) -> bool:
    """True when SQS accepts `name` as a queue name (a name, not a URL)."""
    return _QUEUE_NAME.match(name) is not None


def is_url(queue: str) -> bool:
    """True when `queue` is a queue URL rather than a name."""
    return queue.startswith(("https://", "http://"))


def queue_name(queue: str) -> str:
    """The name in `queue`, a name or a URL; does not check the name."""
    return queue.rstrip("/").rsplit("/", 1)[-1] if is_url(queue) else queue


def queue_name_in_arn(arn: str) -> str:
    """The name in a queue's ARN; does not check the name."""
    return arn.rsplit(":", 1)[-1]


def is_entry_id(entry_id: str) -> bool:
    """True when SQS accepts `entry_id` as the id of a batch entry."""
    return _ENTRY_ID.match(entry_id) is not None


def is_message_text(text: str) -> bool:
    """True when every character of `text` is one SQS accepts in a body or attribute value.

    Only the characters: an empty `text` passes, and whether it may be empty is the caller's
    rule.
    """
    return _NOT_XML.search(text) is None


def legacy_code(code: str) -> str:
    """`code` in SQS's legacy spelling: `PurgeQueueInProgress` becomes
    `AWS.SimpleQueueService.PurgeQueueInProgress`."""
    return LEGACY_CODE_PREFIX + bare_code(code)


def bare_code(code: str) -> str:
    """`code` without the legacy prefix: `AWS.SimpleQueueService.OverLimit` -> `OverLimit`."""
    return code.removeprefix(LEGACY_CODE_PREFIX)
