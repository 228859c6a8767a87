"""Every private name of botocore and aiobotocore the SQS client uses, each with its reason.

Everything else in `backends.sqs` uses their public interfaces only (a test greps for it:
`tests/backends/sqs/test_botocore_internals.py`). A private name can change in any release,
so `pyproject.toml` bounds `aiobotocore` (which pins botocore) to the releases tested, and
`scripts/test` runs `tests/backends/sqs` on the oldest and the newest of them. Moving a
bound means running those suites on the new end. The names:

- `AIOHTTPSession._get_session(proxy_url)` (aiobotocore), overridden by `NoRedirectSession`
  to hand aiobotocore's own `send` an aiohttp session whose every request is made with
  `allow_redirects=False`. aiobotocore calls `session.request(...)` without that argument,
  so aiohttp follows up to ten redirects, re-sending the signed headers (the session token
  among them) to whatever host a `Location` names, and returns that host's answer as
  SQS's. botocore and aiobotocore offer no public switch for it on their aiohttp session:
  no config option, no request argument; a `before-send` handler can only replace the
  whole send, and the `connector_args` (resolver, socket factory) see a proxy's address,
  not the target. (aiobotocore's other session, `HttpxSession`, does not follow redirects,
  but it needs httpx and swaps the whole HTTP stack.) `http_session_cls` (public,
  `AioConfig`) is how this class is put in; overriding the one method keeps the rest of
  aiobotocore's transport (TLS, client certificates, the proxy settings, connector
  arguments, its errors) as it is. If a release drops the method, the
  session refuses to be made rather than follow redirects unseen, and `send` still refuses
  an answer that came after a redirect.
- `client._user_agent_creator` (botocore), read by `skip_user_agent_rebuild` to unregister
  the handler that builds the User-Agent header a second time for every request (about a
  tenth of a call's CPU on the botocore client). Only the client holds the bound method the
  handler was registered as; without it the header is built twice, which is correct, so a
  release without it only costs the CPU.
"""

from __future__ import annotations

from typing import Any

from aiobotocore.httpsession import AIOHTTPSession

from backends.sqs.redirects import is_redirect, refuse

__all__ = ["NoRedirectSession", "skip_user_agent_rebuild"]


class _NoRedirects:
    """An aiohttp session whose `request` never follows a redirect: the 3xx is the answer."""

    __slots__ = ("_session",)

    def __init__(self, session: Any) -> None:
        self._session = session

    def request(self, *args: Any, **kwargs: Any) -> Any:
        kwargs["allow_redirects"] = False
        return self._session.request(*args, **kwargs)


class NoRedirectSession(AIOHTTPSession):  # type: ignore[misc]  # aiobotocore is untyped
    """aiobotocore's aiohttp session that never follows a redirect: a 3xx answer is raised
    as `RedirectRefused`, naming the endpoint. Given as `AioConfig(http_session_cls=...)`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if not hasattr(AIOHTTPSession, "_get_session"):
            raise RuntimeError(
                "this aiobotocore has no AIOHTTPSession._get_session: its SQS calls would "
                "follow redirects; install an aiobotocore in the range lease-worker names"
            )
        super().__init__(*args, **kwargs)

    async def _get_session(self, proxy_url: str | None) -> _NoRedirects:
        return _NoRedirects(await super()._get_session(proxy_url))

    async def send(self, request: Any) -> Any:
        response = await super().send(request)
        # `history`: aiohttp's record of redirects it followed, empty unless the hook above
        # stopped working; the answer at the end of one is never returned as SQS's.
        first = next(iter(getattr(response.raw, "history", ()) or ()), None)
        if first is not None:
            raise refuse(first.status, request.url, first.headers.get("Location"))
        if is_redirect(response.status_code):
            raise refuse(response.status_code, request.url, response.headers.get("location"))
        return response


def skip_user_agent_rebuild(client: Any) -> None:
    """botocore builds the User-Agent header twice per request (the second time to add
    features registered during the call); that second build is about a tenth of a call's
    CPU. The header keeps its first form. Skipped quietly if botocore changes its shape."""
    creator = getattr(client, "_user_agent_creator", None)
    handler = getattr(creator, "rebuild_and_replace_user_agent_handler", None)
    if handler is not None:
        client.meta.events.unregister("request-created.sqs", handler)
