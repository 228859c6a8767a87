"""A queue's tags and permissions, and the rules SQS keeps on them (pure checks).

- Tags: at most 50 per queue; a key is 1-128 characters and does not start with `aws:`, a
  value 0-256 characters. Tagging an existing key replaces its value; untagging a key that
  is not there is not an error (as on SQS).
- Permissions (AddPermission): a label of 1-80 letters, digits, `-` or `_`, unique on its
  queue; one or more account ids of 12 digits; 1-7 actions among SQS's shared ones (`*`,
  SendMessage, ReceiveMessage, DeleteMessage, ChangeMessageVisibility, GetQueueAttributes,
  GetQueueUrl). They are stored and reported back; nothing is authorised by them here.
  RemovePermission of a label that is not there is refused.

A refusal is `InvalidParameterValue` with the reason, as SQS answers these.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from backends.memory.rules import fail

__all__ = ["MAX_TAGS", "Permission", "check_permission", "check_tags"]

MAX_TAGS = 50
_LABEL = re.compile(r"[A-Za-z0-9_-]{1,80}\Z")
_ACCOUNT = re.compile(r"[0-9]{12}\Z")
_ACTIONS = frozenset(
    {
        "*", "SendMessage", "ReceiveMessage", "DeleteMessage", "ChangeMessageVisibility",
        "GetQueueAttributes", "GetQueueUrl",
    }
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Permission:
    """One AddPermission grant: who (account ids) may do what (action names)."""

    accounts: tuple[str, ...]
    actions: tuple[str, ...]


def check_tags(
    queue: str, operation: str, current: Mapping[str, str], new: Mapping[str, str]
) -> None:
    for key, value in new.items():
        if not 1 <= len(key) <= 128 or key.lower().startswith("aws:"):
            fail(operation, queue, "InvalidParameterValue", "a tag key is 1-128 characters")
        if len(value) > 256:
            fail(operation, queue, "InvalidParameterValue", "a tag value is 0-256 characters")
    if len({**current, **new}) > MAX_TAGS:
        fail(operation, queue, "InvalidParameterValue", f"Too many tags (at most {MAX_TAGS})")


def check_permission(
    queue: str, label: str, accounts: Sequence[str], actions: Sequence[str]
) -> Permission:
    operation = "AddPermission"
    if not _LABEL.match(label):
        fail(operation, queue, "InvalidParameterValue", "a label is 1-80 of [A-Za-z0-9_-]")
    if not accounts or not all(_ACCOUNT.match(account) for account in accounts):
        fail(operation, queue, "InvalidParameterValue", "account ids are 12 digits")
    if not 1 <= len(actions) <= 7 or not set(actions) <= _ACTIONS:
        fail(operation, queue, "InvalidParameterValue", "1-7 actions among SQS's shared ones")
    return Permission(tuple(accounts), tuple(actions))
