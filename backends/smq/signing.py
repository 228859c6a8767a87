"""Signing an SMQ request: `Authorization: MNS <AccessKeyId>:<base64 HMAC-SHA1>` over
METHOD, Content-MD5, Content-Type, Date, the sorted `x-mns-*` headers and the path with its
query, each on its own line (SMQ's documented scheme). Pure: the caller gives the date."""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping

__all__ = ["sign"]


def sign(method: str, resource: str, headers: Mapping[str, str], key_id: str, secret: str) -> str:
    """The Authorization header's value; `headers` with lower-case names."""
    mns = "".join(f"{k}:{headers[k]}\n" for k in sorted(headers) if k.startswith("x-mns-"))
    text = "\n".join(
        [method, headers.get("content-md5", ""), headers.get("content-type", ""), headers["date"]]
    )
    digest = hmac.new(secret.encode(), f"{text}\n{mns}{resource}".encode(), hashlib.sha1).digest()
    return f"MNS {key_id}:{base64.b64encode(digest).decode()}"
