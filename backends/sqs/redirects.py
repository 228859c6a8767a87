"""`RedirectRefused`: an SQS call answered with a redirect, which no client here follows.

SQS never redirects. A 3xx comes from something in the way: a wrong endpoint or region, a
proxy's or a captive portal's page. Following it would send the signed request, with its
`X-Amz-Security-Token`, to another host, and hand that host's answer back as SQS's. So on
both clients, direct or through a proxy, for every call (issue 40):
- the first 3xx answer (300-399) ends the call: nothing is sent to the `Location`, and the
  call is not retried (the answer would be the same);
- it is raised as `RedirectRefused`, a botocore error (not an `HTTPClientError`, which
  botocore's standard mode would retry as transient), so `backends.sqs.errors.map_error`
  makes it a `FatalBackendError`: fix the endpoint, region or proxy;
- its message names the endpoint that answered, the status and where it pointed, each as
  an origin only (`scheme://host[:port]`, no user, path or query, which could hold a
  token); never the answer's body.
"""

from __future__ import annotations

from urllib.parse import urljoin, urlsplit

from botocore.exceptions import BotoCoreError

__all__ = ["RedirectRefused", "is_redirect", "refuse"]


class RedirectRefused(BotoCoreError):  # type: ignore[misc]  # botocore is untyped
    """An SQS endpoint answered a redirect; it was not followed."""

    fmt = (
        "{endpoint} answered HTTP {status} (a redirect{target}); SQS never redirects, so it "
        "was not followed and nothing was sent elsewhere: check the endpoint URL, the "
        "region and any proxy in the way"
    )


def is_redirect(status: int) -> bool:
    return 300 <= status < 400


def _origin(url: str) -> str:
    """`scheme://host[:port]` of `url`: no user, password, path, query or fragment."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:  # IPv6
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    return f"{parts.scheme}://{host}" + (f":{port}" if port is not None else "")


def refuse(status: int, endpoint_url: str, location: str | None) -> RedirectRefused:
    """The error for a redirect answered by `endpoint_url`, with its `Location` if any."""
    target = f" to {_origin(urljoin(endpoint_url, location))}" if location else ""
    return RedirectRefused(endpoint=_origin(endpoint_url), status=status, target=target)
