"""The in-memory engine's queues by name: created, looked up, changed, purged and deleted.

The rules of queues, as SQS keeps them and as this engine enforces them (strict where SQS is
strict; what a request must be is checked by `backends.memory.rules`):

- Every call takes a queue by name or by a URL that ends in its name (`worker.rules`), such as
  the one `create_queue` returns, `http://memory.invalid/000000000000/<name>`. An unknown
  queue raises `QueueNotFound`.
- Creating an existing queue with the same attributes returns its URL; with other attributes
  it fails (`QueueAlreadyExists`). A name cannot be reused for 60 s after its deletion
  (`AWS.SimpleQueueService.QueueDeletedRecently`); a queue can be purged once per 60 s
  (`AWS.SimpleQueueService.PurgeQueueInProgress`).
- A redrive policy names an existing queue of the same kind.
- A queue's MaximumMessageSize (`max_message_bytes`) is 1,024 bytes up to the dialect's
  largest (SQS: 1 MiB, its default); a send entry larger than it is refused.
- Tags (at creation, `tag_queue`, `untag_queue`) and permissions (`add_permission`,
  `remove_permission`) are stored per queue as `backends.memory.tags` checks them.
  `dead_letter_source_queues` names the queues whose redrive policy targets a queue.
- Attributes can be changed on an existing queue (`set_queue_attributes`), checked as at
  creation, and a queue cannot become its own DLQ. A new visibility timeout or delay applies
  to later receives and sends; a new retention period to every stored message at once
  (counted from its send, so shortening it may expire messages at the next call); a new
  redrive policy to later receives.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from typing import Literal, TypeVar

from backends.memory.config import QueueConfig
from backends.memory.queue import Queue, QueueCounts
from backends.memory.rules import (
    SQS_DIALECT,
    Dialect,
    check_attributes,
    check_queue_name,
    fail,
)
from backends.memory.tags import Permission, check_permission, check_tags
from worker import rules
from worker.clock import Clock
from worker.errors import QueueNotFound
from worker.types import QueueInfo, QueueSpec, RedrivePolicy

__all__ = [
    "ARN_PREFIX",
    "QUEUE_URL_PREFIX",
    "UNCHANGED",
    "QueueCatalog",
    "QueueDescription",
    "Unchanged",
]

QUEUE_URL_PREFIX = "http://memory.invalid/000000000000/"
#: The engine's queue ARNs (DeadLetterQueueSourceArn): this prefix and the name.
ARN_PREFIX = "arn:aws:sqs:us-east-1:000000000000:"
_RECREATE_AFTER_S = 60.0
_PURGE_EVERY_S = 60.0
_T = TypeVar("_T")


class _Unchanged(Enum):
    UNCHANGED = "unchanged"


Unchanged = Literal[_Unchanged.UNCHANGED]
#: `set_queue_attributes(redrive=UNCHANGED)` keeps the redrive policy (None removes it).
UNCHANGED: Unchanged = _Unchanged.UNCHANGED


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueDescription:
    """Everything GetQueueAttributes reports of one queue (counts are exact here)."""

    config: QueueConfig
    counts: QueueCounts
    #: Seconds since the Unix epoch, as SQS's CreatedTimestamp and LastModifiedTimestamp.
    created_timestamp: int
    last_modified_timestamp: int


class QueueCatalog:
    """The queue half of `MemoryEngine`, which adds the messages. Reads `clock.now()`."""

    def __init__(self, clock: Clock, *, dialect: Dialect = SQS_DIALECT) -> None:
        self.clock = clock
        self.dialect = dialect
        self._queues: dict[str, Queue] = {}
        self._deleted_at: dict[str, float] = {}
        self._listeners: list[Callable[[str], None]] = []

    @staticmethod
    def queue_name(queue: str) -> str:
        """The name in `queue` (a name or a URL); does not check it exists."""
        return rules.queue_name(queue)

    def queue_url(self, queue: str) -> str:
        return self._queue(queue, "GetQueueUrl").config.url

    def list_queues(self, prefix: str = "") -> list[str]:
        """Names of the queues, sorted; only those starting with `prefix` if given."""
        return sorted(name for name in self._queues if name.startswith(prefix))

    def create_queue(
        self,
        spec: QueueSpec,
        *,
        max_message_bytes: int | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> str:
        """Create the queue `spec` describes and return its URL. Idempotent (tags given
        again are not compared, as on SQS).

        `max_message_bytes` is SQS's MaximumMessageSize (None: the dialect's largest)."""
        name = spec.name
        check_queue_name(name)
        if max_message_bytes is None:
            max_message_bytes = self.dialect.max_message_bytes
        config = QueueConfig.of(spec, QUEUE_URL_PREFIX + name, max_message_bytes=max_message_bytes)
        self._check_new_queue(config)
        existing = self._queues.get(name)
        if existing is not None:
            if existing.config != config:
                fail("CreateQueue", name, "QueueAlreadyExists", "other attributes")
            return existing.config.url
        check_tags(name, "CreateQueue", {}, tags or {})
        self._queues[name] = Queue(config, created_at=self.clock.now())
        self._queues[name].tags.update(tags or {})
        return config.url

    def _check_new_queue(self, config: QueueConfig) -> None:
        check_attributes(config, self.dialect)
        deleted_at = self._deleted_at.get(config.name)
        if deleted_at is not None and self.clock.now() - deleted_at < _RECREATE_AFTER_S:
            fail("CreateQueue", config.name, rules.legacy_code("QueueDeletedRecently"), "wait 60 s")
        if config.redrive is not None:
            self._check_dead_letter_queue(config, "CreateQueue")

    def _check_dead_letter_queue(self, config: QueueConfig, operation: str) -> None:
        assert config.redrive is not None
        target = self._queues.get(self.queue_name(config.redrive.dead_letter_queue))
        if target is None:
            fail(operation, config.name, "InvalidParameterValue", "no such DLQ")
        if target.config.fifo != config.fifo:
            fail(operation, config.name, "InvalidParameterValue", "DLQ of another type")

    def set_queue_attributes(
        self,
        queue: str,
        *,
        visibility_timeout_s: int | None = None,
        delay_s: int | None = None,
        retention_s: int | None = None,
        redrive: RedrivePolicy | Unchanged | None = UNCHANGED,
        content_based_deduplication: bool | None = None,
        max_message_bytes: int | None = None,
    ) -> None:
        """Change attributes of an existing queue; None (or UNCHANGED) keeps one as it is."""
        op = "SetQueueAttributes"
        state = self._settled(queue, op)
        old = state.config
        config = replace(
            old,
            visibility_timeout_s=_given(visibility_timeout_s, old.visibility_timeout_s),
            delay_s=_given(delay_s, old.delay_s),
            retention_s=_given(retention_s, old.retention_s),
            redrive=old.redrive if redrive is UNCHANGED else redrive,
            content_based_deduplication=_given(
                content_based_deduplication, old.content_based_deduplication
            ),
            max_message_bytes=_given(max_message_bytes, old.max_message_bytes),
        )
        check_attributes(config, self.dialect, op)
        if config.redrive is not None:
            target = self.queue_name(config.redrive.dead_letter_queue)
            if target == config.name:
                fail(op, config.name, "InvalidParameterValue", "a queue cannot be its own DLQ")
            self._check_dead_letter_queue(config, op)
        state.config = config
        state.modified_at = self.clock.now()
        if config.retention_s != old.retention_s:
            state.set_retention(config.retention_s)
            state.settle(self.clock.now())
        if config.redrive != old.redrive:
            # A message held back only by the old policy's DLQ may be receivable now.
            self._notify(config.name)

    def describe_queue(self, queue: str) -> QueueDescription:
        state = self._settled(queue, "GetQueueAttributes")
        return QueueDescription(
            config=state.config,
            counts=state.counts(),
            created_timestamp=self._wall_ms(state.created_at) // 1000,
            last_modified_timestamp=self._wall_ms(state.modified_at) // 1000,
        )

    def delete_queue(self, queue: str) -> None:
        name = self._queue(queue, "DeleteQueue").config.name
        del self._queues[name]
        self._deleted_at[name] = self.clock.now()
        self._notify(name)

    def purge(self, queue: str) -> None:
        """Drop every message at once (SQS may take up to 60 s; this model takes none)."""
        state = self._queue(queue, "PurgeQueue")
        now = self.clock.now()
        if state.last_purge_at is not None and now - state.last_purge_at < _PURGE_EVERY_S:
            fail(
                "PurgeQueue",
                state.config.name,
                rules.legacy_code("PurgeQueueInProgress"),
                "wait 60 s",
            )
        state.purge(now)
        self._notify(state.config.name)

    # -- tags, permissions, dead-letter sources -------------------------------------------

    def tag_queue(self, queue: str, tags: Mapping[str, str]) -> None:
        state = self._queue(queue, "TagQueue")
        check_tags(state.config.name, "TagQueue", state.tags, tags)
        state.tags.update(tags)

    def untag_queue(self, queue: str, keys: Sequence[str]) -> None:
        state = self._queue(queue, "UntagQueue")
        for key in keys:
            state.tags.pop(key, None)

    def queue_tags(self, queue: str) -> dict[str, str]:
        return dict(self._queue(queue, "ListQueueTags").tags)

    def add_permission(
        self, queue: str, label: str, accounts: Sequence[str], actions: Sequence[str]
    ) -> None:
        state = self._queue(queue, "AddPermission")
        permission = check_permission(state.config.name, label, accounts, actions)
        if label in state.permissions:
            fail("AddPermission", state.config.name, "InvalidParameterValue", "label exists")
        state.permissions[label] = permission

    def remove_permission(self, queue: str, label: str) -> None:
        state = self._queue(queue, "RemovePermission")
        if state.permissions.pop(label, None) is None:
            fail("RemovePermission", state.config.name, "InvalidParameterValue", "no such label")

    def permissions(self, queue: str) -> dict[str, Permission]:
        return dict(self._queue(queue, "GetQueueAttributes").permissions)

    def kept_attributes(self, queue: str) -> dict[str, str]:
        """Attributes stored for a front end (`keep_attributes`), unmodelled here."""
        return dict(self._queue(queue, "GetQueueAttributes").kept_attributes)

    def keep_attributes(self, queue: str, attributes: Mapping[str, str]) -> None:
        """Store attributes the engine does not model (SQS's Policy, KMS settings...), so
        that they live, and are saved, with the queue."""
        self._queue(queue, "SetQueueAttributes").kept_attributes.update(attributes)

    def dead_letter_source_queues(self, queue: str) -> list[str]:
        """Names of the queues whose redrive policy names `queue` as their DLQ, sorted."""
        name = self._queue(queue, "ListDeadLetterSourceQueues").config.name
        return sorted(
            source
            for source, state in self._queues.items()
            if state.config.redrive is not None
            and self.queue_name(state.config.redrive.dead_letter_queue) == name
        )

    def queue_info(self, queue: str) -> QueueInfo:
        state = self._settled(queue, "GetQueueAttributes")
        config = state.config
        return QueueInfo(
            name=config.name,
            url=config.url,
            visibility_timeout_s=config.visibility_timeout_s,
            fifo=config.fifo,
            delay_s=config.delay_s,
            redrive=config.redrive,
            approximate_visible=len(state.visible),
            approximate_in_flight=len(state.in_flight),
            approximate_delayed=len(state.delayed),
            oldest_message_age_s=_oldest_age(state, self.clock.now()),
        )

    def subscribe(self, listener: Callable[[str], None]) -> Callable[[], None]:
        """Call `listener(queue_name)` after each change that may let a waiting receive on
        that queue get messages (send, release, delete, purge, redrive, `expire`, queue
        deletion). Returns the unsubscribe function. Listeners must not call the engine."""
        self._listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return unsubscribe

    # -- for the engine -----------------------------------------------------------------

    def _queue(self, queue: str, operation: str) -> Queue:
        name = self.queue_name(queue)
        state = self._queues.get(name)
        if state is None:
            raise QueueNotFound(
                f"queue {name!r} does not exist",
                operation=operation,
                queue=name,
                code=rules.legacy_code("NonExistentQueue"),
            )
        return state

    def _settled(self, queue: str, operation: str) -> Queue:
        state = self._queue(queue, operation)
        state.settle(self.clock.now())
        return state

    def _notify(self, name: str) -> None:
        for listener in list(self._listeners):
            listener(name)

    def _wall_ms(self, now: float) -> int:
        return int((now + self.clock.wall_offset_s()) * 1000)


def _given(value: _T | None, default: _T) -> _T:
    return default if value is None else value


def _oldest_age(state: Queue, now: float) -> float:
    # `messages` keeps the order of sending: its first entry is the oldest still there.
    oldest = next(iter(state.messages.values()), None)
    return 0.0 if oldest is None else max(0.0, now - oldest.sent_at)
