"""`/api/status`: what the console shows, as one JSON document (version 1, documented in
docs/how-to/console.md; fields are added, never renamed or removed, within a version).

Never a body unless the worker was started with `--console-bodies`, and then cut to
`BODY_CAP` characters. At most `MESSAGES_CAP` messages are listed, nearest deadline first;
`messages_total` says how many are held.
"""

from __future__ import annotations

import heapq
import os
from collections import Counter
from typing import Any

from worker.core.lease import Lease, LeaseState
from worker.ops.history import History, read_counts
from worker.runtime.supervisor import Supervisor
from worker.types import ReceivedMessage

__all__ = ["BODY_CAP", "MESSAGES_CAP", "VERSION", "status"]

VERSION = 1
MESSAGES_CAP = 500
BODY_CAP = 2_000


def status(
    supervisor: Supervisor, history: History, *, started_at: float, bodies: bool = False
) -> dict[str, Any]:
    now = supervisor.clock.now()
    wall = now + supervisor.clock.wall_offset_s()
    held = supervisor.held()
    # Only the rows shown are built: with 100,000 held, a full sort and 100,000 rows for 500.
    shown = heapq.nsmallest(MESSAGES_CAP, held, key=lambda item: item[0].deadline)
    return {
        "version": VERSION,
        "worker": {
            "name": supervisor.app.name,
            "state": _state(supervisor),
            "pid": os.getpid(),
            "started_at": started_at,
            "now": wall,
        },
        "queues": _queues(supervisor, Counter(lease.queue for lease, _ in held)),
        "history": {
            "interval_s": history.interval_s,
            "points": [{"at": p.at, "queues": p.counts} for p in history.points()],
        },
        "messages_total": len(held),
        "messages": [_message(supervisor, lease, got, now, bodies) for lease, got in shown],
    }


def _state(supervisor: Supervisor) -> str:
    if supervisor.stopping:
        return "draining"
    return "running" if supervisor.receiving else "starting"


def _queues(supervisor: Supervisor, held: Counter[str]) -> list[dict[str, Any]]:
    metrics = supervisor.metrics
    counts = read_counts(metrics, supervisor.app.registry.queues)
    rows = []
    for spec in supervisor.app.registry:
        info = supervisor.queues.get(spec.queue)
        queue_counts = dict(counts.get(spec.queue, {}))
        flow = supervisor.flows.get(spec.queue)
        rows.append(
            {
                "queue": spec.queue,
                "handler": spec.name,
                "in_flight": held[spec.queue],
                "max_in_flight": spec.max_in_flight or supervisor.app.config.max_in_flight,
                "in_flight_limit": info.in_flight_limit if info else None,
                # Handlers that may run at once now: the adaptive limit, None when it is off.
                "concurrency_limit": (
                    flow.limit.current if flow is not None and flow.limit is not None else None
                ),
                "received": queue_counts.pop("received", 0.0),
                "outcomes": queue_counts,
            }
        )
    return rows


def _message(
    supervisor: Supervisor, lease: Lease, got: ReceivedMessage, now: float, bodies: bool
) -> dict[str, Any]:
    row: dict[str, Any] = {
        "queue": lease.queue,
        "message_id": lease.message_id,
        "handler": supervisor.app.registry[lease.queue].name,
        "receive_count": got.receive_count,
        "held_s": round(now - lease.received_at, 3),
        "renewals": lease.renewals,
        "deadline_in_s": round(lease.deadline - now, 3),
        "state": _lease_state(lease),
    }
    if bodies:
        row["body"] = got.body[:BODY_CAP]
    return row


def _lease_state(lease: Lease) -> str:
    if lease.state is LeaseState.LOST:
        return "lost"
    if lease.state in (LeaseState.SETTLING, LeaseState.DONE):
        return "settling"
    return "running" if lease.scope is not None else "waiting"
