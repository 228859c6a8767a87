"""No SQS call ever follows a redirect (issue 40): a 3xx is an error that names the endpoint.

SQS never answers a redirect; a 3xx comes from something in the way (a wrong endpoint, a
proxy's or captive portal's page). Following it would send the signed request, its
`X-Amz-Security-Token` included, to another host, and hand that host's answer back as
SQS's. A review measured that the lean path through a proxy (aiohttp) and every call of the
botocore client (aiobotocore's aiohttp session) followed them.

The rig, all real servers on 127.0.0.1 at free ports: an endpoint that answers every request
with a redirect to another origin (standing in for another host), that other origin, which
records what reaches it and answers a well-formed empty SQS answer (so a followed redirect
would pass for success), and, for the proxy cases, a forwarding HTTP proxy
(`tests.forward_proxy`) that the client finds in `HTTP_PROXY`, as botocore finds it. Every
status that redirects (301, 302, 307, 308), both clients, direct and through the proxy, a
call the lean path makes (ReceiveMessage) and one that stays on aiobotocore whichever the
client (GetQueueAttributes). Then the botocore client's backstop, should a release of
aiobotocore stop calling the hook it overrides, and the error's text (origins only).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field

import pytest
from aiobotocore.httpsession import AIOHTTPSession
from aiohttp import web

from backends.sqs import SqsBackend, SqsSettings
from backends.sqs.botocore_internals import NoRedirectSession
from backends.sqs.redirects import refuse
from backends.sqs.settings import SqsClientKind
from tests.forward_proxy import ForwardingProxy, forwarding_proxy
from tests.local_http import serving
from worker.errors import FatalBackendError

TOKEN = "session-token-for-the-endpoint-only"
_PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")


@dataclass
class Rig:
    endpoint: str
    elsewhere: str
    #: What reached each server: (method, path, headers).
    at_endpoint: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)
    at_elsewhere: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)
    proxy: ForwardingProxy | None = None


@asynccontextmanager
async def rig(status: int, *, proxied: bool) -> AsyncIterator[Rig]:
    at_endpoint: list[tuple[str, str, dict[str, str]]] = []
    at_elsewhere: list[tuple[str, str, dict[str, str]]] = []
    where: list[str] = []

    async def elsewhere(request: web.Request) -> web.Response:
        at_elsewhere.append((request.method, request.path_qs, dict(request.headers)))
        return web.json_response({}, content_type="application/x-amz-json-1.0")

    async def endpoint(request: web.Request) -> web.Response:
        at_endpoint.append((request.method, request.path_qs, dict(request.headers)))
        await request.read()
        return web.Response(status=status, headers={"Location": f"{where[0]}/moved"})

    async with AsyncExitStack() as stack:
        where.append(await stack.enter_async_context(serving(elsewhere)))
        url = await stack.enter_async_context(serving(endpoint))
        proxy = await stack.enter_async_context(forwarding_proxy()) if proxied else None
        yield Rig(url, where[0], at_endpoint, at_elsewhere, proxy)


def _settings(endpoint: str, client: SqsClientKind) -> SqsSettings:
    return SqsSettings(
        region="us-east-1",
        endpoint_url=endpoint,
        access_key_id="AKIDEXAMPLE",
        secret_access_key="secret",
        session_token=TOKEN,
        queue_urls={"jobs": f"{endpoint}/000000000000/jobs"},
        client=client,
        max_attempts=2,
    )


async def _receive(backend: SqsBackend) -> object:
    return await backend.receive("jobs", max_messages=10, wait_s=0)


async def _queue_info(backend: SqsBackend) -> object:
    return await backend.queue_info("jobs")


CALLS: dict[str, Callable[[SqsBackend], Awaitable[object]]] = {
    "ReceiveMessage": _receive,
    "GetQueueAttributes": _queue_info,
}


@pytest.fixture
def no_environment_proxy(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in _PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    return monkeypatch


@pytest.mark.asyncio
@pytest.mark.parametrize("operation", sorted(CALLS))
@pytest.mark.parametrize("proxied", [False, True], ids=["direct", "proxy"])
@pytest.mark.parametrize("client", ["lean", "botocore"])
@pytest.mark.parametrize("status", [301, 302, 307, 308])
async def test_a_redirect_is_never_followed_and_fails_naming_the_endpoint(
    status: int,
    client: SqsClientKind,
    proxied: bool,
    operation: str,
    no_environment_proxy: pytest.MonkeyPatch,
) -> None:
    async with rig(status, proxied=proxied) as r:
        if r.proxy is not None:
            no_environment_proxy.setenv("HTTP_PROXY", r.proxy.url)
        backend = await SqsBackend.connect(_settings(r.endpoint, client))
        try:
            with pytest.raises(FatalBackendError) as caught:
                await CALLS[operation](backend)
        finally:
            await backend.aclose()

    assert r.at_elsewhere == [], "a request (and its credentials) reached the redirect's target"
    # One request, not retried, and it carried the token to the endpoint alone.
    assert [(method, path) for method, path, _ in r.at_endpoint] == [("POST", "/")]
    assert r.at_endpoint[0][2]["X-Amz-Security-Token"] == TOKEN
    if r.proxy is not None:
        assert r.proxy.targets == [f"{r.endpoint}/"], "the proxy was asked for another host"
    error = caught.value
    assert error.operation == operation
    assert error.code == "RedirectRefused"
    message = str(error)
    assert r.endpoint in message
    assert str(status) in message
    assert TOKEN not in message


@pytest.mark.asyncio
async def test_without_the_hook_another_hosts_answer_is_still_never_sqss(
    no_environment_proxy: pytest.MonkeyPatch,
) -> None:
    """The backstop, for an aiobotocore whose session no longer asks for the aiohttp session
    through the hook `NoRedirectSession` overrides: aiohttp follows the redirect (the other
    host is reached: that is what the hook is for), but its answer is not returned."""
    no_environment_proxy.setattr(
        NoRedirectSession, "_get_session", AIOHTTPSession._get_session, raising=True
    )
    async with rig(307, proxied=False) as r:
        backend = await SqsBackend.connect(_settings(r.endpoint, "botocore"))
        try:
            with pytest.raises(FatalBackendError, match="RedirectRefused") as caught:
                await _queue_info(backend)
        finally:
            await backend.aclose()
    assert len(r.at_elsewhere) == 1
    assert r.endpoint in str(caught.value)


@pytest.mark.parametrize(
    ("endpoint", "location", "named"),
    [
        ("http://127.0.0.1:9324/", "http://127.0.0.1:9/moved", "http://127.0.0.1:9"),
        ("https://sqs.example/", "/login?session=SECRET", "https://sqs.example"),
        (
            "https://user:SECRET@sqs.example:8443/a",
            "https://h.example/?t=SECRET#x",
            "https://h.example",
        ),
        ("http://[::1]:9324/", "http://[::1]:1/", "http://[::1]:1"),
    ],
)
def test_the_error_names_origins_only(endpoint: str, location: str, named: str) -> None:
    message = str(refuse(307, endpoint, location))
    assert f"answered HTTP 307 (a redirect to {named})" in message
    assert "SECRET" not in message and "user" not in message


def test_a_redirect_without_a_location_is_refused_too() -> None:
    message = str(refuse(302, "https://sqs.us-east-1.amazonaws.com/", None))
    assert message.startswith("https://sqs.us-east-1.amazonaws.com answered HTTP 302 (a redirect);")
