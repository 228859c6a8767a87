"""What one client of the ops listener may take: connections, time, bytes, nesting.

The ops port is reachable by whatever reaches the pod (Prometheus, the kubelet, a browser
through `kubectl port-forward`, and anything else on the network): nothing a client does
there may crash the worker, stall a lease renewal, or grow its logs without bound.

- **Connections**: at most `max_connections` open at once. Past it the listener stops
  accepting: further connections wait in the kernel's listen backlog (and past that, the
  kernel drops their SYNs), where they cost the worker no file descriptor. The default, 64,
  is far above what Prometheus, the probes and a console need, and never more than a
  quarter of the process's open-file limit (`RLIMIT_NOFILE`), which leaves the rest to the
  worker's own connections to its queue service; a value asked for above that quarter is a
  `ConfigError`.
- **Time**: a request's head (request line and headers) must be complete
  `header_timeout_s` after the connection was accepted (its first request) or after its
  first byte (a later one); a connection kept alive after an answer is closed when no byte
  of the next request came within `idle_timeout_s`; a body must be complete
  `body_timeout_s` after the head (else 408), and the whole request, answer written,
  `request_timeout_s` after the head. A client that stops reading its answer is cut off at
  that point too.
- **Bytes**: a request line or header line of more than `MAX_LINE_BYTES` is 400; a body of
  more than `max_body_bytes` is 413.
- **Nesting**: a JSON body nested deeper than `MAX_JSON_DEPTH` is 400, found by a scan
  before any parser sees it (the standard library's parser recurses once per level: 20,000
  levels in 40 kB raised `RecursionError`, a 500).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from worker.errors import ConfigError

__all__ = [
    "DEFAULT_MAX_CONNECTIONS",
    "MAX_JSON_DEPTH",
    "MAX_LINE_BYTES",
    "OpsLimits",
    "TooDeep",
    "connection_cap",
    "json_depth",
    "loads_bounded",
    "open_file_limit",
]

#: Connections open at once when no cap is given (or a quarter of the open-file limit,
#: when that is lower).
DEFAULT_MAX_CONNECTIONS = 64
#: The share of the process's open-file limit the ops listener may take, at most.
_FD_SHARE = 4
#: The longest request line, and the longest header line, in bytes (aiohttp's default).
MAX_LINE_BYTES = 8190
#: Levels of arrays and objects a JSON body may nest; the console's bodies use 1.
MAX_JSON_DEPTH = 32


def _check(ok: bool, setting: str, value: object, rule: str) -> None:
    if not ok:
        raise ConfigError(f"{setting}={value!r}: {rule}")


@dataclass(frozen=True, slots=True, kw_only=True)
class OpsLimits:
    """The ops listener's bounds (see the module's text); `OpsLimits()` is the default."""

    #: Connections open at once; None: `DEFAULT_MAX_CONNECTIONS`, or a quarter of the
    #: open-file limit when that is lower.
    max_connections: int | None = None
    #: A connection kept alive after an answer is closed when no byte of the next request
    #: came within this long.
    idle_timeout_s: float = 10.0
    #: A request's head must be complete this long after the connection was accepted (its
    #: first request) or after the head's first byte (a later request).
    header_timeout_s: float = 5.0
    #: A request's body must be complete this long after its head (else 408).
    body_timeout_s: float = 5.0
    #: A request must be answered, and its answer taken, this long after its head.
    request_timeout_s: float = 30.0
    #: The largest body (else 413).
    max_body_bytes: int = 64 * 1024
    #: A client fault of one kind is logged at most once this often, with the number of
    #: those not logged since.
    log_every_s: float = 60.0

    def __post_init__(self) -> None:
        if self.max_connections is not None:
            _check(
                isinstance(self.max_connections, int) and self.max_connections >= 1,
                "max_connections",
                self.max_connections,
                "must be a whole number >= 1",
            )
        for name in (
            "idle_timeout_s",
            "header_timeout_s",
            "body_timeout_s",
            "request_timeout_s",
            "log_every_s",
        ):
            value = getattr(self, name)
            _check(math.isfinite(value) and value > 0, name, value, "must be a positive number")
        _check(
            isinstance(self.max_body_bytes, int) and self.max_body_bytes >= 1,
            "max_body_bytes",
            self.max_body_bytes,
            "must be a whole number >= 1",
        )


def open_file_limit() -> int | None:
    """The process's soft RLIMIT_NOFILE; None when unlimited or unknown."""
    try:
        import resource
    except ImportError:  # not on Unix
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY or soft <= 0 else int(soft)


def connection_cap(
    limits: OpsLimits, *, setting: str = "max_connections", nofile: int | None = None
) -> int:
    """The connections the listener may hold at once under `limits`, with the open-file
    limit `nofile` (default: this process's); ConfigError for a cap asked above its share."""
    if nofile is None:
        nofile = open_file_limit()
    ceiling = max(1, nofile // _FD_SHARE) if nofile is not None else None
    asked = limits.max_connections
    if asked is None:
        return DEFAULT_MAX_CONNECTIONS if ceiling is None else min(DEFAULT_MAX_CONNECTIONS, ceiling)
    if ceiling is not None and asked > ceiling:
        raise ConfigError(
            f"{setting}={asked}: must be at most {ceiling}, a quarter of this process's "
            f"open-file limit ({nofile}, RLIMIT_NOFILE): the rest is the worker's own "
            "(raise the limit, e.g. `ulimit -n`, to allow more)"
        )
    return asked


class TooDeep(ValueError):
    """A JSON text nested deeper than allowed."""


#: A JSON string, escapes included, or an unterminated one up to the end: every quote
#: starts a match, and the possessive loop never backtracks, so the scan is linear (a
#: plain `"(?:[^"\\]|\\.)*"` takes quadratic time over a run of escaped quotes).
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*+(?:"|\\?\Z)', re.DOTALL)
#: Every byte but a bracket, for `bytes.translate(None, delete=...)`.
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def json_depth(data: bytes, *, stop_above: int | None = None) -> int:
    """How deep the arrays and objects of the JSON text `data` nest (0 for a scalar); the
    scan stops at the first level past `stop_above`, when given."""
    brackets = _STRING.sub(b"", data).translate(None, delete=_NOT_BRACKETS)
    depth = deepest = 0
    for byte in brackets:
        if byte in b"[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if stop_above is not None and deepest > stop_above:
                    break
        else:
            depth -= 1
    return deepest


def loads_bounded(data: bytes, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """`json.loads` of a body nested at most `max_depth` deep; `TooDeep` (a ValueError)
    before parsing one nested deeper, `ValueError` for one that is not JSON."""
    brackets = data.count(b"[") + data.count(b"{")
    if brackets > max_depth and json_depth(data, stop_above=max_depth) > max_depth:
        raise TooDeep(f"JSON nested more than {max_depth} deep")
    return json.loads(data)
