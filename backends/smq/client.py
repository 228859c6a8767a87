"""`SmqClient`: one signed HTTP call to SMQ on a shared aiohttp session, with a timeout.

Rules:
- Each call is signed with the date it is sent (`signing.sign`); the STS token, when there
  is one, goes in `security-token`.
- A call that cannot be answered in time, or whose connection breaks, is a
  `TransientBackendError` (the runtime's retry policy decides; this client does not resend:
  a resent ChangeMessageVisibility could retire the handle the first one handed out).
- At most `max_concurrency` calls are on the wire at once (the connector's limit).
"""

from __future__ import annotations

import email.utils
import urllib.parse

import aiohttp

from backends.smq.settings import SmqSettings
from backends.smq.signing import sign
from worker.errors import TransientBackendError

__all__ = ["SmqClient"]

_VERSION = "2015-06-06"
_XML = "text/xml;charset=UTF-8"


class SmqClient:
    def __init__(self, settings: SmqSettings) -> None:
        self._settings = settings
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=settings.max_concurrency),
            auto_decompress=False,
        )
        self.calls = 0

    async def call(
        self,
        method: str,
        resource: str,
        *,
        body: bytes = b"",
        wait_s: float = 0.0,
        headers: dict[str, str] | None = None,
        operation: str,
        queue: str,
    ) -> tuple[int, bytes]:
        """Send one request; answers (status, body) for any HTTP answer."""
        settings = self._settings
        sent = {"x-mns-version": _VERSION, "date": email.utils.formatdate(usegmt=True)}
        sent.update(headers or {})
        # Always sent and signed: aiohttp would add its own to a PUT without a body.
        sent["content-type"] = _XML
        sent["authorization"] = sign(
            method, resource, sent, settings.access_key_id, settings.access_key_secret
        )
        if settings.security_token:
            sent["security-token"] = settings.security_token
        timeout = aiohttp.ClientTimeout(total=wait_s + settings.call_timeout_s)
        self.calls += 1
        try:
            async with self._session.request(
                method,
                settings.endpoint + resource,
                data=body or None,
                headers=sent,
                timeout=timeout,
            ) as response:
                return response.status, await response.read()
        except (aiohttp.ClientError, TimeoutError) as error:
            raise TransientBackendError(
                f"{operation} on {queue!r}: {type(error).__name__}",
                operation=operation,
                queue=queue,
                code=type(error).__name__,
            ) from None

    async def aclose(self) -> None:
        await self._session.close()


def quote(value: str) -> str:
    return urllib.parse.quote(value, safe="")
