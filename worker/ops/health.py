"""Liveness and readiness, as verdicts over what the supervisor says of itself.

The rules, for Kubernetes' probes:

- **Live** (`/healthz`): the event loop answers (the probe itself needs it), its lag stays
  under `max_loop_lag_s`, and the lease keeper's task runs. A restart is the cure for each:
  a loop blocked by a handler that calls a synchronous library, or a keeper that is gone.
  Start-up and a drain are alive: a restart then would only strand messages.
- **Ready** (`/readyz`): start-up is over (queues checked), no shutdown has begun, and every
  queue's latest receive answered. Unready from the first moment of a drain, before any
  message is released, so that the pod leaves its Service's endpoints (and an autoscaler's
  count of ready pods) first.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from worker.runtime.supervisor import Supervisor

__all__ = ["HealthPolicy", "Verdict", "liveness", "readiness"]


@dataclass(frozen=True, slots=True, kw_only=True)
class HealthPolicy:
    #: Event-loop lag above which the process is not live. A loop that late renews no lease
    #: on time: the default is well under the smallest sensible renewal margin.
    max_loop_lag_s: float = 5.0

    def __post_init__(self) -> None:
        if not self.max_loop_lag_s > 0:
            raise ValueError(f"max_loop_lag_s={self.max_loop_lag_s!r}: must be above 0")


@dataclass(frozen=True, slots=True)
class Verdict:
    ok: bool
    #: One line per check: "ok", or what is wrong.
    checks: Mapping[str, str]

    def as_json(self) -> dict[str, object]:
        return {"status": "ok" if self.ok else "fail", "checks": dict(self.checks)}


def _verdict(checks: dict[str, str]) -> Verdict:
    return Verdict(all(value == "ok" for value in checks.values()), checks)


def liveness(supervisor: Supervisor, policy: HealthPolicy) -> Verdict:
    lag = supervisor.loop_lag.seconds(supervisor.clock.now())
    checks = {
        "event_loop": "ok"
        if lag <= policy.max_loop_lag_s
        else f"lag {lag:.1f} s above {policy.max_loop_lag_s:g} s",
    }
    if supervisor.receivers and not supervisor.keeper.running:
        checks["lease_keeper"] = "not running"
    else:
        checks["lease_keeper"] = "ok"
    return _verdict(checks)


def readiness(supervisor: Supervisor) -> Verdict:
    if supervisor.stopping:
        return _verdict({"worker": "shutting down"})
    if not supervisor.receiving:
        return _verdict({"worker": "starting"})
    checks = {"worker": "ok"}
    for queue, receiver in sorted(supervisor.receivers.items()):
        checks[f"queue {queue}"] = "ok" if receiver.reachable else "receive failing"
    return _verdict(checks)
