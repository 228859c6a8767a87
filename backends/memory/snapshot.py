"""An engine's whole state as plain data (JSON-ready), and back: what `serve-sqs --persist`
saves. Pure: the file is the caller's (`backends.serve.sqs.persist`).

Rules this module keeps:
- Times are saved as wall-clock seconds (the engine clock's time plus its wall offset) and
  read back against the clock of the engine restored into, so delays, visibility timeouts,
  retention, deduplication windows, the 12 h cap and move tasks' pace run on across a
  restart: time passes while the server is down, as it would for SQS.
- Saved: every queue (attributes, times, tags, permissions, kept attributes, the FIFO
  sequence), every message in its state with its receipt handle and counts, deduplication
  ids, move tasks, recently deleted names, and the epochs (handle prefixes) of the engine
  and its predecessors. Handles issued before a restart stay valid, and the engine restored
  into keeps its own epoch, so the handles and ids it issues never repeat earlier ones
  (the counter restored with the prefix once reissued the same handles after a crash).
  Not saved: FIFO receive attempts (they last 5 minutes) and listeners.
- This module reads and sets the engine's private state: it is part of the engine, kept
  apart because only `--persist` needs it.
- A snapshot of another `FORMAT`, or one that does not read as one, is `ValueError`; it is
  restored only into an engine with no queues.
"""

from __future__ import annotations

import base64
import itertools
from collections.abc import Mapping
from dataclasses import asdict, fields
from types import MappingProxyType
from typing import Any

from backends.memory.config import QueueConfig
from backends.memory.engine import MemoryEngine
from backends.memory.message import Message, MessageState
from backends.memory.moves import MoveStatus, MoveTask
from backends.memory.queue import Queue
from backends.memory.tags import Permission
from worker.types import MessageAttribute, RedrivePolicy

__all__ = ["FORMAT", "dump", "dump_engine", "dump_message", "dump_queue", "restore"]

FORMAT = "lease-worker-engine/1"
# Message fields saved as they are; times (monotonic in the engine) are converted.
_MESSAGE_TIMES = ("sent_at", "visible_at", "received_at")
_MESSAGE_PLAIN = tuple(
    f.name
    for f in fields(Message)
    if f.name not in (*_MESSAGE_TIMES, "message_attributes", "state", "generation")
)


def dump(engine: MemoryEngine) -> dict[str, Any]:
    """The engine's state; the engine is left as it was (but for one unused id)."""
    wall = engine.clock.wall_offset_s()
    next_id = next(engine._ids)
    engine._ids = itertools.count(next_id)
    return {
        "format": FORMAT,
        "id_prefix": engine._id_prefix,
        "next_id": next_id,
        "epochs": sorted(engine.epochs),
        **dump_engine(engine, wall),
        "queues": [dump_queue(state, wall) for state in engine._queues.values()],
    }


def dump_engine(engine: MemoryEngine, wall: float) -> dict[str, Any]:
    """The engine's own state but its queues: recently deleted names, move tasks."""
    return {
        "deleted": {name: at + wall for name, at in engine._deleted_at.items()},
        "moves": [
            {**asdict(task), "status": task.status.value, "started_at": task.started_at + wall}
            for task in engine._moves.values()
        ],
    }


def dump_queue(state: Queue, wall: float) -> dict[str, Any]:
    """One queue whole, its messages in the order they are served."""
    config = asdict(state.config)
    messages = list(state.messages.values())
    if not state.config.fifo:  # standard queues serve visible messages in this order
        order = {message_id: i for i, message_id in enumerate(state.visible)}
        messages.sort(key=lambda m: order.get(m.message_id, len(order)))
    return {
        "config": config,
        "created_at": state.created_at + wall,
        "modified_at": state.modified_at + wall,
        "last_purge_at": None if state.last_purge_at is None else state.last_purge_at + wall,
        "tags": dict(state.tags),
        "permissions": {k: asdict(v) for k, v in state.permissions.items()},
        "kept_attributes": dict(state.kept_attributes),
        "next_sequence": state.next_sequence,
        "deduplication": [[d, m, at + wall] for d, m, at in state.deduplication.entries()],
        "messages": [dump_message(message, wall) for message in messages],
    }


def dump_message(message: Message, wall: float) -> dict[str, Any]:
    saved: dict[str, Any] = {name: getattr(message, name) for name in _MESSAGE_PLAIN}
    saved.update({name: getattr(message, name) + wall for name in _MESSAGE_TIMES})
    saved["state"] = message.state.value
    saved["message_attributes"] = {
        name: [a.data_type, a.string_value, _b64(a.binary_value)]
        for name, a in message.message_attributes.items()
    }
    return saved


def restore(engine: MemoryEngine, data: Mapping[str, Any]) -> None:
    """Put a `dump` back into `engine`, which must have no queues."""
    if engine.list_queues():
        raise ValueError("a snapshot is restored only into an engine with no queues")
    if not isinstance(data, Mapping) or data.get("format") != FORMAT:
        raise ValueError(f"not a snapshot of format {FORMAT}")
    try:
        _restore(engine, data, engine.clock.wall_offset_s())
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        engine._queues.clear()
        raise ValueError(f"the snapshot does not read: {type(error).__name__}") from None


def _restore(engine: MemoryEngine, data: Mapping[str, Any], wall: float) -> None:
    # Not the saved prefix and counter: this engine's own epoch (see the module).
    epochs = data["epochs"] if "epochs" in data else [data["id_prefix"]]
    engine.epochs.update(str(epoch) for epoch in epochs)
    engine._deleted_at = {n: float(at) - wall for n, at in data["deleted"].items()}
    for saved in data["queues"]:
        state = _restore_queue(saved, wall)
        engine._queues[state.config.name] = state
    for raw in data["moves"]:
        task = MoveTask(**{**raw, "status": MoveStatus(raw["status"])})
        task.started_at -= wall
        engine._moves[task.task_handle] = task
    now = engine.clock.now()
    for state in engine._queues.values():
        state.settle(now)


def _restore_queue(saved: Mapping[str, Any], wall: float) -> Queue:
    raw = dict(saved["config"])
    redrive = raw.pop("redrive")
    config = QueueConfig(**raw, redrive=None if redrive is None else RedrivePolicy(**redrive))
    state = Queue(config, created_at=float(saved["created_at"]) - wall)
    state.modified_at = float(saved["modified_at"]) - wall
    purged = saved["last_purge_at"]
    state.last_purge_at = None if purged is None else float(purged) - wall
    state.tags.update(saved["tags"])
    state.kept_attributes.update(saved["kept_attributes"])
    for label, grant in saved["permissions"].items():
        state.permissions[label] = Permission(tuple(grant["accounts"]), tuple(grant["actions"]))
    state.next_sequence = int(saved["next_sequence"])
    for dedup_id, message_id, until in saved["deduplication"]:
        state.deduplication.restore(dedup_id, message_id, float(until) - wall)
    for raw_message in saved["messages"]:
        message = _restore_message(raw_message, wall)
        state.restore(message, expires_at=message.sent_at + config.retention_s)
    return state


def _restore_message(saved: Mapping[str, Any], wall: float) -> Message:
    attributes = {
        name: MessageAttribute(kind, string_value=text, binary_value=_unb64(binary))
        for name, (kind, text, binary) in saved["message_attributes"].items()
    }
    given: dict[str, Any] = {name: saved[name] for name in _MESSAGE_PLAIN}
    given.update({name: float(saved[name]) - wall for name in _MESSAGE_TIMES})
    given["state"] = MessageState(saved["state"])
    given["message_attributes"] = MappingProxyType(attributes)
    return Message(**given)


def _b64(value: bytes | None) -> str | None:
    return None if value is None else base64.b64encode(value).decode()


def _unb64(value: str | None) -> bytes | None:
    return None if value is None else base64.b64decode(value)
