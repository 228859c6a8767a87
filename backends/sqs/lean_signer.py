"""`RequestSigner`: the lean path's SigV4 headers, made by botocore's `SigV4Auth`.

Signing an SQS call through botocore's `AWSRequest` cost about as much CPU as the rest of
the lean call together (docs/profile.md: `_sanitize_header`, `__setitem__`, `get_all`): its
headers object is an `email.message.Message` (every set and read sanitised, names
lower-cased again and again), `SigV4Auth.headers_to_sign` builds another one twice per
signature, and reading `request.body` prepares the whole request anew. So
`SigV4Auth.add_auth` is handed a lighter request: a plain object with the attributes the
signer reads, its headers a plain dictionary, its body the bytes; and the signer's
`headers_to_sign` builds a dictionary with `get_all` rather than botocore's
`HTTPHeaders`. Rules this module keeps:
- Everything else is botocore's own: the timestamp, the canonical request, the payload
  hash, the string to sign, the key derivation and signature, the security-token and
  `Authorization` headers.
- `headers_to_sign` selects what botocore's does: every header but botocore's unsigned
  ones (`SIGNED_HEADERS_BLACKLIST`), by lower-cased name, plus `host` as botocore derives it
  from the URL (asked of botocore's `headers_to_sign` once, at construction).
- The signed headers are the ones botocore's JSON serialiser writes for SQS: content type,
  target, and `x-amzn-query-mode: true` for a query-compatible service (SQS is one: it makes
  the service answer its query-protocol error codes too, in `x-amzn-query-error`).
- The headers of one request have distinct names (this module writes them all), which is
  what lets a dictionary stand for botocore's multi-valued map.
- Tests compare every signed header with what `SigV4Auth` makes of the same request as an
  `AWSRequest`: with and without a session token, an endpoint with a path, over HTTPS,
  and a body that is not ASCII.
"""

from __future__ import annotations

from typing import Any

from botocore.auth import SIGNED_HEADERS_BLACKLIST, SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import ReadOnlyCredentials

from backends.sqs import lean_wire

__all__ = ["RequestSigner"]

_UNSIGNED = frozenset(SIGNED_HEADERS_BLACKLIST)


class _HeaderMap(dict[str, str]):
    """The header map `SigV4Auth.canonical_headers` reads (names lower-cased, one value)."""

    __slots__ = ()

    def get_all(self, name: str) -> list[str]:
        return [self[name]]


class _Request:
    """What `SigV4Auth.add_auth` reads and writes of a request (botocore's `AWSRequest`
    would prepare itself to answer `body`)."""

    __slots__ = ("body", "context", "headers", "method", "params", "url")

    def __init__(self, url: str, headers: dict[str, str], body: bytes) -> None:
        self.method = "POST"
        self.url = url
        self.headers = headers
        self.body = body
        self.params: dict[str, str] = {}
        self.context: dict[str, Any] = {}


class _SigV4(SigV4Auth):  # type: ignore[misc]  # botocore ships no type hints
    """botocore's SigV4 signer with the header map above; the rest is inherited."""

    def __init__(self, credentials: ReadOnlyCredentials, name: str, region: str, host: str) -> None:
        super().__init__(credentials, name, region)
        self._host = host

    def headers_to_sign(self, request: Any) -> _HeaderMap:
        selected = _HeaderMap()
        for name, value in request.headers.items():
            lowered = name.lower()
            if lowered not in _UNSIGNED:
                selected[lowered] = value
        if "host" not in selected:
            selected["host"] = self._host
        return selected


class RequestSigner:
    """Signed headers for SQS JSON calls posted to one URL, in one region."""

    __slots__ = ("_host", "_query_compatible", "_region", "_signing_name", "_url")

    def __init__(
        self, url: str, region: str, signing_name: str, *, query_compatible: bool = True
    ) -> None:
        self._url = url
        self._query_compatible = query_compatible
        # botocore's own host header for this URL (lower-cased, default port left out),
        # derived once by its own header selection over an empty request.
        host = SigV4Auth(None, signing_name, region).headers_to_sign(AWSRequest(url=url))
        self._host: str = host["host"]
        self._region = region
        self._signing_name = signing_name

    def headers(
        self, credentials: ReadOnlyCredentials, operation: str, body: bytes
    ) -> dict[str, str]:
        """The headers of a call to `operation` with `body`, signed now with `credentials`
        (frozen for this attempt): content type, target, query mode, date, token,
        authorization."""
        headers = {
            "X-Amz-Target": lean_wire.TARGET_PREFIX + operation,
            "Content-Type": lean_wire.CONTENT_TYPE,
        }
        if self._query_compatible:
            headers["x-amzn-query-mode"] = "true"
        request = _Request(self._url, headers, body)
        _SigV4(credentials, self._signing_name, self._region, self._host).add_auth(request)
        return request.headers
