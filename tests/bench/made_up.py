"""Made-up side-by-side rows for the report's table tests."""

from __future__ import annotations

from collections import Counter

from bench.peers import contenders as peers
from bench.peers.contenders import Contender
from bench.side_by_side import Row

#: Messages every made-up row drained.
MESSAGES = 1_000


def named(name: str) -> Contender:
    return next(c for c in peers.contenders() if c.name == name)


def row(
    contender: Contender,
    rate: float,
    cpu_ms: float,
    failure: str | None = None,
    *,
    hop_cpu_s: float = 0.0,
) -> Row:
    """`contender` draining MESSAGES at `rate` msgs/s for `cpu_ms` of CPU a message (or
    failing), 0.201 requests a message."""
    return Row(
        contender,
        "1.0",
        MESSAGES,
        wall_s=MESSAGES / rate if rate else 0.0,
        worker_cpu_s=cpu_ms * MESSAGES / 1000,
        server_cpu_s=0.05,
        hop_cpu_s=hop_cpu_s,
        requests=Counter({"ReceiveMessage": 101, "DeleteMessageBatch": 100}),
        failure=failure,
    )
