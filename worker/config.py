"""Settings as frozen, keyword-only value objects, validated when they are made.

Units are in the names (`visibility_s`). Nothing here reads the environment: only the CLI
does, and it builds these objects from what it read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum

from worker.errors import ConfigError

__all__ = ["Backoff", "ErrorPolicy", "LeaseConfig", "OnError", "ShutdownConfig", "WorkerConfig"]

#: SQS's longest visibility and its cap on invisibility counted from a receive.
MAX_VISIBILITY_S = 43_200


def _check(ok: bool, setting: str, value: object, rule: str) -> None:
    if not ok:
        raise ConfigError(f"{setting}={value!r}: {rule}")


def _whole(setting: str, value: object, low: int, high: int | None = None) -> None:
    in_range = isinstance(value, int) and low <= value and (high is None or value <= high)
    rule = f"from {low} to {high}" if high is not None else f">= {low}"
    _check(in_range, setting, value, f"must be a whole number {rule}")


def _positive(setting: str, value: float) -> None:
    _check(math.isfinite(value) and value > 0, setting, value, "must be a positive number")


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseConfig:
    """How leases are held and extended.

    A lease is renewed `renew_margin_s` before its deadline; leases of one queue that fall due
    within `coalesce_window_s` of each other are renewed in one batch call. Each renewal sets
    the visibility to `extension_s` (or, when `adaptive`, the p99 of observed handler
    durations clamped to `adaptive_min_s`..`adaptive_max_s`). No lease outlives
    `max_lease_s` counted from its receive: before that point the handler is cancelled.
    """

    #: Visibility asked for at receive time; the first deadline is receive + this.
    visibility_s: int = 30
    #: Visibility set by each renewal (fixed mode).
    extension_s: int = 30
    #: Renew this long before the deadline. Must leave room for a call and its retries.
    renew_margin_s: float = 10.0
    #: Leases of one queue due within this window of the first one share a batch call.
    coalesce_window_s: float = 5.0
    #: Longest a message is held, from its receive; at most SQS's 12 h.
    max_lease_s: float = MAX_VISIBILITY_S
    #: Wait between retries of a renewal that failed for a transient reason.
    retry_interval_s: float = 1.0
    #: A renewal call not answered in this long is abandoned and retried (default: a third
    #: of the margin, so that three tries fit in it). Never later than the lease deadline.
    renew_timeout_s: float | None = None
    #: Pick the extension from observed handler durations (p99), as Pub/Sub's client does.
    adaptive: bool = False
    #: The adaptive extension's clamp; the minimum must exceed `renew_margin_s`.
    adaptive_min_s: int = 30
    adaptive_max_s: int = 600

    @property
    def effective_renew_timeout_s(self) -> float:
        return self.renew_timeout_s or self.renew_margin_s / 3

    def __post_init__(self) -> None:
        if self.renew_timeout_s is not None:
            _positive("renew_timeout_s", self.renew_timeout_s)
        for name in ("visibility_s", "extension_s", "adaptive_min_s", "adaptive_max_s"):
            value = getattr(self, name)
            _check(
                isinstance(value, int) and 1 <= value <= MAX_VISIBILITY_S,
                name,
                value,
                f"must be a whole number of seconds from 1 to {MAX_VISIBILITY_S}",
            )
        for name in ("renew_margin_s", "retry_interval_s", "max_lease_s"):
            _positive(name, getattr(self, name))
        _check(self.coalesce_window_s >= 0, "coalesce_window_s", self.coalesce_window_s, ">= 0")
        _check(
            self.max_lease_s <= MAX_VISIBILITY_S,
            "max_lease_s",
            self.max_lease_s,
            f"must be at most {MAX_VISIBILITY_S} (SQS's 12 h cap from receive)",
        )
        shortest = min(self.visibility_s, self.extension_s)
        if self.adaptive:
            shortest = min(shortest, self.adaptive_min_s)
        _check(
            self.renew_margin_s < shortest,
            "renew_margin_s",
            self.renew_margin_s,
            f"must be shorter than the shortest visibility it renews ({shortest} s)",
        )
        _check(
            self.adaptive_min_s <= self.adaptive_max_s,
            "adaptive_min_s",
            self.adaptive_min_s,
            f"must be <= adaptive_max_s ({self.adaptive_max_s})",
        )
        _check(
            self.max_lease_s > self.renew_margin_s,
            "max_lease_s",
            self.max_lease_s,
            f"must be longer than renew_margin_s ({self.renew_margin_s})",
        )


class OnError(Enum):
    """What becomes of a message whose handler failed."""

    #: Make it visible again at once (visibility 0).
    RELEASE = "release"
    #: Make it visible again after a delay that grows with its receive count.
    BACKOFF = "backoff"
    #: Stop extending and let the visibility lapse, toward the DLQ after maxReceiveCount.
    EXPIRE = "expire"


@dataclass(frozen=True, slots=True, kw_only=True)
class Backoff:
    """Release delay for receive count n: min(max_s, base_s * factor ** (n - 1))."""

    base_s: float = 5.0
    factor: float = 2.0
    max_s: float = 900.0

    def __post_init__(self) -> None:
        _check(self.base_s >= 0 and math.isfinite(self.base_s), "base_s", self.base_s, ">= 0")
        _check(self.factor >= 1 and math.isfinite(self.factor), "factor", self.factor, ">= 1")
        _check(
            0 <= self.max_s <= MAX_VISIBILITY_S,
            "max_s",
            self.max_s,
            f"must be from 0 to {MAX_VISIBILITY_S}",
        )

    def delay_s(self, receive_count: int) -> float:
        exponent = max(0, receive_count - 1)
        if exponent > 64:  # far past any max_s; avoids float overflow
            return self.max_s
        return min(self.max_s, self.base_s * self.factor**exponent)


@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorPolicy:
    """The error policy of one handler."""

    on_error: OnError = OnError.RELEASE
    backoff: Backoff = field(default_factory=Backoff)

    @classmethod
    def parse(cls, value: ErrorPolicy | OnError | str) -> ErrorPolicy:
        if isinstance(value, ErrorPolicy):
            return value
        if isinstance(value, OnError):
            return cls(on_error=value)
        try:
            return cls(on_error=OnError(value))
        except ValueError:
            choices = ", ".join(repr(m.value) for m in OnError)
            raise ConfigError(f"on_error={value!r}: must be one of {choices}") from None


@dataclass(frozen=True, slots=True, kw_only=True)
class ShutdownConfig:
    """Graceful shutdown: stop receiving, drain for `grace_s`, release what is left."""

    #: How long in-flight handlers may run after the first SIGTERM/SIGINT.
    grace_s: float = 30.0
    #: Time left for the drain after a second signal.
    second_signal_grace_s: float = 0.0
    #: Upper bound on the final release/delete calls after handlers stopped.
    flush_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        for name in ("grace_s", "second_signal_grace_s", "flush_timeout_s"):
            value = getattr(self, name)
            _check(math.isfinite(value) and value >= 0, name, value, "must be >= 0")


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerConfig:
    """Settings of one worker process; every handler inherits what it does not override."""

    lease: LeaseConfig = field(default_factory=LeaseConfig)
    shutdown: ShutdownConfig = field(default_factory=ShutdownConfig)
    #: Messages held at once per queue (received and not yet settled).
    max_in_flight: int = 10
    #: Long-poll wait of each receive, seconds (SQS allows up to 20).
    wait_s: int = 20
    #: A receive, delete or release not answered this long (beyond the long-poll wait) is
    #: abandoned and retried on a new connection. Renewals have their own, shorter bound.
    call_timeout_s: float = 5.0
    #: Receives under way at once per queue; more than 1 pays off at thousands of msgs/s.
    receive_concurrency: int = 1
    #: Threads for synchronous handlers, shared by every queue.
    sync_threads: int = 8
    #: Deletes and releases wait at most this long for a fuller batch.
    settle_linger_s: float = 0.05
    #: First and longest pause after a failed receive.
    receive_backoff_s: float = 0.5
    receive_backoff_max_s: float = 30.0

    def __post_init__(self) -> None:
        _whole("max_in_flight", self.max_in_flight, 1)
        _whole("wait_s", self.wait_s, 0, 20)
        _whole("receive_concurrency", self.receive_concurrency, 1, 32)
        _whole("sync_threads", self.sync_threads, 1)
        _check(
            0 <= self.settle_linger_s <= 1,
            "settle_linger_s",
            self.settle_linger_s,
            "must be from 0 to 1 second",
        )
        _positive("receive_backoff_s", self.receive_backoff_s)
        _positive("call_timeout_s", self.call_timeout_s)
        _check(
            self.receive_backoff_max_s >= self.receive_backoff_s,
            "receive_backoff_max_s",
            self.receive_backoff_max_s,
            "must be >= receive_backoff_s",
        )
