"""`LeanTransport`: the hot SQS calls without botocore's per-call machinery.

botocore spends most of an SQS call's CPU on what is generic: walking the service model to
serialise the parameters and again to parse the answer, and emitting a dozen events per call.
For the calls a worker makes thousands of times a second (ReceiveMessage, DeleteMessageBatch,
ChangeMessageVisibilityBatch, SendMessageBatch) this transport writes and reads SQS's JSON
protocol itself (`backends.sqs.lean_wire`) and keeps from the aiobotocore client what it is
good at. Rules this module keeps:
- Credentials are the client's own credential object, found through public interfaces as
  aiobotocore's `create_client` finds it (the settings' explicit keys, else the session's
  provider chain: env, profile, SSO, IRSA / web identity, instance roles), frozen afresh
  for every attempt with its async `get_frozen_credentials`, so a refreshing provider is
  honoured; no credentials is botocore's `NoCredentialsError`.
- Every attempt is signed with SigV4 for the client's region and signing name by
  `backends.sqs.lean_signer` (its own computation, held header for header to botocore's
  `SigV4Auth` by tests), and sent to the client's endpoint URL with the Host it signed.
- The headers are botocore's for SQS: signed, content type, target and
  `x-amzn-query-mode: true` (`backends.sqs.lean_signer`); unsigned, `amz-sdk-invocation-id`
  (one per call) and `amz-sdk-request` (`attempt=N`, then `ttl`, `attempt` and `max` on a
  retry, as botocore writes them), and the User-Agent (the session's creator with the
  client's config, as botocore makes the client's, marked `lease-worker-lean`).
- Retries are botocore's standard mode (`backends.sqs.lean_retry`) with the settings'
  attempts; what still fails is raised as aiobotocore raises it: an error answer as the
  client's own modelled class (`client.exceptions.from_code(Error.Code)`, so `except
  client.exceptions.QueueDoesNotExist` catches it; `ClientError` for a code the model does
  not name) carrying the answer botocore's JSON parser would make, or botocore's transport
  exceptions, converted from aiohttp's as aiobotocore converts them; so
  `backends.sqs.errors.map_error` maps both paths alike.
- Answers, error or not, carry botocore's `ResponseMetadata` (RequestId, HTTPStatusCode,
  HTTPHeaders, RetryAttempts). A 2xx body that is not a JSON object is botocore's
  `ResponseParserError` (stricter than botocore: `backends.sqs.lean_wire`).
- With tracing on, each call is one span with the attributes OpenTelemetry's botocore
  instrumentation gives (`backends.sqs.lean_tracing`); with it off, no span and no cost.
- One connection pool per transport: at most `max_pool_connections` connections, the
  settings' connect and read timeouts, TLS verified against botocore's CA bundle (or the
  configured `ca_bundle`), idle connections kept 12 s (aiobotocore's keep-alive). A direct
  endpoint goes through `backends.sqs.lean_http` (HTTP/1.1 on asyncio's transports: about
  half the client CPU of an aiohttp session); one reached through a proxy, as botocore
  finds proxies (its config's, else the environment's), through an aiohttp session. Every
  answer's headers come back with lower-cased names either way. Closed by `aclose`.
- No redirect is followed, direct or through a proxy: a 3xx answer ends the call with
  `backends.sqs.redirects.RedirectRefused`, naming the endpoint, never retried.
- Nothing is logged; bodies and credentials never reach an exception's message.
"""

from __future__ import annotations

import datetime
import socket
import ssl
import uuid
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import anyio
from aiobotocore.credentials import AioCredentials
from aiobotocore.session import AioSession
from botocore.compat import get_current_datetime
from botocore.exceptions import (
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    HTTPClientError,
    NoCredentialsError,
    ProxyConnectionError,
    ReadTimeoutError,
    SSLError,
)
from botocore.exceptions import ConnectionError as BotoConnectionError
from botocore.httpsession import ProxyConfiguration, get_cert_path, mask_proxy_url
from botocore.parsers import JSONParser, ResponseParserError
from botocore.utils import get_environ_proxies

from backends.sqs import lean_http, lean_tracing, lean_wire
from backends.sqs.lean_retry import StandardRetry
from backends.sqs.lean_signer import RequestSigner
from backends.sqs.redirects import is_redirect, refuse
from backends.sqs.settings import KEEPALIVE_S, SqsSettings

__all__ = ["LEAN_OPERATIONS", "LeanTransport"]

#: botocore's own JSON parser, for the fields of a modelled error (the error path only).
_JSON_PARSER = JSONParser()

#: The operations the lean path makes; every other one stays on aiobotocore.
LEAN_OPERATIONS = frozenset(
    {"ReceiveMessage", "DeleteMessageBatch", "ChangeMessageVisibilityBatch", "SendMessageBatch"}
)


def _request_url(endpoint_url: str) -> str:
    """Where a JSON call is posted: the endpoint's own path, or `/` (as botocore joins it),
    its query kept after the path."""
    parts = urlsplit(endpoint_url)
    return endpoint_url if parts.path else urlunsplit(parts._replace(path="/"))


def _user_agent(session: AioSession, client: Any) -> str:
    """The client's User-Agent, made as botocore makes it for the client: the session's
    creator with the client's config (both public), then this path's mark."""
    creator = session.get_component("user_agent_creator").with_client_config(client.meta.config)
    return f"{creator.to_string()} lease-worker-lean"


async def _credentials(session: AioSession, settings: SqsSettings) -> Any:
    """The credentials the client signs with, as aiobotocore's `create_client` picks them
    from the same settings: the explicit keys, else the session's provider chain (the
    session keeps the object it loads, so this is the one the client was given); None:
    none found."""
    if settings.access_key_id is not None and settings.secret_access_key is not None:
        return AioCredentials(
            settings.access_key_id, settings.secret_access_key, settings.session_token
        )
    return await session.get_credentials()


def _ttl(date: str, read_timeout: float) -> str:
    """`ttl` of `amz-sdk-request` after an answer dated `date`, as botocore's endpoint
    computes it: now plus the read timeout plus the service's clock skew (its private
    `Endpoint._calculate_ttl`, written out here)."""
    received: datetime.datetime = get_current_datetime()
    skew = datetime.datetime.strptime(date, "%a, %d %b %Y %H:%M:%S %Z") - received
    now: datetime.datetime = get_current_datetime()
    return (now + datetime.timedelta(seconds=read_timeout) + skew).strftime("%Y%m%dT%H%M%SZ")


async def _ssl_context(url: str, ca_bundle: str | None) -> ssl.SSLContext | None:
    if urlsplit(url).scheme != "https":
        return None
    cafile = get_cert_path(ca_bundle or True)
    # Reading the CA bundle is blocking file I/O.
    return await anyio.to_thread.run_sync(lambda: ssl.create_default_context(cafile=cafile))


def _session(settings: SqsSettings, context: ssl.SSLContext | None) -> aiohttp.ClientSession:
    """An aiohttp session, for an endpoint reached through a proxy."""
    connector = aiohttp.TCPConnector(
        limit=settings.max_pool_connections,
        ssl=context if context is not None else False,
        keepalive_timeout=KEEPALIVE_S,
    )
    return aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(
            sock_connect=settings.connect_timeout_s, sock_read=settings.read_timeout_s
        ),
        auto_decompress=False,
        skip_auto_headers=("Content-Type",),
    )


def _lowered(headers: Mapping[str, str]) -> dict[str, str]:
    """aiohttp's headers as lean_http gives them, and as aiobotocore reads them: names
    lower-cased, a repeated name's last value."""
    return {name.lower(): value for name, value in headers.items()}


def transport_error(exc: Exception, url: str, proxy: str | None = None) -> Exception:
    """aiohttp's and the OS's exceptions as aiobotocore's HTTP session raises them."""
    error: Exception
    if isinstance(exc, lean_http.HttpError):
        return _http_error(exc, url)
    closed = (
        aiohttp.ServerDisconnectedError,
        aiohttp.ClientPayloadError,
        aiohttp.http_exceptions.BadStatusLine,
    )
    if isinstance(exc, aiohttp.ClientSSLError):
        error = SSLError(endpoint_url=url, error=exc)
    elif isinstance(exc, aiohttp.ClientProxyConnectionError | aiohttp.ClientHttpProxyError):
        error = ProxyConnectionError(proxy_url=mask_proxy_url(proxy or ""), error=exc)
    elif isinstance(exc, closed):
        error = ConnectionClosedError(error=exc, endpoint_url=url)
    elif isinstance(exc, aiohttp.ServerTimeoutError) and str(exc).lower().startswith("connect"):
        error = ConnectTimeoutError(endpoint_url=url, error=exc)
    elif isinstance(exc, aiohttp.ServerTimeoutError | TimeoutError):
        error = ReadTimeoutError(endpoint_url=url, error=exc)
    elif isinstance(exc, aiohttp.ClientConnectionError | socket.gaierror):
        error = EndpointConnectionError(endpoint_url=url, error=exc)
    else:
        error = HTTPClientError(error=exc)
    return error


#: lean_http's errors as botocore's: the classes aiohttp's errors map to (first match wins).
_HTTP_ERRORS: tuple[tuple[type[lean_http.HttpError], Callable[..., Exception]], ...] = (
    (lean_http.ConnectTimeout, ConnectTimeoutError),
    (lean_http.ConnectFailed, EndpointConnectionError),
    (lean_http.TlsFailed, SSLError),
    (lean_http.ReadTimeout, ReadTimeoutError),
    (lean_http.Closed, ConnectionClosedError),
    (lean_http.HttpError, HTTPClientError),
)


def _http_error(exc: lean_http.HttpError, url: str) -> Exception:
    kind = next(botocores for ours, botocores in _HTTP_ERRORS if isinstance(exc, ours))
    error: Exception = kind(endpoint_url=url, error=exc)
    return error


class LeanTransport:
    """Signed JSON calls to SQS with a client's credentials, endpoint and retry rules.

    Make one with `await LeanTransport.open(client, settings)`; `await call(operation,
    params)` answers what botocore's `client.<operation>(**params)` would, or raises what it
    would raise.
    """

    def __init__(
        self,
        *,
        client: Any,
        retry: StandardRetry,
        credentials: Any,
        user_agent: str,
        pool: lean_http.HttpPool | None = None,
        session: aiohttp.ClientSession | None = None,
        proxy: str | None = None,
    ) -> None:
        if (pool is None) == (session is None):
            raise ValueError("LeanTransport: give it a pool or (for a proxy) a session")
        meta = client.meta
        self._url = _request_url(meta.endpoint_url)
        self._region: str = meta.region_name
        self._signer = RequestSigner(
            self._url,
            meta.region_name,
            meta.service_model.signing_name or "sqs",
            query_compatible=bool(meta.service_model.is_query_compatible),
        )
        self._exceptions = client.exceptions
        self._service_model = meta.service_model
        self._read_timeout: float | None = meta.config.read_timeout
        self._credentials = credentials
        self._user_agent = user_agent
        self._pool = pool
        self._session = session
        self._retry = retry
        self._proxy = proxy

    @classmethod
    async def open(
        cls,
        client: Any,
        settings: SqsSettings,
        *,
        session: AioSession,
        ca_bundle: str | None = None,
    ) -> LeanTransport:
        """A transport for `client` (an entered aiobotocore SQS client that `session` made
        from `settings`); `aclose()` it."""
        url = _request_url(client.meta.endpoint_url)
        config = client.meta.config
        # As botocore's endpoint does: the config's proxies, else the environment's
        # (HTTP_PROXY, HTTPS_PROXY, NO_PROXY).
        found = config.proxies if config.proxies is not None else get_environ_proxies(url)
        proxies = ProxyConfiguration(proxies=found, proxies_settings=config.proxies_config)
        proxy = proxies.proxy_url_for(url)
        context = await _ssl_context(url, ca_bundle)
        made = {
            "client": client,
            "retry": StandardRetry(client.meta.service_model, settings.max_attempts),
            "credentials": await _credentials(session, settings),
            "user_agent": _user_agent(session, client),
        }
        if proxy is not None:
            return cls(**made, session=_session(settings, context), proxy=proxy)
        pool = lean_http.HttpPool(
            url,
            limit=settings.max_pool_connections,
            connect_timeout_s=settings.connect_timeout_s,
            read_timeout_s=settings.read_timeout_s,
            keepalive_s=KEEPALIVE_S,
            ssl_context=context,
        )
        return cls(**made, pool=pool)

    async def aclose(self) -> None:
        if self._pool is not None:
            await self._pool.aclose()
        if self._session is not None:
            await self._session.close()

    async def call(self, operation: str, params: Mapping[str, Any]) -> dict[str, Any]:
        """One SQS call with botocore's retries; its answer as botocore would parse it."""
        tracer = lean_tracing.tracer()
        if tracer is None:
            return await self._call(operation, params)
        return await lean_tracing.traced(
            tracer, operation, self._region, params, lambda: self._call(operation, params)
        )

    async def _call(self, operation: str, params: Mapping[str, Any]) -> dict[str, Any]:
        body = lean_wire.encode(params)
        # The call's context, as botocore's endpoint keeps it: its retry handler writes
        # `max` into `retries`, and gives quota back by what it recorded here.
        retries: dict[str, Any] = {"attempt": 1, "invocation-id": str(uuid.uuid4())}
        context: dict[str, Any] = {"retries": retries}
        attempt = 1
        while True:
            try:
                status, headers, raw = await self._attempt(operation, body, retries)
            except (BotoConnectionError, HTTPClientError) as exc:  # what _attempt raises
                delay = await self._retry.delay(operation, attempt, context, exception=exc)
                if delay is None:
                    raise
            else:
                if is_redirect(status):  # never followed, nor retried
                    raise refuse(status, self._url, headers.get("location"))
                if status < 301:  # botocore's line between an answer and an error
                    self._retry.succeeded(context, status)
                    return self._answer(operation, status, headers, raw, attempt)
                parsed = lean_wire.error_answer(status, headers, raw)
                error = (status, headers, parsed)
                delay = await self._retry.delay(operation, attempt, context, answer=error)
                if delay is None:
                    parsed["ResponseMetadata"]["RetryAttempts"] = attempt - 1
                    raise self._client_error(operation, status, headers, raw, parsed)
                self._set_ttl(retries, headers)
            await anyio.sleep(delay)
            attempt += 1
            retries["attempt"] = attempt

    def _answer(
        self, operation: str, status: int, headers: dict[str, str], raw: bytes, attempt: int
    ) -> dict[str, Any]:
        try:
            parsed = lean_wire.answer(operation, raw)
        except ValueError as exc:
            raise ResponseParserError(
                f"{operation}: unreadable answer ({type(exc).__name__})"
            ) from exc
        metadata = parsed["ResponseMetadata"] = lean_wire.metadata(status, headers)
        metadata["RetryAttempts"] = attempt - 1
        if attempt >= self._retry.max_attempts:
            # botocore's retry handler sees every answer and marks one on the last attempt.
            metadata["MaxAttemptsReached"] = True
        if status >= 300:  # aiobotocore's line for raising: 300 is parsed, then raised
            raise ClientError(parsed, operation)
        return parsed

    def _client_error(
        self,
        operation: str,
        status: int,
        headers: dict[str, str],
        raw: bytes,
        parsed: dict[str, Any],
    ) -> ClientError:
        """The error as aiobotocore raises it: the fields of the error's modelled shape
        added to the answer (its endpoint's `_add_modeled_error_fields`, by botocore's own
        parser), and the class `client.exceptions` has for the query code, else the code
        (botocore's `_handle_sqs_compatible_error`)."""
        error = parsed["Error"]
        shape = self._service_model.shape_for_error_code(error.get("Code"))
        if shape is not None:
            answer = {"status_code": status, "headers": parsed["ResponseMetadata"]["HTTPHeaders"]}
            parsed.update(_JSON_PARSER.parse({**answer, "body": raw}, shape))
        code = error.get("QueryErrorCode") or error.get("Code")
        error_class: type[ClientError] = self._exceptions.from_code(code)
        return error_class(parsed, operation)

    def _set_ttl(self, retries: dict[str, Any], headers: Mapping[str, str]) -> None:
        """`ttl` for the next attempt's `amz-sdk-request`, from the answer's Date, as
        botocore's endpoint sets it (it ignores a date it cannot read; so does this)."""
        date = headers.get("date")
        if not date or self._read_timeout is None:
            return
        try:
            retries["ttl"] = _ttl(date, self._read_timeout)
        except Exception:  # botocore's own rule: a bad Date only loses the ttl
            retries.pop("ttl", None)

    async def _attempt(
        self, operation: str, body: bytes, retries: Mapping[str, Any]
    ) -> tuple[int, dict[str, str], bytes]:
        headers = await self._signed_headers(operation, body)
        headers["amz-sdk-invocation-id"] = retries["invocation-id"]
        headers["amz-sdk-request"] = "; ".join(
            f"{key}={retries[key]}" for key in ("ttl", "attempt", "max") if key in retries
        )
        try:
            if self._pool is not None:
                return await self._pool.post(self._signer.host, headers, body)
            assert self._session is not None
            async with self._session.post(
                self._url, data=body, headers=headers, proxy=self._proxy, allow_redirects=False
            ) as response:
                return response.status, _lowered(response.headers), await response.read()
        except Exception as exc:
            raise transport_error(exc, self._url, self._proxy) from exc

    async def _signed_headers(self, operation: str, body: bytes) -> dict[str, str]:
        credentials = self._credentials
        frozen = None if credentials is None else await credentials.get_frozen_credentials()
        if frozen is None or frozen.access_key is None:
            raise NoCredentialsError()
        headers = self._signer.headers(frozen, operation, body)
        headers["User-Agent"] = self._user_agent
        headers["Accept-Encoding"] = "identity"
        headers["Accept"] = "*/*"  # what aiohttp adds to botocore's requests
        return headers
