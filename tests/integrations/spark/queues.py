"""Queues for the Spark tests: the in-memory engine behind its SQS endpoint on loopback.

Spark's Python processes (the source's runner, the executors' workers) are other processes:
they reach the engine through its SQS wire protocol with the real SQS backend, while the
test reads the engine's exact counts directly.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import cast

from backends.memory import MemoryBackend
from backends.serve.sqs import SqsEndpoint
from backends.sqs import SqsBackend, SqsSettings
from worker.backend import Backend, Limits
from worker.integrations.spark.holder import BackendConnect
from worker.types import BatchResult, EntryFailure, OutgoingMessage, QueueSpec


async def connect_endpoint(url: str) -> Backend:
    settings = SqsSettings(
        endpoint_url=url,
        region="us-east-1",
        access_key_id="testing",
        secret_access_key="testing",
        max_attempts=2,
    )
    return await SqsBackend.connect(settings)


def connector(endpoint: SqsEndpoint) -> BackendConnect:
    """A picklable way for Spark's processes to open a backend on `endpoint`."""
    return functools.partial(connect_endpoint, endpoint.url)


def create(endpoint: SqsEndpoint, spec: QueueSpec) -> None:
    async def run() -> None:
        await MemoryBackend(endpoint.engine).create_queue(spec)

    endpoint.portal.call(run)


def send(endpoint: SqsEndpoint, queue: str, bodies: Sequence[str]) -> list[str]:
    """Send `bodies` in batches of ten; the message ids, in order."""

    async def run() -> list[str]:
        backend, ids = MemoryBackend(endpoint.engine), list[str]()
        for start in range(0, len(bodies), 10):
            chunk = bodies[start : start + 10]
            batch = [OutgoingMessage(body=b, entry_id=str(i)) for i, b in enumerate(chunk)]
            result = await backend.send(queue, batch)
            assert not result.failed, result.failed
            ids.extend(result.message_ids[str(i)] for i in range(len(chunk)))
        return ids

    return endpoint.portal.call(run)


class FlakyBackend:
    """A backend whose sends fail some entries, as SQS answers them (partial failure is a
    value): a body holding `"flaky"` fails with a service error on its first send through
    this instance, a body holding `"reject"` fails every time as the sender's fault."""

    def __init__(self, inner: Backend) -> None:
        self.inner = inner
        self.failed_once: set[str] = set()

    @property
    def limits(self) -> Limits:
        return self.inner.limits

    async def send(self, queue: str, messages: Sequence[OutgoingMessage]) -> BatchResult:
        failed: list[EntryFailure] = []
        passed: list[OutgoingMessage] = []
        for message in messages:
            if '"reject"' in message.body:
                failed.append(EntryFailure(message.entry_id, "InvalidParameterValue", "no"))
            elif '"flaky"' in message.body and message.body not in self.failed_once:
                self.failed_once.add(message.body)
                failed.append(EntryFailure(message.entry_id, "InternalError", sender_fault=False))
            else:
                passed.append(message)
        result = await self.inner.send(queue, passed) if passed else BatchResult()
        return BatchResult(succeeded=result.succeeded, failed=result.failed + tuple(failed))

    async def aclose(self) -> None:
        await self.inner.aclose()


async def connect_flaky(url: str) -> Backend:
    return cast(Backend, FlakyBackend(await connect_endpoint(url)))
