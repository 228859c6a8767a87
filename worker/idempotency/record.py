"""Idempotency records and what a worker makes of one it finds: pure, no I/O.

Rules (times are wall-clock seconds, since records are shared between processes):
- A key's record is IN_PROGRESS (a claim: owner, token, `stale_at`) or COMPLETED (kept
  until `expires_at`, the completion's TTL).
- An in-progress claim is live while its owner's heartbeat is (`beat_until`, refreshed at
  the lease cadence by the owning process) and `stale_at` has not passed, each give or
  take the clock skew allowed between workers (`skew_s`: live that much longer). `stale_at` is the
  claiming lease's hard cap (`max_lease_s` from its receive); an owner that lets a claim go
  (its lease was lost, capped, or shut down) moves it to the moment it let go. So a crashed
  owner's claims go stale when its heartbeat runs out, a lapsed lease's claim at once, and
  no claim outlives the longest any lease can be held.
- A stale claim that was not let go (its owner's heartbeat ran out, or its cap passed) may
  belong to a live owner that a store outage cut off, holding a completion it could not
  write: another worker takes it over only after a grace (`worker.idempotency.guard`).
- A completed record whose TTL has passed is as good as absent.
- With payload validation, a record whose body hash differs from the message's is a
  mismatch: the same key for a different payload is an error, never a silent duplicate.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

__all__ = ["GC_SLACK_S", "Judgement", "Record", "RecordState", "Verdict", "body_hash", "judge"]

#: Stores drop a record (native expiry, pruning) this long after the later of its expiry
#: and stale time: before that, an expired record still answers, whatever the clock skew.
GC_SLACK_S = 300.0


class RecordState(Enum):
    """A key's record: claimed by a lease (in progress) or done (completed)."""

    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"


@dataclass(frozen=True, slots=True, kw_only=True)
class Record:
    """One key's record. `token` names one claim: writes that finish or drop a claim are
    conditional on it, so a claim taken over is never completed by its former owner."""

    key: str
    token: str
    state: RecordState
    owner: str
    #: In progress: when the claim is stale whatever its owner's heartbeat says.
    stale_at: float
    #: When the record may be overwritten or dropped (stores set their native TTL from it).
    expires_at: float
    body_hash: str | None = None
    #: The handler's return value as JSON, when results are cached.
    result: str | None = None

    def completed(self, *, at: float, ttl_s: float, result: str | None) -> Record:
        return replace(
            self, state=RecordState.COMPLETED, expires_at=at + ttl_s, stale_at=at, result=result
        )

    def let_go(self, *, at: float) -> Record:
        return replace(self, stale_at=min(self.stale_at, at))

    @property
    def was_let_go(self) -> bool:
        """An in-progress claim its owner let go: a claim is written with `stale_at` equal
        to `expires_at`, and only `let_go` moves `stale_at` before it."""
        return self.state is RecordState.IN_PROGRESS and self.stale_at < self.expires_at

    def to_json(self) -> str:
        fields = {
            "key": self.key,
            "token": self.token,
            "state": self.state.value,
            "owner": self.owner,
            "stale_at": self.stale_at,
            "expires_at": self.expires_at,
            "body_hash": self.body_hash,
            "result": self.result,
        }
        return json.dumps(fields, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes) -> Record:
        data: dict[str, Any] = json.loads(text)
        return cls(
            key=str(data["key"]),
            token=str(data["token"]),
            state=RecordState(data["state"]),
            owner=str(data["owner"]),
            stale_at=float(data["stale_at"]),
            expires_at=float(data["expires_at"]),
            body_hash=data.get("body_hash"),
            result=data.get("result"),
        )


class Verdict(Enum):
    COMPLETED = "completed"  # handled: a duplicate
    LIVE = "live"  # claimed by a live lease: come back later
    STALE = "stale"  # the claim's owner is gone or let it go: take it over
    MISMATCH = "mismatch"  # same key, another payload


@dataclass(frozen=True, slots=True)
class Judgement:
    verdict: Verdict
    #: LIVE: when the claim would go stale if its owner stopped refreshing its heartbeat.
    live_until: float = 0.0


def judge(
    record: Record,
    *,
    now: float,
    beat_until: float | None,
    body: str | None,
    skew_s: float = 0.0,
) -> Judgement:
    """What a worker holding a message of `record.key` makes of `record` at `now`.

    `beat_until`: the owner's heartbeat (None: none found); `body`: the message's body hash,
    or None when payloads are not validated; `skew_s`: how far the owner's clock may lag
    ours (a claim is live that long past its times: a reader whose clock runs ahead must not
    call a live claim stale).
    """
    if body is not None and record.body_hash is not None and body != record.body_hash:
        return Judgement(Verdict.MISMATCH)
    if record.state is RecordState.COMPLETED:
        if now < record.expires_at:
            return Judgement(Verdict.COMPLETED)
        return Judgement(Verdict.STALE)
    if beat_until is None:
        return Judgement(Verdict.STALE)
    live_until = min(beat_until, record.stale_at) + skew_s
    if now >= live_until:
        return Judgement(Verdict.STALE)
    return Judgement(Verdict.LIVE, live_until)


def body_hash(raw_body: str) -> str:
    return hashlib.sha256(raw_body.encode("utf-8")).hexdigest()
