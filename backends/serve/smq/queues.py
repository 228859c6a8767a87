"""SMQ's queue operations over the engine's SMQ dialect: CreateQueue (with a DlqPolicy),
GetQueueAttributes, SetQueueAttributes, ListQueue and DeleteQueue.

Rules:
- CreateQueue answers 201 and the queue's URL in `Location`; the same queue again with the
  same attributes answers 204, with others 409 `QueueAlreadyExist`.
- A dead-letter policy is `<DlqPolicy>` with `<Enabled>`, `<DeadLetterTargetQueue>` (a
  name) and `<MaxReceiveCount>`, SMQ's fields; the engine keeps it as its redrive policy.
- GetQueueAttributes reports ActiveMessages (receivable), InactiveMessages (in flight) and
  DelayMessages (delayed), exact here.
- PollingWaitSeconds (0-30) is kept for receives that name no `waitseconds`.
- SetQueueAttributes (`PUT /queues/<name>?metaoverride=true`, a `<Queue>` of the attributes
  to change) changes only those given, answers 204, and 404 `QueueNotExist` for a queue
  that is not there; a `<DlqPolicy>` with `<Enabled>false</Enabled>` removes the policy.
"""

from __future__ import annotations

from backends.memory import MemoryBackend
from backends.memory.catalog import UNCHANGED, Unchanged
from backends.serve.smq import wire
from backends.serve.smq.messages import Answer
from backends.serve.smq.wire import SmqError
from worker.errors import FatalBackendError
from worker.types import QueueSpec, RedrivePolicy

__all__ = ["POLLING_WAIT", "QueueCalls"]

POLLING_WAIT = "PollingWaitSeconds"
_DEFAULTS = {"VisibilityTimeout": 30, "DelaySeconds": 0, "MessageRetentionPeriod": 345_600}


class QueueCalls:
    """The queue half of the SMQ service."""

    def __init__(self, backend: MemoryBackend) -> None:
        self._engine = backend.engine

    def create(self, name: str, raw: bytes, base_url: str) -> Answer:
        fields = _fields(raw)
        size = fields.pop("MaximumMessageSize", self._engine.dialect.max_message_bytes)
        polling = fields.pop(POLLING_WAIT, 0)
        if not 0 <= polling <= self._engine.dialect.max_wait_s:
            raise SmqError("InvalidArgument", f"PollingWaitSeconds={polling} is not in 0-30.")
        spec = QueueSpec(
            name,
            visibility_timeout_s=fields["VisibilityTimeout"],
            delay_s=fields["DelaySeconds"],
            retention_s=fields["MessageRetentionPeriod"],
            redrive=_dead_letter_policy(raw),
        )
        existed = name in self._engine.list_queues(name)  # names, sorted
        self._engine.create_queue(spec, max_message_bytes=size)
        self._engine.keep_attributes(name, {POLLING_WAIT: str(polling)})
        url = f"{base_url}/queues/{name}"
        return (204 if existed else 201), b"", {"Location": url}

    def set_attributes(self, name: str, raw: bytes) -> Answer:
        given = _given(raw)
        polling = given.pop(POLLING_WAIT, None)
        if polling is not None and not 0 <= polling <= self._engine.dialect.max_wait_s:
            raise SmqError("InvalidArgument", f"PollingWaitSeconds={polling} is not in 0-30.")
        self._engine.set_queue_attributes(
            name,
            visibility_timeout_s=given.get("VisibilityTimeout"),
            delay_s=given.get("DelaySeconds"),
            retention_s=given.get("MessageRetentionPeriod"),
            max_message_bytes=given.get("MaximumMessageSize"),
            redrive=_changed_policy(raw),
        )
        if polling is not None:
            self._engine.keep_attributes(name, {POLLING_WAIT: str(polling)})
        return 204, b"", {}

    def attributes(self, name: str) -> Answer:
        described = self._engine.describe_queue(name)
        config, counts = described.config, described.counts
        kept = self._engine.kept_attributes(name)
        fields: dict[str, object] = {
            "QueueName": config.name,
            "CreateTime": described.created_timestamp,
            "LastModifyTime": described.last_modified_timestamp,
            "VisibilityTimeout": config.visibility_timeout_s,
            "DelaySeconds": config.delay_s,
            "MaximumMessageSize": config.max_message_bytes,
            "MessageRetentionPeriod": config.retention_s,
            "PollingWaitSeconds": kept.get(POLLING_WAIT, "0"),
            "ActiveMessages": counts.visible,
            "InactiveMessages": counts.in_flight,
            "DelayMessages": counts.delayed,
            "LoggingEnabled": "False",
        }
        if config.redrive is not None:
            fields["DlqPolicy"] = {
                "Enabled": "true",
                "DeadLetterTargetQueue": config.redrive.dead_letter_queue,
                "MaxReceiveCount": config.redrive.max_receive_count,
            }
        return 200, wire.document("Queue", fields), {}

    def list(self, prefix: str, limit: int, marker: str, base_url: str) -> Answer:
        names = sorted(n for n in self._engine.list_queues(prefix) if n > marker or not marker)
        rows = [{"QueueURL": f"{base_url}/queues/{n}"} for n in names[:limit]]
        tail = {"NextMarker": names[limit - 1]} if len(names) > limit else None
        return 200, wire.list_document("Queues", "Queue", rows, tail), {}

    def delete(self, name: str) -> Answer:
        try:
            self._engine.delete_queue(name)
        except FatalBackendError as error:
            if "NonExistentQueue" not in (error.code or ""):
                raise
        return 204, b"", {}


def _fields(raw: bytes) -> dict[str, int]:
    return {**_DEFAULTS, **_given(raw)}


def _given(raw: bytes) -> dict[str, int]:
    """The attributes a `<Queue>` document names, and only those."""
    fields: dict[str, int] = {}
    if not raw.strip():
        return fields
    root = wire.parse(raw, "Queue")
    for name in (*_DEFAULTS, "MaximumMessageSize", POLLING_WAIT):
        value = wire.text(root, name)
        if value is not None:
            try:
                fields[name] = int(value)
            except ValueError:
                raise SmqError("InvalidArgument", f"{name} is not an integer.") from None
    return fields


def _changed_policy(raw: bytes) -> RedrivePolicy | Unchanged | None:
    """A SetQueueAttributes' dead-letter policy: UNCHANGED when it names none."""
    if not raw.strip() or not wire.children(wire.parse(raw, "Queue"), "DlqPolicy"):
        return UNCHANGED
    return _dead_letter_policy(raw)


def _dead_letter_policy(raw: bytes) -> RedrivePolicy | None:
    if not raw.strip():
        return None
    policies = wire.children(wire.parse(raw, "Queue"), "DlqPolicy")
    if not policies:
        return None
    policy = policies[0]
    if (wire.text(policy, "Enabled") or "true").lower() != "true":
        return None
    target = wire.text(policy, "DeadLetterTargetQueue")
    count = wire.text(policy, "MaxReceiveCount")
    if not target or not (count or "").isdigit():
        raise SmqError(
            "InvalidArgument", "DlqPolicy needs DeadLetterTargetQueue and MaxReceiveCount."
        )
    return RedrivePolicy(target, int(str(count)))
