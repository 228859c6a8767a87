"""Errors of SQS's protocols: a whole call refused (`SqsError`) and one batch entry.

The rules kept:

- Errors keep the engine's codes (`worker.errors` carry SQS's legacy spelling, e.g.
  `AWS.SimpleQueueService.NonExistentQueue`). `error_parts` gives the shape name of SQS's
  JSON model, the legacy (query protocol) code and the HTTP status SQS's API reference gives
  (400; 403 for OverLimit, PurgeQueueInProgress, InvalidSecurity and RequestThrottled; 404
  for ReceiptHandleIsInvalid, InvalidAddress and ResourceNotFoundException; 500 for faults of
  this server). The JSON protocol answers `{"__type": "com.amazonaws.sqs#<Shape>",
  "message": ...}` with `x-amzn-query-error: <legacy code>;Sender|Receiver` (from which SDKs
  take the legacy code); the query protocol an `ErrorResponse` with the legacy code. The
  common errors without a shape in the model are named as AWS names them over JSON:
  `InvalidParameterValueException` (legacy `InvalidParameterValue`) and
  `MissingRequiredParameterException` (legacy `MissingParameter`).
- A message repeats at most `backends.serve.echo.MAX_ECHO_CHARS` of the request, whole calls
  and batch entries alike (`bounded`).
- An unknown operation is `UnknownOperationException` over JSON and `InvalidAction` over
  query, as AWS answers them. Requests refused before they are read are 413
  (`RequestEntityTooLarge`) and 408 (`RequestTimeout`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from backends.serve.echo import bounded
from worker.errors import BackendError, FatalBackendError, OverLimit
from worker.rules import bare_code, legacy_code
from worker.types import EntryFailure

__all__ = ["ErrorParts", "SqsError", "entry_failure_to_wire", "error_parts", "render_error"]

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
    # Common errors SQS's model has no shape for: the JSON protocol names them so (AWS's own
    # answers, recorded against SQS by LocalStack's validated snapshots), the legacy code stays.
    "InvalidParameterValue": ("InvalidParameterValueException", "InvalidParameterValue", 400),
    "MissingParameter": ("MissingRequiredParameterException", "MissingParameter", 400),
    "InvalidAddress": ("InvalidAddress", "InvalidAddress", 404),
    "InvalidSecurity": ("InvalidSecurity", legacy_code("InvalidSecurity"), 403),
    "RequestThrottled": ("RequestThrottled", "RequestThrottled", 403),
    "ResourceNotFoundException": ("ResourceNotFoundException", "ResourceNotFoundException", 404),
    "UnknownOperationException": ("UnknownOperationException", "InvalidAction", 400),
    "InvalidAction": ("UnknownOperationException", "InvalidAction", 400),
    "MissingAction": ("MissingAction", "MissingAction", 400),
    "RequestEntityTooLarge": ("RequestEntityTooLarge", "RequestEntityTooLarge", 413),
    "RequestTimeout": ("RequestTimeout", "RequestTimeout", 408),
    "InternalError": ("InternalError", "InternalError", 500),
}


class SqsError(Exception):
    """A whole call refused: `code` in SQS's legacy spelling, `sender_fault` for 4xx."""

    def __init__(self, code: str, message: str, *, sender_fault: bool = True) -> None:
        # A message may quote the request (a queue URL, a name): bounded, never the input whole.
        message = bounded(message)
        super().__init__(message)
        self.code = code
        self.message = message
        self.sender_fault = sender_fault

    @classmethod
    def from_backend(cls, error: BackendError) -> SqsError:
        sender = isinstance(error, FatalBackendError | OverLimit)
        return cls(error.code or "InternalError", str(error), sender_fault=sender)


@dataclass(frozen=True, slots=True)
class ErrorParts:
    """One error as the protocols spell it."""

    #: The shape of SQS's JSON model (`QueueDoesNotExist`).
    shape: str
    #: The query protocol's code (`AWS.SimpleQueueService.NonExistentQueue`).
    legacy: str
    status: int
    #: `Sender` (the client's fault) or `Receiver`.
    fault: str


def error_parts(error: SqsError) -> ErrorParts:
    bare = bare_code(error.code)
    shape, legacy, status = _ERRORS.get(
        bare, (bare, error.code, 400 if error.sender_fault else 500)
    )
    return ErrorParts(shape, legacy, status, "Sender" if status < 500 else "Receiver")


def render_error(error: SqsError) -> tuple[int, str, dict[str, str]]:
    """(HTTP status, `x-amzn-query-error` header, JSON body) for `error`."""
    parts = error_parts(error)
    return (
        parts.status,
        f"{parts.legacy};{parts.fault}",
        {"__type": f"com.amazonaws.sqs#{parts.shape}", "message": error.message},
    )


def entry_failure_to_wire(failure: EntryFailure) -> dict[str, Any]:
    return {
        "Id": failure.entry_id,
        "SenderFault": failure.sender_fault,
        "Code": failure.code,
        "Message": bounded(failure.message),
    }
