"""Start-up checks: settings that cannot work with a queue as it is configured.

Pure: from a handler's settings and the queue's attributes to a list of warnings, each one
line that says what will go wrong and what to change. The worker still starts: these are
often deliberate in tests and migrations.
"""

from __future__ import annotations

from worker.config import ErrorPolicy, LeaseConfig, OnError
from worker.types import QueueInfo

__all__ = ["check_queue"]


def check_queue(policy: ErrorPolicy, info: QueueInfo, lease: LeaseConfig) -> list[str]:
    """Warnings for a handler with error `policy` on the queue `info` describes."""
    warnings: list[str] = []
    redrive = info.redrive
    if policy.on_error is OnError.EXPIRE and redrive is None:
        warnings.append(
            f"queue {info.name!r} has no dead-letter queue but the handler's error policy is "
            "'expire': a message that always fails is received again and again until the "
            "retention period ends; add a RedrivePolicy"
        )
    if policy.on_error is OnError.BACKOFF and redrive is not None:
        backoff = policy.backoff
        last = backoff.delay_s(redrive.max_receive_count)
        if last < backoff.max_s:
            warnings.append(
                f"queue {info.name!r}: maxReceiveCount={redrive.max_receive_count} sends a "
                f"message to {redrive.dead_letter_queue!r} after a backoff of at most "
                f"{last:g} s, before the schedule reaches max_s={backoff.max_s:g} s; raise "
                "maxReceiveCount or shorten the schedule"
            )
    if info.visibility_timeout_s <= lease.renew_margin_s:
        warnings.append(
            f"queue {info.name!r}: VisibilityTimeout={info.visibility_timeout_s} s is not "
            f"longer than renew_margin_s={lease.renew_margin_s:g} s; messages received by "
            "other clients of this queue lapse before a renewal could reach them"
        )
    if policy.on_error is OnError.EXPIRE and info.fifo:
        warnings.append(
            f"queue {info.name!r} is FIFO and the error policy is 'expire': a failing message "
            f"blocks its group for up to extension_s={lease.extension_s} s on every failure"
        )
    return warnings
