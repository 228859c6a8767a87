"""Settings as frozen, keyword-only value objects, validated when they are made.

Units are in the names (`visibility_s`). Nothing here reads the environment: only the CLI
does, and it builds these objects from what it read.

The checks here hold for every backend. What depends on the backend (the longest long poll,
the longest visibility, the cap counted from a receive) is checked against its `Limits` by
`worker.core.preflight.check_config` once the backend is known.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from worker.errors import ConfigError
from worker.types import ReceivedMessage

__all__ = [
    "AdaptiveConcurrency",
    "Backoff",
    "ErrorPolicy",
    "FlowControl",
    "LeaseConfig",
    "OnError",
    "RateLimit",
    "ShutdownConfig",
    "TenantCap",
    "WorkerConfig",
]

#: The longest visibility, and cap on invisibility counted from a receive, of every backend
#: in view (SQS and SMQ: 12 h). A backend's own `Limits` may be lower.
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


#: The settings of `LeaseConfig` that may be None (left to a rule rather than a number).
_OPTIONAL = frozenset({"extension_s", "renew_margin_s", "renew_timeout_s"})


class _DerivedSeconds(int):
    """A whole number of seconds worked out from other settings, not given."""

    __slots__ = ()


class _DerivedFloat(float):
    """A number of seconds worked out from other settings, not given."""

    __slots__ = ()


@dataclass(frozen=True, slots=True, init=False)
class LeaseConfig:
    """How leases are held and extended.

    A lease is renewed `renew_margin_s` before its deadline; leases of one queue that fall due
    within `coalesce_window_s` of each other are renewed in one batch call. Each renewal sets
    the visibility to `extension_s` (or, when `adaptive`, the p99 of observed handler
    durations clamped to `adaptive_min_s`..`adaptive_max_s`). No lease outlives
    `max_lease_s` counted from its receive: before that point the handler is cancelled.

    `extension_s` and `renew_margin_s` left out (or None) are worked out from `visibility_s`,
    so that `LeaseConfig(visibility_s=6)` holds together; read, they are numbers. A value
    worked out stays worked out: `dataclasses.replace(config, visibility_s=6)` works it out
    again from 6 rather than keeping the one made for the old visibility (and so does a
    worked-out value read from one config and passed to another).
    """

    #: Visibility asked for at receive time; the first deadline is receive + this. Default 30.
    visibility_s: int
    #: Visibility set by each renewal (fixed mode). Default: `visibility_s`.
    extension_s: int
    #: Renew this long before the deadline. Must leave room for a call and its retries.
    #: Default: a third of the shorter of `visibility_s` and `extension_s`, at most 10 s.
    renew_margin_s: float
    #: Leases of one queue due within this window of the first one share a batch call. Default 5.
    coalesce_window_s: float
    #: Longest a message is held, from its receive; at most SQS's 12 h (the default).
    max_lease_s: float
    #: Wait between retries of a renewal that failed for a transient reason. Default 1.
    retry_interval_s: float
    #: A renewal call not answered in this long is abandoned and retried (default: a third
    #: of the margin, so that three tries fit in it). Never later than the lease deadline.
    renew_timeout_s: float | None
    #: Pick the extension from observed handler durations (p99), as Pub/Sub's client does.
    adaptive: bool
    #: The adaptive extension's clamp (default 30..600); the minimum must exceed
    #: `renew_margin_s`.
    adaptive_min_s: int
    adaptive_max_s: int

    def __init__(
        self,
        *,
        visibility_s: int = 30,
        extension_s: int | None = None,
        renew_margin_s: float | None = None,
        coalesce_window_s: float = 5.0,
        max_lease_s: float = MAX_VISIBILITY_S,
        retry_interval_s: float = 1.0,
        renew_timeout_s: float | None = None,
        adaptive: bool = False,
        adaptive_min_s: int = 30,
        adaptive_max_s: int = 600,
    ) -> None:
        given = {
            "visibility_s": visibility_s,
            "extension_s": extension_s,
            "renew_margin_s": renew_margin_s,
            "coalesce_window_s": coalesce_window_s,
            "max_lease_s": max_lease_s,
            "retry_interval_s": retry_interval_s,
            "renew_timeout_s": renew_timeout_s,
            "adaptive": adaptive,
            "adaptive_min_s": adaptive_min_s,
            "adaptive_max_s": adaptive_max_s,
        }
        for name, value in given.items():
            object.__setattr__(self, name, value)
        self._check_each()
        self._derive()
        self._check_together()

    @property
    def effective_renew_timeout_s(self) -> float:
        return self.renew_timeout_s or self.renew_margin_s / 3

    def _unset(self, name: str) -> bool:
        """True for a setting left to its default rule (None: worked out or not used)."""
        return name in _OPTIONAL and getattr(self, name) is None

    def _derive(self) -> None:
        # A derived value handed back by `dataclasses.replace` is derived again, not kept.
        extension: int | None = self.extension_s
        if extension is None or isinstance(extension, _DerivedSeconds):
            object.__setattr__(self, "extension_s", _DerivedSeconds(self.visibility_s))
        margin: float | None = self.renew_margin_s
        if margin is None or isinstance(margin, _DerivedFloat):
            shortest = min(self.visibility_s, self.extension_s)
            object.__setattr__(self, "renew_margin_s", _DerivedFloat(min(10.0, shortest / 3)))

    def _check_each(self) -> None:
        seconds = ("visibility_s", "extension_s", "adaptive_min_s", "adaptive_max_s")
        for name in (n for n in seconds if not self._unset(n)):
            value = getattr(self, name)
            _check(
                isinstance(value, int) and 1 <= value <= MAX_VISIBILITY_S,
                name,
                value,
                f"must be a whole number of seconds from 1 to {MAX_VISIBILITY_S}",
            )
        durations = ("renew_margin_s", "renew_timeout_s", "retry_interval_s", "max_lease_s")
        for name in (n for n in durations if not self._unset(n)):
            _positive(name, getattr(self, name))
        _check(self.coalesce_window_s >= 0, "coalesce_window_s", self.coalesce_window_s, ">= 0")
        _check(
            self.max_lease_s <= MAX_VISIBILITY_S,
            "max_lease_s",
            self.max_lease_s,
            f"must be at most {MAX_VISIBILITY_S} (SQS's 12 h cap from receive)",
        )
        _check(
            self.adaptive_min_s <= self.adaptive_max_s,
            "adaptive_min_s",
            self.adaptive_min_s,
            f"must be <= adaptive_max_s ({self.adaptive_max_s})",
        )

    def _check_together(self) -> None:
        margin = self.renew_margin_s
        renewed = {"visibility_s": self.visibility_s, "extension_s": self.extension_s}
        if self.adaptive:
            renewed["adaptive_min_s"] = self.adaptive_min_s
        name, shortest = min(renewed.items(), key=lambda item: item[1])
        _check(
            margin < shortest,
            "renew_margin_s",
            margin,
            f"must be shorter than {name} ({shortest} s), the shortest visibility it renews",
        )
        _check(
            self.max_lease_s > margin,
            "max_lease_s",
            self.max_lease_s,
            f"must be longer than renew_margin_s ({margin:g} s)",
        )
        # A renewal abandoned at its timeout must leave time, before the deadline, to retry.
        _check(
            self.effective_renew_timeout_s < margin,
            "renew_timeout_s",
            self.effective_renew_timeout_s,
            f"must be shorter than renew_margin_s ({margin:g} s), to leave time for a retry",
        )


class OnError(Enum):
    """What becomes of a message whose handler failed."""

    #: The default: the first retry at once, then the `Backoff` schedule one receive behind,
    #: each delay cut by up to half at random (drawn from the message id and receive count):
    #: with the default `Backoff`, 0, 2.5-5, 5-10, 10-20 ... s, at most 15 min, and never
    #: longer than the queue allows. A message that always fails never loops hot.
    DEFAULT = "default"
    #: Make it visible again at once (visibility 0, or the backend's shortest release). With
    #: no dead-letter queue, a message that always fails loops as fast as the service answers.
    RELEASE = "release"
    #: Make it visible again after a delay that grows with its receive count.
    BACKOFF = "backoff"
    #: Stop extending and let the visibility lapse, toward the DLQ after maxReceiveCount.
    EXPIRE = "expire"


@dataclass(frozen=True, slots=True, kw_only=True)
class Backoff:
    """Release delay for receive count n: min(max_s, base_s * factor ** (n - 1)).

    The 'default' policy follows it one receive behind (the first retry at once), each delay
    cut by up to half (jitter); 'backoff' follows it as it is.
    """

    #: The first delay.
    base_s: float = 5.0
    #: Each delay is the one before it times this.
    factor: float = 2.0
    #: The longest delay, before the queue's own limits.
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
    """The error policy of one handler.

    `ErrorPolicy()` is `OnError.DEFAULT` on the default `Backoff`; `backoff` is the schedule
    of both 'default' and 'backoff' (and unused by 'release' and 'expire').
    """

    #: 'default': the first retry at once, then `backoff`'s delays one receive behind,
    #: jittered; 'release': at once, every time (a message that always fails loops hot);
    #: 'backoff': `backoff`'s delays; 'expire': let the visibility lapse. Whichever it is,
    #: only a dead-letter queue ends the retries of a message that always fails.
    on_error: OnError = OnError.DEFAULT
    #: The delays of 'default' and 'backoff'.
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
class RateLimit:
    """At most `per_s` messages a second start on a queue: received only once granted, so a
    message held back is never received to wait (its lease untouched).

    `shared`: a Redis URL (`redis://host:6379/0`, needs the `redis` extra): every process and
    pod that names the same URL and `key` shares the one limit, each asking Redis for
    `grant` messages at a time (one atomic script a grant, on Redis's clock);
    `memory://NAME`: the workers of this process that name it. None: this worker's own
    limit. `on_outage`: what a shared limit does while Redis cannot be reached: 'closed'
    (receive nothing until it answers again; nothing is lost, the queue waits) or 'open'
    (each process goes on alone at `per_s`, so the fleet may exceed the limit by the number
    of processes until Redis is back).
    """

    per_s: float
    #: Messages that may start at once after an idle spell, and the most one receive waits
    #: for (default: a second's worth, at most a receive's batch of 10).
    burst: int | None = None
    shared: str | None = None
    #: The shared limit's Redis key (default: `lease-worker:rate:<queue>`).
    key: str | None = None
    #: Messages asked of Redis at a time (at most the burst): 1 call per `grant` messages.
    grant: int = 10
    on_outage: str = "closed"

    def __post_init__(self) -> None:
        _positive("per_s", self.per_s)
        if self.burst is not None:
            _whole("burst", self.burst, 1)
        _whole("grant", self.grant, 1, 1000)
        _check(
            self.on_outage in ("closed", "open"),
            "on_outage",
            self.on_outage,
            "must be 'closed' (hold receives) or 'open' (go on with a local limit)",
        )
        if self.shared is not None:
            _check(
                self.shared.startswith(("redis://", "rediss://", "unix://", "memory://")),
                "shared",
                "<redacted>" if "@" in self.shared else self.shared,
                "must be a Redis URL (redis://, rediss:// or unix://), or memory://NAME for "
                "the workers of one process",
            )

    def burst_for(self, batch: int) -> int:
        if self.burst is not None:
            return self.burst
        return max(1, min(batch, math.ceil(self.per_s)))


#: Picks a message's tenant: None leaves the message uncapped.
TenantKey = Callable[[ReceivedMessage], "str | None"]


def _message_group(message: ReceivedMessage) -> str | None:
    return message.group_id


@dataclass(frozen=True, slots=True, kw_only=True)
class TenantCap:
    """At most `per_tenant` messages of one tenant run at once per worker (standard queues).

    A tenant is the message's `MessageGroupId` (SQS fair queues' tenants) unless `key` picks
    another: `key(received)` gets the `ReceivedMessage` (its `body` the raw string) and
    returns a str, or None for an uncapped message; one that raises or returns anything
    else puts the message in the fallback tenant "<key failed>" (counted, and logged once a
    minute).

    Being capped is not a failure and costs a message nothing toward the redrive policy: a
    message received over its tenant's cap waits in the worker, its lease renewed and no
    handler slot taken, and runs as soon as one of its tenant's running messages ends. While
    `hold` messages wait (all tenants of the queue together), the queue's receives pause:
    a release would count as a receive toward `maxReceiveCount`, so none is made. Only on
    a queue without a redrive policy does a message past the hold go back instead, invisible
    for about as long as its tenant's backlog here takes (at least `release_s`). See
    docs/how-to/flow-control.md.
    """

    per_tenant: int
    key: TenantKey = _message_group
    hold: int = 1000
    release_s: int = 5

    def __post_init__(self) -> None:
        _whole("per_tenant", self.per_tenant, 1)
        _whole("hold", self.hold, 0)
        _whole("release_s", self.release_s, 0, MAX_VISIBILITY_S)
        _check(callable(self.key), "key", self.key, "must be a callable(message) -> str | None")


@dataclass(frozen=True, slots=True, kw_only=True)
class AdaptiveConcurrency:
    """Run as many handlers of a queue at once as the downstream serves without queueing,
    found from their latency and errors (a Vegas limit: `worker.core.concurrency`), from
    `smallest` up to the queue's `max_in_flight`."""

    smallest: int = 1
    #: The limit to start from (default: `max_in_flight`, or 10 when that is larger).
    initial: int | None = None
    #: Grow while fewer than `alpha` handlers wait downstream, shrink above `beta`.
    alpha: float = 3.0
    beta: float = 6.0
    #: The limit is multiplied by this after a window with a failed handler.
    backoff: float = 0.9
    #: A handler's `Retry` says "not yet" of its message, not that the downstream struggles:
    #: by default it is not sampled at all. True counts it as a failure (where a `Retry` is
    #: how handlers answer a downstream that pushes back).
    retry_backs_off: bool = False

    def __post_init__(self) -> None:
        _whole("smallest", self.smallest, 1)
        if self.initial is not None:
            _whole("initial", self.initial, 1)
        _check(
            math.isfinite(self.alpha) and 0 <= self.alpha <= self.beta,
            "alpha",
            self.alpha,
            f"must be from 0 to beta ({self.beta})",
        )
        _check(math.isfinite(self.beta), "beta", self.beta, "must be a number")
        _check(0 < self.backoff < 1, "backoff", self.backoff, "must be between 0 and 1")


@dataclass(frozen=True, slots=True, kw_only=True)
class FlowControl:
    """What holds a queue's receives back beyond `max_in_flight`: each part off when None.

    `max_bytes`: the memory the messages held may take, in bytes, at which no receive
    starts: each message counted at its body as Python stores it (1, 2 or 4 bytes a
    character), its attributes, and as much again for its decoded payload unless the handler
    takes the body raw; each receive asks for no more than the bytes left can take, so the
    count goes past it by one message at most (docs/how-to/flow-control.md).
    """

    rate: RateLimit | None = None
    tenants: TenantCap | None = None
    max_bytes: int | None = None
    adaptive: AdaptiveConcurrency | None = None

    def __post_init__(self) -> None:
        if self.max_bytes is not None:
            _whole("max_bytes", self.max_bytes, 1)
        for name, kind in (
            ("rate", RateLimit),
            ("tenants", TenantCap),
            ("adaptive", AdaptiveConcurrency),
        ):
            value = getattr(self, name)
            _check(
                value is None or isinstance(value, kind),
                name,
                value,
                f"must be a {kind.__name__} or None",
            )

    @property
    def off(self) -> bool:
        return (
            self.rate is None
            and self.tenants is None
            and self.max_bytes is None
            and self.adaptive is None
        )

    def over(self, base: FlowControl) -> FlowControl:
        """This flow control, with `base`'s parts where this one leaves them None."""
        return FlowControl(
            rate=self.rate if self.rate is not None else base.rate,
            tenants=self.tenants if self.tenants is not None else base.tenants,
            max_bytes=self.max_bytes if self.max_bytes is not None else base.max_bytes,
            adaptive=self.adaptive if self.adaptive is not None else base.adaptive,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerConfig:
    """Settings of one worker process; every handler inherits what it does not override."""

    lease: LeaseConfig = field(default_factory=LeaseConfig)
    shutdown: ShutdownConfig = field(default_factory=ShutdownConfig)
    #: Messages held at once per queue (received and not yet settled).
    max_in_flight: int = 10
    #: Long-poll wait of each receive, seconds: at most the backend's `Limits.max_wait_s`
    #: (SQS 20, SMQ 30), which the worker checks when it knows its backend. A poll never
    #: waits longer than the visibility less the renewal margin (`poll_wait_s`).
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
    #: Rate limits, per-tenant caps, bytes in flight and adaptive concurrency, for every
    #: queue whose handler sets none of its own (`@app.handler(..., flow=...)`).
    flow: FlowControl = field(default_factory=lambda: FlowControl())

    @property
    def poll_wait_s(self) -> int:
        """The wait each long poll asks for: `wait_s`, but never more than the visibility
        less the renewal margin. A lease is dated from when its receive was sent (the only
        time the worker can prove is not later than the hand-out), so a message handed out
        at the end of a long poll arrives with its visibility less the wait left: the cap
        leaves it at least the margin (less the answer's way back), which is what a renewal
        needs to land in time."""
        lease = self.lease
        return max(0, min(self.wait_s, math.floor(lease.visibility_s - lease.renew_margin_s)))

    def __post_init__(self) -> None:
        _whole("max_in_flight", self.max_in_flight, 1)
        _whole("wait_s", self.wait_s, 0)
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
