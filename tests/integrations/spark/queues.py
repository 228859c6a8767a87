"""Queues for the Spark tests: the in-memory engine behind its SQS endpoint on loopback.

Spark's Python processes (the source's runner, the executors' workers) are other processes:
they reach the engine through its SQS wire protocol with the real SQS backend, while the
test reads the engine's exact counts directly.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from backends.memory import MemoryBackend
from backends.serve.sqs import SqsEndpoint
from backends.sqs import SqsBackend, SqsSettings
from worker.backend import Backend
from worker.integrations.spark.holder import BackendConnect
from worker.types import OutgoingMessage, QueueSpec


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
