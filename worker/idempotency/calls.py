"""One store call: bounded in time, timed, and its failure counted, as a `StoreError`."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

from worker.idempotency.metrics import IdempotencyMetrics
from worker.idempotency.store import StoreError

__all__ = ["store_call"]

T = TypeVar("T")


async def store_call(
    metrics: IdempotencyMetrics,
    operation: str,
    timeout_s: float,
    make: Callable[[], Awaitable[T]],
) -> T:
    """`await make()` within `timeout_s`; any failure of the store is a `StoreError` (also
    an unexpected exception of a store of the user's own: the worker must not go down).

    Latency is real time (perf_counter), whatever clock drives the worker: it measures the
    store, not the schedule.
    """
    started = time.perf_counter()
    try:
        with anyio.fail_after(timeout_s):
            return await make()
    except TimeoutError:
        metrics.store_errors.labels(operation).inc()
        raise StoreError(operation, f"no answer within {timeout_s:g} s") from None
    except StoreError:
        metrics.store_errors.labels(operation).inc()
        raise
    except Exception as error:
        metrics.store_errors.labels(operation).inc()
        raise StoreError(operation, type(error).__name__) from error
    finally:
        metrics.store_seconds.labels(operation).observe(time.perf_counter() - started)
