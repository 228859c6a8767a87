"""Start-up checks: settings that cannot work with the backend or with a queue as it is.

Pure: from the settings, the backend's `Limits` and the queue's attributes to an error or a
list of warnings.

- `check_config` refuses settings the backend cannot honour (`ConfigError`, naming the setting
  and the backend's limit): `WorkerConfig` checks only what holds for every backend.
- `check_queue` warns, one line each saying what will go wrong and what to change; the worker
  still starts, since these are often deliberate in tests and migrations. A queue without a
  dead-letter queue is one such line whatever the error policy: a message that always fails
  comes back until the retention period ends, at a pace the policy sets.
"""

from __future__ import annotations

from worker.backend import Limits
from worker.config import ErrorPolicy, LeaseConfig, OnError, WorkerConfig
from worker.errors import ConfigError
from worker.types import QueueInfo

__all__ = ["check_config", "check_queue"]


def check_config(config: WorkerConfig, limits: Limits) -> None:
    """Raise `ConfigError` for the first setting of `config` over the backend's `limits`."""
    lease = config.lease
    bounds = [
        ("wait_s", config.wait_s, "max_wait_s"),
        ("visibility_s", lease.visibility_s, "max_visibility_s"),
        ("extension_s", lease.extension_s, "max_visibility_s"),
        ("max_lease_s", lease.max_lease_s, "max_lease_s"),
    ]
    if lease.adaptive:
        bounds.append(("adaptive_max_s", lease.adaptive_max_s, "max_visibility_s"))
    for setting, value, limit_name in bounds:
        limit: int = getattr(limits, limit_name)
        if value > limit:
            raise ConfigError(
                f"{setting}={value!r}: must be at most {limit}, the backend's {limit_name}"
            )


def check_queue(policy: ErrorPolicy, info: QueueInfo, lease: LeaseConfig) -> list[str]:
    """Warnings for a handler with error `policy` on the queue `info` describes."""
    warnings = _redrive_warnings(policy, info)
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


def _redrive_warnings(policy: ErrorPolicy, info: QueueInfo) -> list[str]:
    redrive = info.redrive
    if redrive is None:
        return [
            f"queue {info.name!r} has no dead-letter queue: a message that always fails is "
            "received again and again until the retention period ends (error policy "
            f"{policy.on_error.value!r}: {_pace(policy)}); give the queue a "
            "RedrivePolicy (a dead-letter queue and maxReceiveCount)"
        ]
    if policy.on_error is OnError.BACKOFF:
        backoff = policy.backoff
        last = backoff.delay_s(redrive.max_receive_count)
        if last < backoff.max_s:
            return [
                f"queue {info.name!r}: maxReceiveCount={redrive.max_receive_count} sends a "
                f"message to {redrive.dead_letter_queue!r} after a backoff of at most "
                f"{last:g} s, before the schedule reaches max_s={backoff.max_s:g} s; raise "
                "maxReceiveCount or shorten the schedule"
            ]
    return []


def _pace(policy: ErrorPolicy) -> str:
    """How often such a message comes back under `policy`, in the end."""
    on_error, max_s = policy.on_error, policy.backoff.max_s
    if on_error is OnError.EXPIRE:
        return "each time its visibility lapses"
    if on_error is OnError.RELEASE or max_s == 0:
        return "at once, as fast as the service answers"
    if on_error is OnError.DEFAULT:
        return f"backing off to once every {max_s / 2:g}-{max_s:g} s"
    return f"backing off to once every {max_s:g} s"
