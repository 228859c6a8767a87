"""From what a handler did to what becomes of its message: a pure mapping.

    SUCCEEDED, DISCARDED          -> delete
    DUPLICATE                     -> delete (handled before: an idempotency guard said so)
    RETRY(after_s)                -> release, visible again after `after_s`
    FAILED, TIMED_OUT             -> the handler's error policy:
                                       default -> release now on the first receive, then
                                                  after backoff(receive count - 1), jittered
                                       release -> release now (shortest visibility)
                                       backoff -> release after backoff(receive count)
                                       expire  -> forget: stop extending, let it lapse
    SHUTDOWN                      -> release now, so another worker takes it at once
    SKIPPED                       -> release now: not run, to keep a FIFO group in order
    LEASE_LOST                    -> forget: the handle is no longer ours to use

A release never asks for more than the backend allows in one call, nor for longer than the
message may stay invisible counted from its receive (`cap_left_s`).

The default policy's jitter is drawn from the message id and its receive count, not from a
random source: the core stays pure and a test sees the same delays on every run, while
messages that failed together (different ids) come back apart.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from enum import Enum

from worker.config import ErrorPolicy, OnError

__all__ = ["FIXED", "Action", "Outcome", "Settlement", "default_delay_s", "settlement_for"]


class Outcome(Enum):
    # Hashed by identity, as members compare: Enum's own __hash__ is Python code that
    # hashes the name, and outcomes and actions key dicts several times a message.
    __hash__ = object.__hash__

    SUCCEEDED = "succeeded"
    DISCARDED = "discarded"
    DUPLICATE = "duplicate"
    RETRY = "retry"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    SHUTDOWN = "shutdown"
    SKIPPED = "skipped"
    LEASE_LOST = "lease_lost"


class Action(Enum):
    __hash__ = object.__hash__  # as Outcome's

    DELETE = "delete"
    RELEASE = "release"
    FORGET = "forget"


@dataclass(frozen=True, slots=True)
class Settlement:
    action: Action
    visibility_s: int = 0


DELETE = Settlement(Action.DELETE)
FORGET = Settlement(Action.FORGET)

#: The outcomes whose settlement no policy, count or cap changes: what `settlement_for`
#: answers for them, to look up without the call (once a message on the hot path).
FIXED: dict[Outcome, Settlement] = {
    Outcome.SUCCEEDED: DELETE,
    Outcome.DISCARDED: DELETE,
    Outcome.DUPLICATE: DELETE,
    Outcome.LEASE_LOST: FORGET,
}

#: The default policy cuts each delay by up to this fraction of it.
JITTER = 0.5


def default_delay_s(policy: ErrorPolicy, receive_count: int, message_id: str) -> float:
    """The default policy's delay after a failure on receive `receive_count`."""
    if receive_count <= 1:
        return 0.0  # most failures pass: the first retry comes at once
    key = f"{message_id}\x00{receive_count}".encode()
    draw = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") / 2**64
    return policy.backoff.delay_s(receive_count - 1) * (1.0 - JITTER * draw)


def settlement_for(
    outcome: Outcome,
    *,
    policy: ErrorPolicy,
    receive_count: int,
    message_id: str = "",
    retry_after_s: float = 0.0,
    min_release_s: int = 0,
    max_visibility_s: int = 43_200,
    cap_left_s: float = 43_200.0,
) -> Settlement:
    """The settlement for `outcome` (see the module docstring for the table)."""
    fixed = FIXED.get(outcome)
    if fixed is not None:
        return fixed
    if outcome is Outcome.RETRY:
        delay = retry_after_s
    elif outcome in (Outcome.SHUTDOWN, Outcome.SKIPPED) or policy.on_error is OnError.RELEASE:
        delay = 0.0
    elif policy.on_error is OnError.DEFAULT:
        delay = default_delay_s(policy, receive_count, message_id)
    elif policy.on_error is OnError.BACKOFF:
        delay = policy.backoff.delay_s(receive_count)
    else:
        return FORGET
    ceiling = max(min_release_s, min(max_visibility_s, math.floor(max(0.0, cap_left_s))))
    if not delay < ceiling:  # also a nan or an infinity: clamp before rounding
        return Settlement(Action.RELEASE, ceiling)
    return Settlement(Action.RELEASE, max(min_release_s, math.ceil(delay)))
