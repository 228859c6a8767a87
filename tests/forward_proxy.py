"""`forwarding_proxy()`: a small forwarding HTTP proxy on 127.0.0.1 at a free port, for tests
that need a client's requests to really travel through a proxy to a server and back.

    async with forwarding_proxy() as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        ...
        assert proxy.targets == [f"{endpoint}/"]

Rules:
- It takes requests in absolute form (`POST http://host:port/path HTTP/1.1`, what a client
  sends to a proxy for an `http://` URL), forwards each to the URL it names with the same
  method, body and end-to-end headers, and relays the answer as it came: status, headers
  and body. It never follows a redirect itself (a proxy does not): a 3xx goes back to the
  client, which decides.
- Hop-by-hop headers (`Connection`, `Proxy-Authorization`, `Transfer-Encoding`, ...) are not
  forwarded, as RFC 9110 asks of a proxy.
- Every target URL is recorded in `targets`, in order of arrival.
- No CONNECT: an `https://` endpoint would be tunnelled, and the tunnel shows a proxy
  nothing of what travels in it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web

from tests.local_http import serving

__all__ = ["ForwardingProxy", "forwarding_proxy"]

#: RFC 9110 7.6.1's hop-by-hop headers, and what aiohttp computes again for the next hop.
_NOT_FORWARDED = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)


@dataclass
class ForwardingProxy:
    """A running proxy: its URL and what it was asked to reach."""

    url: str
    #: The URL of every request that reached it, in order.
    targets: list[str] = field(default_factory=list)


def _end_to_end(headers: Mapping[str, str]) -> list[tuple[str, str]]:
    """Every end-to-end header, a repeated one as often as it came."""
    return [(name, value) for name, value in headers.items() if name.lower() not in _NOT_FORWARDED]


@asynccontextmanager
async def forwarding_proxy() -> AsyncIterator[ForwardingProxy]:
    # trust_env=False: the proxy itself never goes through the HTTP_PROXY its tests set.
    async with aiohttp.ClientSession(auto_decompress=False, trust_env=False) as client:
        recorded: list[str] = []

        async def forward(request: web.Request) -> web.Response:
            recorded.append(str(request.url))
            async with client.request(
                request.method,
                request.url,
                headers=_end_to_end(request.headers),
                data=await request.read(),
                allow_redirects=False,
            ) as answer:
                body = await answer.read()
                return web.Response(
                    status=answer.status, body=body, headers=_end_to_end(answer.headers)
                )

        async with serving(forward) as url:
            yield ForwardingProxy(url, recorded)
