"""What SQS refuses: calls checked before they leave, and botocore's exceptions mapped onto the
`worker.errors` tree after. Only SQS code imports this.

Before a call, a batch with more entries than `Limits` allows, repeated entry ids, an entry id
SQS would reject, or a visibility or wait out of range is a `ValueError` (a caller's bug, not
the service's answer): the call never leaves.

After a call, the rules, in the order they are tried:

1. A `ClientError` is classified by its error code. SQS speaks JSON but is query-compatible,
   so botocore may report either spelling of one code (`AWS.SimpleQueueService.NonExistentQueue`
   as `Code` with `QueueDoesNotExist` as `QueryErrorCode`, or the plain one alone); both are
   looked up.
   - throttling codes (botocore's standard retry list plus SQS's own) -> `TransientBackendError`
   - `OverLimit` -> `OverLimit`
   - a missing queue -> `QueueNotFound`
   - credentials refused -> `AccessDenied`
   - any other code with an HTTP status >= 500, or a server-side code -> `TransientBackendError`
   - anything else -> `FatalBackendError`
2. Missing or partial credentials -> `AccessDenied`.
3. Timeouts, refused or reset connections (botocore's, aiohttp's, the OS's) ->
   `TransientBackendError`; but a failed TLS validation is `FatalBackendError`. An answer
   that does not parse (`ResponseParserError`: a proxy's page, a cut body) is
   `TransientBackendError` too: the next call may well be read, and a worker that stopped
   on one garbled answer would stop for a glitch.
4. A redirect (`backends.sqs.redirects.RedirectRefused`, never followed: its message names
   the endpoint) and any other botocore error -> `FatalBackendError`.
5. Anything else (our own `ValueError`, cancellation, bugs) is not mapped: `None`.

Every mapped error reads as one line: ``ReceiveMessage on queue 'jobs' failed (RequestThrottled):
Rate exceeded`` and carries `operation`, `queue` and `code`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import aiohttp
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    CredentialRetrievalError,
    HTTPClientError,
    NoCredentialsError,
    PartialCredentialsError,
    SSLError,
)
from botocore.exceptions import ConnectionError as BotoConnectionError
from botocore.parsers import ResponseParserError

from worker.backend import Limits
from worker.errors import (
    AccessDenied,
    BackendError,
    FatalBackendError,
    OverLimit,
    QueueNotFound,
    TransientBackendError,
)
from worker.rules import ENTRY_ID_RULE, bare_code, is_entry_id

__all__ = ["check_entry_ids", "check_receive", "check_visibility", "classify_code", "map_error"]

_MAX_DETAIL = 300

_THROTTLING = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestThrottledException",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "BandwidthLimitExceeded",
        "SlowDown",
        "PriorRequestNotComplete",
        "KmsThrottled",
        "KMS.ThrottlingException",
    }
)
_SERVER_SIDE = frozenset(
    {
        "ServiceUnavailable",
        "InternalError",
        "InternalFailure",
        "InternalServerError",
        "RequestTimeout",
        "RequestTimeoutException",
    }
)
_OVER_LIMIT = frozenset({"OverLimit"})
_NOT_FOUND = frozenset({"QueueDoesNotExist", "NonExistentQueue"})
_DENIED = frozenset(
    {
        "AccessDenied",
        "AccessDeniedException",
        "InvalidClientTokenId",
        "SignatureDoesNotMatch",
        "UnrecognizedClientException",
        "InvalidSecurity",
        "MissingAuthenticationToken",
        "IncompleteSignature",
        "ExpiredToken",
        "ExpiredTokenException",
        "KmsAccessDenied",
        "KMS.AccessDeniedException",
    }
)


def classify_code(codes: tuple[str, ...], status: int | None = None) -> type[BackendError]:
    """The error class for a service error with these codes (any spelling) and HTTP status."""
    bare = {bare_code(code) for code in codes if code}
    if bare & _THROTTLING:
        return TransientBackendError
    if bare & _OVER_LIMIT:
        return OverLimit
    if bare & _NOT_FOUND:
        return QueueNotFound
    if bare & _DENIED:
        return AccessDenied
    if bare & _SERVER_SIDE or (status is not None and status >= 500):
        return TransientBackendError
    return FatalBackendError


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= _MAX_DETAIL else line[: _MAX_DETAIL - 3] + "..."


def _build(
    cls: type[BackendError], *, operation: str, queue: str, code: str, detail: str
) -> BackendError:
    where = f"{operation} on queue {queue!r}" if queue else operation
    message = f"{where} failed ({code})"
    if detail:
        message = f"{message}: {_one_line(detail)}"
    return cls(message, operation=operation, queue=queue, code=code)


def _from_client_error(exc: ClientError, *, operation: str, queue: str) -> BackendError:
    response: dict[str, Any] = getattr(exc, "response", None) or {}
    error: dict[str, Any] = response.get("Error") or {}
    metadata: dict[str, Any] = response.get("ResponseMetadata") or {}
    code = str(error.get("Code") or "Unknown")
    query_code = str(error.get("QueryErrorCode") or "")
    status = metadata.get("HTTPStatusCode")
    cls = classify_code((code, query_code), status if isinstance(status, int) else None)
    detail = str(error.get("Message") or "")
    return _build(cls, operation=operation, queue=queue, code=code, detail=detail)


def _class_for_exception(exc: BaseException) -> type[BackendError] | None:
    if isinstance(exc, NoCredentialsError | PartialCredentialsError | CredentialRetrievalError):
        return AccessDenied
    if isinstance(exc, SSLError):
        return FatalBackendError
    if isinstance(exc, ResponseParserError):
        return TransientBackendError
    if isinstance(exc, BotoConnectionError | HTTPClientError | aiohttp.ClientError):
        return TransientBackendError
    if isinstance(exc, TimeoutError | ConnectionError):  # the builtin: reset, refused, aborted
        return TransientBackendError
    if isinstance(exc, BotoCoreError):
        return FatalBackendError
    return None


def map_error(exc: BaseException, *, operation: str, queue: str = "") -> BackendError | None:
    """The `worker.errors` exception for `exc`, raised by `operation` on `queue`; None if
    `exc` is not a service or transport failure (let it propagate unchanged)."""
    if isinstance(exc, BackendError):
        return None
    if isinstance(exc, ClientError):
        return _from_client_error(exc, operation=operation, queue=queue)
    cls = _class_for_exception(exc)
    if cls is None:
        return None
    return _build(cls, operation=operation, queue=queue, code=type(exc).__name__, detail=str(exc))


def check_entry_ids(operation: str, ids: Sequence[str], limit: int) -> None:
    if len(ids) > limit:
        raise ValueError(f"{operation}: {len(ids)} entries, at most {limit} per call")
    if len(set(ids)) != len(ids):
        raise ValueError(f"{operation}: entry ids must be distinct, got {sorted(ids)}")
    for entry_id in ids:
        if not is_entry_id(entry_id):
            raise ValueError(f"{operation}: entry id {entry_id!r} must be {ENTRY_ID_RULE}")


def check_visibility(operation: str, visibility_s: int, limits: Limits) -> None:
    if not 0 <= visibility_s <= limits.max_visibility_s:
        raise ValueError(
            f"{operation}: visibility {visibility_s} s outside 0..{limits.max_visibility_s}"
        )


def check_receive(limits: Limits, *, max_messages: int, wait_s: float) -> None:
    if not 1 <= max_messages <= limits.receive_batch:
        raise ValueError(
            f"ReceiveMessage: max_messages={max_messages} outside 1..{limits.receive_batch}"
        )
    if not 0 <= wait_s <= limits.max_wait_s:
        raise ValueError(f"ReceiveMessage: wait_s={wait_s} outside 0..{limits.max_wait_s}")
