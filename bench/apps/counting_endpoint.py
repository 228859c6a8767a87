"""`lease-worker serve-sqs` plus `GET /_stats`, for endpoints that do not serve it yet.

    python -m bench.apps.counting_endpoint --host 127.0.0.1 --port PORT [serve-sqs options]

Counts every SQS operation the endpoint is asked for and answers `GET /_stats` with
`{"requests": {"<Operation>": count, ...}}`, the shape bench/side_by_side.py reads. It wraps
the endpoint's classes from the outside (a counter per call), so the server does the same
work as `lease-worker serve-sqs` otherwise.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from backends import sqs_endpoint
from worker import cli

requests: Counter[str] = Counter()
_call = sqs_endpoint.SqsService.call
_handle = sqs_endpoint._Handler.__call__


async def _counted_call(
    self: sqs_endpoint.SqsService, operation: str, params: Mapping[str, Any], base_url: str
) -> sqs_endpoint.Answer:
    requests[operation] += 1
    return await _call(self, operation, params, base_url)


async def _handle_with_stats(
    self: sqs_endpoint._Handler, request: web.BaseRequest
) -> web.StreamResponse:
    if request.method == "GET" and request.path == "/_stats":
        return web.json_response({"requests": dict(requests)})
    return await _handle(self, request)


def main() -> int:
    sqs_endpoint.SqsService.call = _counted_call  # type: ignore[method-assign]
    sqs_endpoint._Handler.__call__ = _handle_with_stats  # type: ignore[method-assign]
    return cli.main(["serve-sqs", *sys.argv[1:]])


if __name__ == "__main__":
    sys.exit(main())
