"""The examples of docs/how-to/handlers.md and docs/how-to/producer.md run, and do what they say."""

from __future__ import annotations

import uuid

import pytest

from examples import large_payloads, typed_orders
from tests.moto_server import MOTO_ACCESS_KEY, MOTO_REGION, MOTO_SECRET_KEY, MotoServer

pytestmark = pytest.mark.asyncio


@pytest.mark.looptime
async def test_typed_orders() -> None:
    tally = await typed_orders.main()
    assert sorted(tally.orders) == list(range(20))
    assert (tally.receipts_sent, tally.receipts_failed, tally.dead_lettered) == (20, 4, 1)


async def test_large_payloads(moto_server: MotoServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", MOTO_ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", MOTO_SECRET_KEY)
    monkeypatch.setenv("AWS_DEFAULT_REGION", MOTO_REGION)
    bucket = f"example-{uuid.uuid4().hex[:12]}"
    result = await large_payloads.main(moto_server.endpoint_url, bucket)
    assert result == large_payloads.Result(1_048_576, 1, 0)
