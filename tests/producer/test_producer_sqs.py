"""The producer over the real SQS client, on moto's server: batches, FIFO ids, attributes,
and what a typed handler decodes."""

from __future__ import annotations

import dataclasses
import uuid

import pytest

from backends.sqs import SqsBackend
from tests.moto_server import MOTO_ACCESS_KEY, MOTO_REGION, MOTO_SECRET_KEY, MotoServer
from worker import MessageAttribute, Outgoing, Producer
from worker.envelope.codecs import codec_for
from worker.types import QueueSpec, ReceivedMessage

pytestmark = pytest.mark.asyncio


@dataclasses.dataclass(frozen=True)
class Order:
    id: int


async def test_send_many_over_sqs_then_receive_typed(moto_server: MotoServer) -> None:
    async with SqsBackend.open(
        region=MOTO_REGION,
        endpoint_url=moto_server.endpoint_url,
        access_key_id=MOTO_ACCESS_KEY,
        secret_access_key=MOTO_SECRET_KEY,
    ) as sqs:
        name = f"orders-{uuid.uuid4().hex[:8]}"
        await sqs.create_queue(QueueSpec(name))
        await sqs.create_queue(QueueSpec(f"{name}.fifo"))
        producer = Producer(sqs)
        items = [Outgoing(body=Order(n), attributes={"n": n}) for n in range(23)]
        results = await producer.send_many(name, items)
        assert all(r.ok and r.attempts == 1 for r in results)
        assert len({r.message_id for r in results}) == 23
        fifo = await producer.send(f"{name}.fifo", "x", group_id="g", deduplication_id="d1")
        assert fifo
        received: list[ReceivedMessage] = []
        while len(received) < 23:
            received += await sqs.receive(name, max_messages=10, wait_s=1)
        codec = codec_for(Order)
        assert codec is not None
        assert sorted(codec.decode(m.body).id for m in received) == list(range(23))
        by_id = {m.body: m.message_attributes["n"] for m in received}
        assert by_id['{"id":5}'] == MessageAttribute("Number", string_value="5")
