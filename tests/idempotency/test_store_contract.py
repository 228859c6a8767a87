"""The store contract: every `IdempotencyStore` answers the same, on its real server.

Memory in this process; Redis on a real `redis-server`; DynamoDB on moto's server. Times are
passed in (wall seconds), so nothing here waits.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from tests.idempotency.conftest import dynamodb_client, free_port
from worker.idempotency import (
    DynamoDBStore,
    IdempotencyStore,
    Record,
    RecordState,
    RedisStore,
    StoreError,
)

pytestmark = pytest.mark.asyncio

NOW = 1_800_000_000.25


def claim(key: str = "orders:1", token: str = "t1", owner: str = "w1", **fields: object) -> Record:
    record = Record(
        key=key,
        token=token,
        state=RecordState.IN_PROGRESS,
        owner=owner,
        stale_at=NOW + 600.5,
        expires_at=NOW + 600.5,
    )
    return replace(record, **fields)  # type: ignore[arg-type]


async def test_a_claim_is_written_once_and_then_stands_in_the_way(store: IdempotencyStore) -> None:
    first = claim(body_hash="h1")
    assert await store.create(first, now=NOW) is None
    found = await store.create(claim(token="t2", owner="w2"), now=NOW)
    assert found == first


async def test_an_in_progress_claim_is_never_overwritten_by_create(store: IdempotencyStore) -> None:
    # Even past its stale time: staleness needs the owner's heartbeat: the caller judges.
    assert await store.create(claim(), now=NOW) is None
    found = await store.create(claim(token="t2"), now=NOW + 700)
    assert found is not None and found.token == "t1"


async def test_a_completion_stands_until_it_expires(store: IdempotencyStore) -> None:
    done = claim().completed(at=NOW, ttl_s=100.0, result='{"id": 7}')
    assert await store.create(done, now=NOW) is None
    found = await store.create(claim(token="t2"), now=NOW + 99.5)
    assert found == done
    assert found.state is RecordState.COMPLETED and found.result == '{"id": 7}'
    assert await store.create(claim(token="t3"), now=NOW + 100.0) is None
    assert (await store.create(claim(token="t4"), now=NOW + 100.0)).token == "t3"  # type: ignore[union-attr]


async def test_replace_and_remove_need_the_current_token(store: IdempotencyStore) -> None:
    assert not await store.replace(claim(), token="t1")  # nothing there yet
    assert not await store.remove("orders:1", token="t1")
    assert await store.create(claim(), now=NOW) is None
    taken = claim(token="t2", owner="w2")
    assert not await store.replace(taken, token="other")
    assert await store.replace(taken, token="t1")
    assert not await store.remove("orders:1", token="t1")  # the old owner's token is gone
    assert (await store.create(claim(token="t3"), now=NOW)) == taken
    assert await store.remove("orders:1", token="t2")
    assert await store.create(claim(token="t3"), now=NOW) is None


async def test_keys_are_independent(store: IdempotencyStore) -> None:
    assert await store.create(claim("orders:1"), now=NOW) is None
    assert await store.create(claim("orders:2", token="t2"), now=NOW) is None
    assert await store.remove("orders:1", token="t1")
    assert (await store.create(claim("orders:2", token="t9"), now=NOW)).token == "t2"  # type: ignore[union-attr]


async def test_heartbeats(store: IdempotencyStore) -> None:
    assert await store.beat_of("w1") is None
    await store.beat(owner="w1", until=NOW + 30.125)
    await store.beat(owner="w2", until=NOW + 5.0)
    assert await store.beat_of("w1") == NOW + 30.125
    await store.beat(owner="w1", until=NOW + 60.0)
    assert await store.beat_of("w1") == NOW + 60.0
    assert await store.beat_of("w2") == NOW + 5.0


async def test_concurrent_claims_of_one_key_have_one_winner(store: IdempotencyStore) -> None:
    answers = await asyncio.gather(
        *(store.create(claim(token=f"t{n}", owner=f"w{n}"), now=NOW) for n in range(8))
    )
    winners = [n for n, found in enumerate(answers) if found is None]
    assert len(winners) == 1
    assert {found.token for found in answers if found is not None} == {f"t{winners[0]}"}


@pytest.mark.parametrize("store_kind", ["redis", "dynamodb"])
async def test_a_store_that_cannot_be_reached_raises_store_error(store_kind: str) -> None:
    port = free_port()  # nothing listens there
    if store_kind == "redis":
        from redis.asyncio import Redis
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff

        client = Redis(host="127.0.0.1", port=port, retry=Retry(NoBackoff(), 0))
        redis_store = RedisStore(client)
        try:
            await _every_operation_fails(redis_store)
        finally:
            await redis_store.aclose()
        return
    endpoint = f"http://127.0.0.1:{port}"
    async with dynamodb_client(endpoint, retries={"max_attempts": 1}, connect_timeout=1) as client:
        await _every_operation_fails(DynamoDBStore(client, "absent"))


async def _every_operation_fails(store: IdempotencyStore) -> None:
    calls = {
        "create": store.create(claim(), now=NOW),
        "replace": store.replace(claim(), token="t1"),
        "remove": store.remove("k", token="t1"),
        "beat": store.beat("w1", until=NOW),
        "beat_of": store.beat_of("w1"),
    }
    for operation, call in calls.items():
        with pytest.raises(StoreError) as raised:
            await call
        assert raised.value.operation == operation
