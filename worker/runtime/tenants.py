"""Per-tenant caps: one tenant never fills a worker's slots.

`admit` decides for each message received from a standard queue with a cap: run it now
(its tenant runs fewer than `per_tenant`), keep it waiting here (its lease held and renewed,
no handler yet) while fewer than `waiting` of its tenant wait already, or hand it back
(released with `release_s` of visibility) for another worker, or this one later, to take.
`finished` is told when a lease ends and returns the tenant's next waiting message to run,
if any. So a tenant holds at most `per_tenant + waiting` of the worker's slots, and the
others keep the rest.

A message without a tenant (no `MessageGroupId`, or the key function answered None) is not
capped. A key function that raises, or answers anything but a string or None, never turns
the cap off unseen: the message goes to the fallback tenant `KEY_FAILED` (capped like any
other), each failure is counted (`flow_tenant_key_errors_total`), and one warning a minute
names the error's type (never its text, which may quote the body).
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from enum import Enum
from typing import Any

import structlog

from worker.config import TenantCap
from worker.core.lease import Lease
from worker.types import ReceivedMessage

__all__ = ["KEY_FAILED", "Admission", "Tenants"]

#: The tenant of every message whose key function failed: they share one cap.
KEY_FAILED = "<key failed>"
#: The key function's failures are logged at most this often (seconds).
_WARN_EVERY_S = 60.0


class Admission(Enum):
    RUN = "run"
    WAIT = "wait"
    RELEASE = "release"


class Tenants:
    def __init__(
        self,
        cap: TenantCap,
        *,
        queue: str = "",
        now: Callable[[], float] = time.monotonic,
        on_key_error: Callable[[], None] | None = None,
        logger: Any = None,
    ) -> None:
        self.cap = cap
        self._queue = queue
        self._now = now
        self._on_key_error = on_key_error
        self._log = logger or structlog.get_logger("lease_worker.flow")
        self._warned_at = -math.inf
        #: Key failures since the last warning (the next one says how many).
        self._unreported = 0
        self._running: dict[str, int] = {}
        self._waiting: dict[str, deque[tuple[ReceivedMessage, Lease]]] = {}
        #: The tenant of every message admitted (running or waiting), by message id.
        self._tenant_of: dict[str, str] = {}
        self._waiting_ids: set[str] = set()

    @property
    def waiting(self) -> int:
        return len(self._waiting_ids)

    def tenant_of(self, received: ReceivedMessage) -> str | None:
        """The message's tenant by the cap's key function (`KEY_FAILED` if it failed)."""
        try:
            tenant = self.cap.key(received)
        except Exception as error:
            return self._key_failed(type(error).__name__)
        if tenant is None or isinstance(tenant, str):
            return tenant
        return self._key_failed(f"returned {type(tenant).__name__}, not a str or None")

    def _key_failed(self, what: str) -> str:
        if self._on_key_error is not None:
            self._on_key_error()
        self._unreported += 1
        now = self._now()
        if now - self._warned_at >= _WARN_EVERY_S:
            self._log.warning(
                "flow.tenant_key_failed",
                queue=self._queue,
                error=what,
                failures=self._unreported,
                tenant=KEY_FAILED,
                fix="the key gets the message as received (a ReceivedMessage: `body` is the "
                "raw string); make it return a str, or None for an uncapped message",
            )
            self._warned_at, self._unreported = now, 0
        return KEY_FAILED

    def admit(self, received: ReceivedMessage, lease: Lease) -> Admission:
        tenant = self.tenant_of(received)
        if tenant is None:
            return Admission.RUN
        running = self._running.get(tenant, 0)
        if running < self.cap.per_tenant:
            self._running[tenant] = running + 1
            self._tenant_of[received.message_id] = tenant
            return Admission.RUN
        waiting = self._waiting.get(tenant)
        if (0 if waiting is None else len(waiting)) < self.cap.waiting:
            if waiting is None:
                waiting = self._waiting[tenant] = deque()
            waiting.append((received, lease))
            self._tenant_of[received.message_id] = tenant
            self._waiting_ids.add(received.message_id)
            return Admission.WAIT
        return Admission.RELEASE

    def finished(self, lease: Lease) -> tuple[ReceivedMessage, Lease] | None:
        """`lease` ended: the next waiting message of its tenant to run now, if any."""
        tenant = self._tenant_of.get(lease.message_id)
        if tenant is None:
            return None
        waiting = self._waiting.get(tenant)
        if lease.message_id in self._waiting_ids:  # ended while waiting: never ran
            if waiting is not None:
                for index, (_, held) in enumerate(waiting):
                    if held is lease:
                        del waiting[index]
                        break
                else:
                    return None  # another lease of the same message id
                self._forget_waiting(lease.message_id, tenant, waiting)
            return None
        del self._tenant_of[lease.message_id]
        while waiting:
            received, next_lease = waiting.popleft()
            self._waiting_ids.discard(received.message_id)
            if next_lease.active:
                if not waiting:
                    del self._waiting[tenant]
                return received, next_lease  # still counted as running
            self._tenant_of.pop(received.message_id, None)
        self._waiting.pop(tenant, None)
        running = self._running[tenant] - 1
        if running:
            self._running[tenant] = running
        else:
            del self._running[tenant]
        return None

    def take_waiting(self) -> list[Lease]:
        """Every waiting message's lease, no longer waiting (a shutdown releases them)."""
        taken = [lease for waiting in self._waiting.values() for _, lease in waiting]
        for waiting in self._waiting.values():
            for received, _ in waiting:
                self._tenant_of.pop(received.message_id, None)
        self._waiting.clear()
        self._waiting_ids.clear()
        return taken

    def _forget_waiting(
        self, message_id: str, tenant: str, waiting: deque[tuple[ReceivedMessage, Lease]]
    ) -> None:
        self._waiting_ids.discard(message_id)
        del self._tenant_of[message_id]
        if not waiting:
            del self._waiting[tenant]
