"""SMQ's request signature, checked: `Authorization: MNS <AccessKeyId>:<signature>`.

The signature is base64(HMAC-SHA1(secret, string to sign)), the string to sign being

    METHOD \\n Content-MD5 \\n Content-Type \\n Date \\n
    <each x-mns-* header, lower-cased and sorted, as "name:value\\n"><path and query as sent>

(the SDK's own reading of it). Pure: no clock, no I/O. The endpoint does not check the
Date's age (a local test server has no replay to fear) and says so in its module.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping

__all__ = ["authorization_problem", "string_to_sign"]


def string_to_sign(method: str, headers: Mapping[str, str], resource: str) -> str:
    """`headers` with lower-case names."""
    mns = "".join(
        f"{name}:{headers[name]}\n" for name in sorted(headers) if name.startswith("x-mns-")
    )
    fixed = (headers.get(name, "") for name in ("content-md5", "content-type", "date"))
    return f"{method}\n" + "\n".join(fixed) + f"\n{mns}{resource}"


def authorization_problem(
    method: str,
    headers: Mapping[str, str],
    resource: str,
    credentials: Mapping[str, str],
) -> tuple[str, str] | None:
    """Why the request's signature is refused, as (code, message), or None when it is good.
    `credentials`: AccessKeyId -> AccessKeySecret."""
    given = headers.get("authorization")
    if given is None:
        return "MissingAuthorizationHeader", "Authorization header is required."
    scheme, _, rest = given.partition(" ")
    key_id, _, signature = rest.partition(":")
    if scheme != "MNS" or not key_id or not signature:
        return "InvalidAuthorizationHeader", "The Authorization header format is invalid."
    secret = credentials.get(key_id)
    if secret is None:
        return "InvalidAccessKeyId", "The AccessKeyId is not known to this endpoint."
    digest = hmac.new(
        secret.encode(), string_to_sign(method, headers, resource).encode(), hashlib.sha1
    ).digest()
    if not hmac.compare_digest(base64.b64encode(digest).decode(), signature):
        return "SignatureDoesNotMatch", "The request signature does not match."
    return None
