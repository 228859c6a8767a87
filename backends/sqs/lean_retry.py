"""`StandardRetry`: botocore's `standard` retry mode for the lean path, outside its event system.

The lean path does not emit botocore's `needs-retry` event, so it holds its own instance of
the handler botocore registers for that event in standard mode, built from the same parts
(aiobotocore's `AioRetryHandler`, `AioStandardRetryConditions` with the settings' attempts,
`ExponentialBackoff` with SQS's throttling detector, a `RetryQuota`). Every decision is
therefore botocore's own: which codes are throttling, which statuses and connection errors
are transient, the jittered backoff and its 20 s cap, `x-amz-retry-after`, the retry quota,
and the long-poll rule (a ReceiveMessage refused by an empty quota waits one backoff before
it gives up). Rules this module keeps:
- `delay` answers the pause before the next attempt, or None: give up (raise what failed).
- `succeeded` gives back quota after a 2xx answer, as botocore's `after-call` hook does.
- Only the error path builds botocore's context objects; a 2xx answer costs one call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import anyio
from aiobotocore.retries.standard import (
    AioRetryHandler,
    AioRetryPolicy,
    AioStandardRetryConditions,
)
from botocore.awsrequest import AWSResponse
from botocore.model import OperationModel, ServiceModel
from botocore.retries import quota
from botocore.retries.standard import (
    ExponentialBackoff,
    RetryEventAdapter,
    RetryQuotaChecker,
    ThrottlingErrorDetector,
)

__all__ = ["StandardRetry"]


class StandardRetry:
    """botocore's standard retry decisions for one client's calls (one quota for them all)."""

    def __init__(self, service_model: ServiceModel, max_attempts: int) -> None:
        service_name = service_model.service_id.hyphenize()
        adapter = RetryEventAdapter()
        throttling = ThrottlingErrorDetector(adapter)
        self._quota = RetryQuotaChecker(quota.RetryQuota(), throttling)
        self._handler = AioRetryHandler(
            retry_policy=AioRetryPolicy(
                retry_checker=AioStandardRetryConditions(max_attempts=max_attempts),
                retry_backoff=ExponentialBackoff(
                    service_name=service_name, throttling_detector=throttling
                ),
            ),
            retry_event_adapter=adapter,
            retry_quota=self._quota,
            service_name=service_name,
            sleep=anyio.sleep,
        )
        self._service_model = service_model
        #: Attempts per call, the first included.
        self.max_attempts = max_attempts
        self._operations: dict[str, OperationModel] = {}

    def _operation(self, name: str) -> OperationModel:
        model = self._operations.get(name)
        if model is None:
            model = self._operations[name] = self._service_model.operation_model(name)
        return model

    async def delay(
        self,
        operation: str,
        attempt: int,
        context: dict[str, Any],
        *,
        answer: tuple[int, Mapping[str, str], dict[str, Any]] | None = None,
        exception: Exception | None = None,
    ) -> float | None:
        """The pause before attempt `attempt + 1` of `operation`, or None: give up.

        `answer` is an error answer (status, headers, parsed as `lean_wire.error_answer`);
        `exception` what the transport raised (botocore's exception types). `context` is
        the call's own (it records the quota taken, given back on success)."""
        response = None
        if answer is not None:
            status, headers, parsed = answer
            lowered = {key.lower(): value for key, value in headers.items()}
            response = (AWSResponse("", status, lowered, None), parsed)
        delay = await self._handler.needs_retry(
            response=response,
            attempts=attempt,
            operation=self._operation(operation),
            caught_exception=exception,
            request_dict={"context": context},
        )
        return None if delay is None or delay is False else float(delay)

    def succeeded(self, context: dict[str, Any], status: int) -> None:
        """Give back retry quota after a 2xx answer (botocore's `after-call` hook)."""
        self._quota.release_retry_quota(context, _Status(status))


class _Status:
    """What `RetryQuotaChecker.release_retry_quota` reads of a response."""

    __slots__ = ("status_code",)

    def __init__(self, status_code: int) -> None:
        self.status_code = status_code
