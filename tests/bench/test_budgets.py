"""The regression guard: figures that do not depend on timing, against bench/budgets.py.

API requests per message, bytes per drain and per in-flight lease (tracemalloc), renewal
calls per round. The memory engine runs under looptime; the SQS drain counts what our own
endpoint served. No figure here is a time: timing ratios stay in docs/benchmarks.md.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Iterator

import pytest
import pytest_asyncio

from backends.serve.sqs.endpoint import SqsEndpoint, sqs_endpoint_in_thread
from backends.sqs import SqsBackend, SqsSettings
from backends.sqs.settings import SqsClientKind
from bench import budgets, footprint


@pytest.fixture(scope="module")
def figures() -> footprint.Figures:
    # In a fresh process: tracemalloc would count other tests' threads here.
    return footprint.measure_in_a_fresh_process()


def test_draining_costs_one_receive_and_one_delete_per_ten_messages(
    figures: footprint.Figures,
) -> None:
    tens = budgets.DRAIN_MESSAGES // 10
    assert figures.calls == {
        "receive": tens * budgets.RECEIVES_PER_10_MESSAGES + budgets.IDLE_RECEIVES,
        "delete": tens * budgets.DELETES_PER_10_MESSAGES,
    }
    assert figures.twice_deletes == 2 * tens * budgets.DELETES_PER_10_MESSAGES


def test_a_drain_allocates_within_its_budget(figures: footprint.Figures) -> None:
    assert 0 < figures.peak_bytes <= budgets.DRAIN_PEAK_BYTES


def test_what_a_drain_retains_does_not_grow_with_the_messages(figures: footprint.Figures) -> None:
    growth = figures.twice_retained_bytes - figures.retained_bytes
    assert growth / budgets.DRAIN_MESSAGES <= budgets.RETAINED_BYTES_PER_MESSAGE


def test_an_in_flight_lease_costs_at_most_its_budget(figures: footprint.Figures) -> None:
    # A lower bound too: a figure near 0 would mean the measurement missed the held messages.
    assert 1024 < figures.bytes_per_lease <= budgets.BYTES_PER_LEASE


def test_every_renewal_round_is_ceil_n_over_10_calls(figures: footprint.Figures) -> None:
    floor = math.ceil(budgets.RENEWAL_LEASES / 10)
    assert figures.calls_per_round == [floor] * budgets.RENEWAL_ROUNDS
    assert figures.lapsed == 0
    assert figures.handled == budgets.RENEWAL_LEASES


# -- over the SQS protocol ------------------------------------------------------------------


@pytest.fixture(scope="module")
def endpoint() -> Iterator[SqsEndpoint]:
    with sqs_endpoint_in_thread() as served:
        yield served


def _settings(url: str, client: SqsClientKind) -> SqsSettings:
    return SqsSettings(
        endpoint_url=url,
        region="us-east-1",
        access_key_id="testing",
        secret_access_key="testing",
        client=client,
    )


@pytest_asyncio.fixture(params=["botocore", "lean"])
async def sqs_backend(
    request: pytest.FixtureRequest, endpoint: SqsEndpoint
) -> AsyncIterator[SqsBackend]:
    backend = await SqsBackend.connect(_settings(endpoint.url, request.param))
    try:
        yield backend
    finally:
        await backend.aclose()


@pytest.mark.asyncio
async def test_draining_over_sqs_costs_the_same_requests(
    sqs_backend: SqsBackend, endpoint: SqsEndpoint, request: pytest.FixtureRequest
) -> None:
    count = budgets.SQS_DRAIN_MESSAGES
    queue = f"budget-{request.node.callspec.id}"
    requests = await footprint.drain_over_sqs(sqs_backend, endpoint.url, count, queue)
    tens = count // 10
    assert requests == {
        "ReceiveMessage": tens * budgets.RECEIVES_PER_10_MESSAGES + budgets.IDLE_RECEIVES,
        "DeleteMessageBatch": tens * budgets.DELETES_PER_10_MESSAGES,
        **budgets.SQS_START_UP_REQUESTS,
    }
