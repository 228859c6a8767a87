"""`worker.testing`'s harness: its waits end, on the loop's clock, and say what arrived; a
finished run's `message.body` means what a handler's does (decoded), `raw_body` the text.

Before either change, the waits here never returned (under looptime the worker's polls keep
the virtual clock running): each test carries a short pytest timeout so that it fails rather
than hangs.
"""

from __future__ import annotations

from dataclasses import dataclass

import anyio
import pytest

from worker import Discard, Message, Outcome, Worker
from worker.errors import DecodeError
from worker.testing import HandledMessage, run_worker
from worker.testing.harness import DEFAULT_WAIT_S

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime, pytest.mark.timeout(30)]


@dataclass
class Order:
    id: int


def _app() -> tuple[Worker, dict[str, list[object]]]:
    app = Worker()
    seen: dict[str, list[object]] = {"orders": [], "typed": [], "raw": [], "batch": []}

    @app.handler("orders")
    async def orders(message: Message) -> None:
        seen["orders"].append(message.body)
        await anyio.sleep(message.body.get("work_s", 0))
        if message.body.get("discard"):
            raise Discard("discarded on purpose")

    @app.handler("typed")
    async def typed(order: Order) -> None:
        seen["typed"].append(order)

    @app.handler("raw", decode="raw")
    async def raw(message: Message) -> None:
        seen["raw"].append(message.body)

    @app.batch_handler("batch", max_size=2, max_wait_s=1)
    async def batch(messages: list[Message]) -> None:
        seen["batch"].extend(m.body for m in messages)

    return app, seen


async def test_wait_for_handled_ends_after_an_hour_of_loop_time_naming_what_arrived() -> None:
    app, _ = _app()
    async with run_worker(app) as harness:
        await harness.send("orders", {"id": 1})
        await harness.send("orders", {"id": 2, "discard": True})
        started = anyio.current_time()
        with pytest.raises(TimeoutError) as caught:
            await harness.wait_for_handled(3)
        waited = anyio.current_time() - started
    assert waited == pytest.approx(DEFAULT_WAIT_S, abs=1)
    text = str(caught.value)
    assert text.startswith("wait_for_handled(3): ")
    assert "2 of 3 handler runs finished in 3600 s of loop time" in text
    assert "orders succeeded x1" in text and "orders discarded x1" in text
    assert "receive 1: discarded, delete" in text
    assert "timeout_s=" in text


async def test_timeout_s_bounds_the_wait_and_names_what_is_still_held() -> None:
    app, _ = _app()
    async with run_worker(app) as harness:
        await harness.send("orders", {"id": 1, "work_s": 600})
        with pytest.raises(TimeoutError, match=r"0 of 1 handler runs .* in 5 s .*1 message\(s\)"):
            await harness.wait_for_handled(1, timeout_s=5)
        assert anyio.current_time() == pytest.approx(5, abs=1)
        [record] = await harness.wait_for_handled(1, timeout_s=700)
    assert record.outcome is Outcome.SUCCEEDED


async def test_wait_until_idle_is_bounded_too() -> None:
    app, _ = _app()
    async with run_worker(app) as harness:
        await harness.send("orders", {"id": 1, "work_s": 7200})
        await anyio.sleep(1)
        with pytest.raises(TimeoutError, match=r"not idle after 60 s .*1 message\(s\) still held"):
            await harness.wait_until_idle(timeout_s=60)
        with pytest.raises(TimeoutError, match="not idle after 3600 s"):
            await harness.wait_until_idle()
        await harness.wait_until_idle(timeout_s=7200)


async def test_body_is_decoded_as_the_handler_got_it_and_raw_body_is_the_text() -> None:
    app, seen = _app()
    async with run_worker(app) as harness:
        await harness.send("orders", {"id": 1})
        await harness.send("typed", {"id": 7})
        await harness.send("raw", "plain text")
        await harness.send("batch", [1, 2])
        records = await harness.wait_for_handled(4)
    by_queue = {record.message.queue: record.message for record in records}
    assert isinstance(by_queue["orders"], HandledMessage)
    assert by_queue["orders"].body == {"id": 1} and by_queue["orders"].raw_body == '{"id": 1}'
    # The very object the handler got: a typed payload too.
    assert by_queue["orders"].body is seen["orders"][0]
    assert by_queue["typed"].body is seen["typed"][0] == Order(7)
    assert by_queue["raw"].body == by_queue["raw"].raw_body == "plain text"
    assert by_queue["batch"].body == [1, 2] and by_queue["batch"].raw_body == "[1, 2]"
    assert "id" not in repr(by_queue["orders"])  # no body in a repr


async def test_an_undecodable_body_raises_decode_error_and_keeps_its_raw_body() -> None:
    app, seen = _app()
    async with run_worker(app) as harness:
        await harness.send("orders", "{not json")
        [record, *_] = await harness.wait_for_handled(1)
    assert record.outcome is Outcome.FAILED and seen["orders"] == []
    assert record.message.raw_body == "{not json"
    with pytest.raises(DecodeError, match=record.message.message_id):
        _ = record.message.body
