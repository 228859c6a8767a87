"""Reading a request's body within bounds: at most `max_bytes`, within `timeout_s`.

Rules this module keeps:
- A body declared longer than `max_bytes` (Content-Length) is refused before a byte of it is
  read; a body without a length (chunked) is read until it passes `max_bytes`, then refused.
  Either way the server holds at most `max_bytes` (plus one network chunk) of one request,
  and the answer (413, `RequestEntityTooLarge`) closes the connection, so the rest of the
  upload is never read.
- A body that does not arrive whole within `timeout_s` of the request's start is refused
  (408, `RequestTimeout`): a slow or stalled client cannot hold a handler forever.
- Nothing of the body is ever repeated in an error.
"""

from __future__ import annotations

import anyio
from aiohttp import web

from backends.serve.sqs.errors import SqsError

__all__ = ["DEFAULT_BODY_TIMEOUT_S", "DEFAULT_MAX_REQUEST_BYTES", "read_body"]

#: The largest request served. SQS's largest valid request is a 10-entry batch of 1 MiB in
#: all; percent-encoding (query protocol) or JSON escapes can triple it on the wire.
DEFAULT_MAX_REQUEST_BYTES = 4 * 1024 * 1024 + 64 * 1024
DEFAULT_BODY_TIMEOUT_S = 30.0
_CHUNK = 64 * 1024


def too_large(max_bytes: int) -> SqsError:
    return SqsError("RequestEntityTooLarge", f"The request is larger than {max_bytes} bytes.")


async def read_body(request: web.BaseRequest, *, max_bytes: int, timeout_s: float) -> bytes:
    """The whole body of `request`, or `SqsError` (too large, too slow)."""
    declared = request.content_length
    if declared is not None and declared > max_bytes:
        raise too_large(max_bytes)
    chunks: list[bytes] = []
    size = 0
    with anyio.move_on_after(timeout_s) as scope:
        while True:
            chunk = await request.content.read(_CHUNK)
            if not chunk:
                break
            size += len(chunk)
            if size > max_bytes:
                raise too_large(max_bytes)
            chunks.append(chunk)
    if scope.cancelled_caught:
        raise SqsError("RequestTimeout", f"The request body did not arrive within {timeout_s} s.")
    return b"".join(chunks)
