"""`backends.sqs.lean_http.HttpPool`'s read timeout with its one lazily re-armed timer per
connection, as a long poll meets it (a 20 s poll under a 30 s read timeout, scaled down):
a timer armed for an earlier call does not cut a later one short, and one that comes due
while the connection is idle leaves it be."""

from __future__ import annotations

import asyncio

import pytest

from backends.sqs import lean_http
from tests.backends.sqs.test_lean_http import OK, Server, pool, post, serving

pytestmark = pytest.mark.asyncio

READ_TIMEOUT_S = 0.6
#: uvloop's clock reads in ms (and a timer may run its 1 ms of slack early).
CLOCK_S = 0.005


async def test_a_timer_armed_for_an_earlier_call_measures_from_the_later_one() -> None:
    """Call 1 is answered at once at t=0; its connection's timer is due at t=0.6. Call 2
    goes at t=0.4 and is answered 0.35 s later, at t=0.75: past that first due time, but
    within the read timeout of its own request. The timer then comes due (t=1.0) with the
    connection idle; call 3, after it, reuses the connection. Call 4 is never answered: a
    ReadTimeout a read timeout after it went, not sooner."""
    polled = asyncio.Event()

    async def polls(r: asyncio.StreamReader, w: asyncio.StreamWriter, server: Server) -> None:
        while await server.request(r) is not None:
            if len(server.requests) == 2:
                polled.set()
                await asyncio.sleep(0.35)  # a long poll, shorter than the read timeout
            if len(server.requests) == 4:
                continue  # never answered
            w.write(OK)
            await w.drain()

    async with serving(polls) as server:
        http = pool(server.url, read_timeout_s=READ_TIMEOUT_S)
        loop = asyncio.get_running_loop()
        assert (await post(http))[0] == 200
        await asyncio.sleep(0.4)  # the time between calls is the behaviour under test
        sent = loop.time()
        assert (await post(http))[0] == 200
        assert polled.is_set()
        assert loop.time() - sent >= 0.35 - CLOCK_S
        await asyncio.sleep(READ_TIMEOUT_S - 0.35 + 0.1)  # past the re-armed due time
        assert (await post(http))[0] == 200
        sent = loop.time()
        with pytest.raises(lean_http.ReadTimeout):
            await post(http)
        assert READ_TIMEOUT_S - CLOCK_S <= loop.time() - sent < READ_TIMEOUT_S + 2.0
        await http.aclose()
    assert server.connections == 1
    assert len(server.requests) == 4
