"""`IdempotencyGuard`: one handler's guard, made by `Idempotency.guard` (one per process).

::

    idempotency = Idempotency(RedisStore(redis))

    @app.handler("orders", idempotent=idempotency.guard(key=lambda m: m.body["order_id"]))
    async def handle(message: Message) -> None: ...

What the guard does with each message (the innermost middleware, next to the handler):
- claims its key with a conditional write, owned by this process's heartbeat and bound by
  the lease's hard cap (see `worker.idempotency.record` for when a claim is live);
- completed within the TTL: the handler is not run; the message is deleted (`Duplicate`,
  outcome `duplicate`); with a different body hash (payload validation): `PayloadMismatch`,
  a failure that goes through the handler's error policy;
- claimed by a live lease elsewhere: `Retry`, after that lease's heartbeat would have run
  out; claimed but stale: taken over (a conditional write on the old claim's token). A
  stale claim its owner did not let go (its heartbeat ran out) is taken over only after the
  takeover grace, waited here, then looked at again: the owner may be alive, cut off by a
  store outage, holding a completion it could not write; when the store is back it beats
  again within the grace (its claims are live again) and writes the completion. A claim of
  this process whose write (a completion) is still pending is sent first, then looked at;
- a completion refused because the claim was taken over, or never sent before the worker
  stopped, is dropped: logged (`idempotency.completion_dropped`) and counted;
- the store cannot be asked: `Retry` after `retry_after_s`, or after as long as it has been
  down so far (doubling the wait, up to 5 minutes); nothing runs unguarded;
- after the handler: success writes the completion (with the result, if cached); an error
  removes the claim, so that a retry can run; a cancellation (lost lease, cap, shutdown)
  never completes it: a lost or capped lease's claim is let go (stale at once), a shut-down
  one removed. A write the store refuses is retried by the heartbeat task, and logged.
"""

from __future__ import annotations

import asyncio
import json
import math
import uuid
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, Any, cast

from worker.core.settlement import Outcome
from worker.errors import Duplicate, LeaseWorkerError, RegistrationError, Retry
from worker.idempotency.heartbeat import OnDropped
from worker.idempotency.record import Record, RecordState, Verdict, body_hash, judge
from worker.idempotency.store import StoreError
from worker.message import Message
from worker.middleware import CallNext

if TYPE_CHECKING:
    from worker.app import Worker
    from worker.idempotency.process import Idempotency

__all__ = ["IdempotencyGuard", "NotAttached", "PayloadMismatch"]

KeyFunc = Callable[[Message], str]
OnDuplicate = Callable[[Message, Any], Awaitable[None]]

#: A day: how long a completion is remembered unless the guard says otherwise.
DEFAULT_COMPLETED_TTL_S = 86_400.0


class PayloadMismatch(LeaseWorkerError):
    """The key was claimed or completed for another payload (its body hash differs)."""

    def __init__(self, queue: str, message_id: str) -> None:
        super().__init__(
            f"message {message_id} on {queue}: its idempotency key was used for another "
            "payload (body hash differs)"
        )
        self.queue = queue
        self.message_id = message_id


class NotAttached(LeaseWorkerError):
    """A guard was run without being registered with `idempotent=` (so no heartbeat)."""


class IdempotencyGuard:
    """One handler's guard (see the module docstring); made by `Idempotency.guard`."""

    def __init__(
        self,
        idempotency: Idempotency,
        *,
        key: KeyFunc | None,
        namespace: str | None,
        completed_ttl_s: float,
        validate_payload: bool,
        cache_result: bool,
        on_duplicate: OnDuplicate | None,
    ) -> None:
        if key is not None and not callable(key):
            raise RegistrationError(f"key must be a function of the message, got {key!r}")
        if not (isinstance(completed_ttl_s, int | float) and 0 < completed_ttl_s < math.inf):
            raise RegistrationError(f"completed_ttl_s={completed_ttl_s!r}: a positive number")
        if on_duplicate is not None and not callable(on_duplicate):
            raise RegistrationError(f"on_duplicate must be callable, got {on_duplicate!r}")
        self._idem = idempotency
        self._key = key
        self._namespace = namespace
        self.completed_ttl_s = float(completed_ttl_s)
        self._validate = validate_payload
        self._cache = cache_result
        self._on_duplicate = on_duplicate

    def attach(self, worker: Worker, queue: str) -> None:
        self._idem.attach(worker, queue)

    async def __call__(self, message: Message, call_next: CallNext) -> None:
        if not self._idem.attached:  # as a plain middleware: no heartbeat would ever run
            raise NotAttached(
                "an idempotency guard runs as @app.handler(queue, idempotent=guard), "
                "not as a middleware"
            )
        claim = await self._claim(message, self._key_of(message))
        self._idem.running[claim.token] = message.lease
        try:
            # The innermost layer: call_next is the handler itself, and returns its result.
            result: Any = await cast(Callable[[Message], Awaitable[Any]], call_next)(message)
        except (asyncio.CancelledError, GeneratorExit):
            self._let_go(claim, message)  # no await: the task is being cancelled
            raise
        except BaseException:
            await self._write("remove", claim, self._remover(claim))
            raise
        finally:
            del self._idem.running[claim.token]
        done = claim.completed(
            at=self._idem.wall(), ttl_s=self.completed_ttl_s, result=self._result(result)
        )
        dropped = partial(self._idem.completion_dropped, message.queue, message.message_id)
        write = partial(self._idem.store.replace, done, token=claim.token)
        await self._write("replace", claim, write, on_dropped=dropped)

    def _key_of(self, message: Message) -> str:
        key = message.message_id if self._key is None else self._key(message)
        if not isinstance(key, str) or not key:
            raise TypeError(
                f"idempotency key of {message!r}: must be a non-empty str, got {type(key).__name__}"
            )
        return f"{self._namespace or message.queue}:{key}"

    async def _claim(self, message: Message, key: str) -> Record:
        idem, lease = self._idem, message.lease
        if not idem.heartbeat.live(for_s=idem.heartbeat.margin_s / 2):
            raise idem.unavailable("no heartbeat")
        # Wall time plus what is left to the cap: the cap itself, whenever it is asked.
        stale_at = idem.wall() + lease.cap_left_s(idem.now())
        claim = Record(
            key=key,
            token=uuid.uuid4().hex,
            state=RecordState.IN_PROGRESS,
            owner=idem.owner,
            stale_at=stale_at,
            expires_at=stale_at,
            body_hash=body_hash(message.raw_body) if self._validate else None,
        )
        waited: set[str] = set()  # the claims whose takeover grace this message waited out
        try:
            for _ in range(4):  # a race lost to another claimant, a grace waited: look again
                wall = idem.wall()
                found = await idem.call("create", partial(idem.store.create, claim, now=wall))
                if found is None or await self._settle_conflict(
                    message, claim, found, wall, waited
                ):
                    return claim
        except (asyncio.CancelledError, GeneratorExit):
            # Cancelled on the wire: the claim may have been written. Removed by its token,
            # it does not wait for its cap (a no-op if it was never written).
            idem.heartbeat.defer(claim.token, "remove", self._remover(claim))
            raise
        except StoreError as error:
            self._idem.log.warning(
                "idempotency.claim_failed", operation=error.operation, reason=error.reason
            )
            raise idem.unavailable(error.operation) from None
        raise Retry(1.0, "idempotency key contended")

    async def _settle_conflict(
        self, message: Message, claim: Record, found: Record, wall: float, waited: set[str]
    ) -> bool:
        """True if `found` was taken over by `claim`, False to look again; raises if the
        message must not run."""
        idem = self._idem
        beat: float | None = None
        if found.state is RecordState.IN_PROGRESS:
            if found.owner == idem.owner:
                if idem.heartbeat.holds(found.token):  # our own unsent write goes first
                    await idem.heartbeat.send_now(found.token)
                    return False
                beat = idem.heartbeat.confirmed_until
            else:
                beat = await idem.call("beat_of", lambda: idem.store.beat_of(found.owner))
        judgement = judge(
            found, now=wall, beat_until=beat, body=claim.body_hash, skew_s=idem.clock_skew_s
        )
        queue = message.queue
        if judgement.verdict is Verdict.MISMATCH:
            raise PayloadMismatch(queue, message.message_id)
        if judgement.verdict is Verdict.COMPLETED:
            idem.metrics.duplicates.labels(queue).inc()
            if self._on_duplicate is not None:
                await self._on_duplicate(message, _loads(found.result))
            raise Duplicate("idempotency: completed before")
        if judgement.verdict is Verdict.LIVE:
            idem.metrics.busy.labels(queue).inc()
            # Back once the owner's heartbeat would have run out had it stopped.
            raise Retry(
                max(1.0, math.ceil(judgement.live_until - wall)), "idempotency: claimed elsewhere"
            )
        if self._owner_may_hold_completion(found) and found.token not in waited:
            waited.add(found.token)
            await self._wait_out_grace(found)
            return False
        if await idem.call("replace", lambda: idem.store.replace(claim, token=found.token)):
            idem.metrics.takeovers.labels(queue).inc()
            idem.log.info("idempotency.took_over", previous_owner=found.owner)
            return True
        return False

    def _owner_may_hold_completion(self, found: Record) -> bool:
        """A stale claim of another process that was not let go: its owner's heartbeat ran
        out (or its cap passed). The owner may be alive and cut off by a store outage,
        holding a completion it could not write; only the store is seen from here, so the
        takeover waits: a live owner beats again within the grace of the store's return."""
        return (
            found.state is RecordState.IN_PROGRESS
            and found.owner != self._idem.owner
            and not found.was_let_go
        )

    async def _wait_out_grace(self, found: Record) -> None:
        idem = self._idem
        grace = idem.takeover_grace_s
        idem.log.info("idempotency.takeover_waiting", previous_owner=found.owner, grace_s=grace)
        started = idem.wall()
        await idem.sleep(grace)
        failed = idem.heartbeat.last_failed
        if failed is not None and failed >= started:  # the store was not there all along
            raise idem.unavailable("failed during the takeover grace")
        if not idem.heartbeat.live(for_s=idem.heartbeat.margin_s / 2):
            raise idem.unavailable("no heartbeat")

    def _let_go(self, claim: Record, message: Message) -> None:
        if message.lease.cancel_reason is Outcome.SHUTDOWN:  # released: runs elsewhere at once
            self._idem.heartbeat.defer(claim.token, "remove", self._remover(claim))
            return
        stale = claim.let_go(at=self._idem.wall())
        write = partial(self._idem.store.replace, stale, token=claim.token)
        self._idem.heartbeat.defer(claim.token, "replace", write)

    def _remover(self, claim: Record) -> Callable[[], Awaitable[bool]]:
        return partial(self._idem.store.remove, claim.key, token=claim.token)

    async def _write(
        self,
        operation: str,
        claim: Record,
        write: Callable[[], Awaitable[bool]],
        *,
        on_dropped: OnDropped | None = None,
    ) -> None:
        """`on_dropped`: for a completion, told if it is refused (its claim taken over)."""
        heartbeat = self._idem.heartbeat
        try:
            if not await self._idem.call(operation, write):
                if on_dropped is not None:
                    on_dropped("taken_over")
                else:
                    self._idem.log.warning("idempotency.claim_taken_over", operation=operation)
        except (asyncio.CancelledError, GeneratorExit):
            # Cut short (a lost lease, a shutdown): sent from the heartbeat task instead,
            # or a completion would be lost and the claim stay live until its cap.
            heartbeat.defer(claim.token, operation, write, on_dropped=on_dropped)
            raise
        except StoreError as error:
            self._idem.log.error(
                "idempotency.write_failed", operation=operation, reason=error.reason
            )
            heartbeat.defer(claim.token, operation, write, on_dropped=on_dropped)

    def _result(self, result: Any) -> str | None:
        if not self._cache:
            return None
        try:
            return json.dumps(result)
        except (TypeError, ValueError):
            self._idem.log.error("idempotency.result_not_json", type=type(result).__name__)
            return None


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)
