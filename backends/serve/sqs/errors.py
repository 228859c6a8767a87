"""Errors in SQS's JSON protocol: a whole call refused (`SqsError`) and one batch entry.

Part of SQS's JSON protocol (`backends.serve.sqs.protocol`); the rule kept:

- Errors keep the engine's codes (`worker.errors` carry SQS's legacy spelling, e.g.
  `AWS.SimpleQueueService.NonExistentQueue`). `render_error` gives SQS's JSON error:
  `{"__type": "com.amazonaws.sqs#<Shape>", "message": ...}`, the
  `x-amzn-query-error: <legacy code>;Sender|Receiver` header from which SDKs take the legacy
  code, and the status SQS's model gives the shape (400; 403 for OverLimit and
  PurgeQueueInProgress; 404 for ReceiptHandleIsInvalid and InvalidAddress; 500 for faults of
  this server).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from worker.errors import BackendError, FatalBackendError, OverLimit
from worker.rules import bare_code, legacy_code
from worker.types import EntryFailure

__all__ = ["SqsError", "entry_failure_to_wire", "render_error"]

#: Legacy code without prefix -> (shape of SQS's model, legacy code, HTTP status).
_ERRORS: Mapping[str, tuple[str, str, int]] = {
    "NonExistentQueue": ("QueueDoesNotExist", legacy_code("NonExistentQueue"), 400),
    "QueueDoesNotExist": ("QueueDoesNotExist", legacy_code("NonExistentQueue"), 400),
    "QueueAlreadyExists": ("QueueNameExists", "QueueAlreadyExists", 400),
    "QueueDeletedRecently": ("QueueDeletedRecently", legacy_code("QueueDeletedRecently"), 400),
    "PurgeQueueInProgress": ("PurgeQueueInProgress", legacy_code("PurgeQueueInProgress"), 403),
    "OverLimit": ("OverLimit", "OverLimit", 403),
    "ReceiptHandleIsInvalid": ("ReceiptHandleIsInvalid", "ReceiptHandleIsInvalid", 404),
    "MessageNotInflight": ("MessageNotInflight", legacy_code("MessageNotInflight"), 400),
    "EmptyBatchRequest": ("EmptyBatchRequest", legacy_code("EmptyBatchRequest"), 400),
    "InvalidBatchEntryId": ("InvalidBatchEntryId", legacy_code("InvalidBatchEntryId"), 400),
    "BatchRequestTooLong": ("BatchRequestTooLong", legacy_code("BatchRequestTooLong"), 400),
    "BatchEntryIdsNotDistinct": (
        "BatchEntryIdsNotDistinct",
        legacy_code("BatchEntryIdsNotDistinct"),
        400,
    ),
    "TooManyEntriesInBatchRequest": (
        "TooManyEntriesInBatchRequest",
        legacy_code("TooManyEntriesInBatchRequest"),
        400,
    ),
    "UnsupportedOperation": ("UnsupportedOperation", legacy_code("UnsupportedOperation"), 400),
    "InvalidAddress": ("InvalidAddress", "InvalidAddress", 404),
    "InternalError": ("InternalError", "InternalError", 500),
}


class SqsError(Exception):
    """A whole call refused: `code` in SQS's legacy spelling, `sender_fault` for 4xx."""

    def __init__(self, code: str, message: str, *, sender_fault: bool = True) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.sender_fault = sender_fault

    @classmethod
    def from_backend(cls, error: BackendError) -> SqsError:
        sender = isinstance(error, FatalBackendError | OverLimit)
        return cls(error.code or "InternalError", str(error), sender_fault=sender)


def render_error(error: SqsError) -> tuple[int, str, dict[str, str]]:
    """(HTTP status, `x-amzn-query-error` header, JSON body) for `error`."""
    bare = bare_code(error.code)
    shape, legacy, status = _ERRORS.get(
        bare, (bare, error.code, 400 if error.sender_fault else 500)
    )
    fault = "Sender" if status < 500 else "Receiver"
    return (
        status,
        f"{legacy};{fault}",
        {"__type": f"com.amazonaws.sqs#{shape}", "message": error.message},
    )


def entry_failure_to_wire(failure: EntryFailure) -> dict[str, Any]:
    return {
        "Id": failure.entry_id,
        "SenderFault": failure.sender_fault,
        "Code": failure.code,
        "Message": failure.message,
    }
