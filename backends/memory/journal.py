"""Journal records: what an engine changed, as deltas of its snapshot (`backends.memory.snapshot`),
and a snapshot brought forward by them. Pure: the file is the caller's
(`backends.serve.sqs.persist`).

Why state deltas and not the requests replayed: a request's effect depends on the time it
ran (which messages were visible, when a visibility ends), on ids drawn at random and on
move tasks advancing with the clock, so replaying requests later would not rebuild the state
that was answered. A delta is that state itself, read from the engine after the requests of
a group ran: replaying it needs no engine and cannot diverge.

Rules this module keeps:
- A record (`record`) holds, per queue named in a `Changed`: the queue whole (`whole`, after
  a change to it as a whole), or gone (None), or its message deltas: new messages whole
  (`put`), known ones by the fields a receive, a visibility change or a redrive changes
  (`set`), removed ones by id (`drop`), new deduplication ids (`dedup`) and the next FIFO
  sequence number; and the engine's own state (deleted names, move tasks) when it changed.
- Times are wall-clock seconds, as in a snapshot.
- `replay` applies records in order to a snapshot's data: a changed message keeps its place
  (standard queues serve visible messages in that order), a new one goes last. A delta for a
  message or queue the data does not hold is skipped (it was removed since, by time).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from backends.memory.changes import Changed
from backends.memory.engine import MemoryEngine
from backends.memory.snapshot import dump_engine, dump_message, dump_queue

__all__ = ["record", "replay"]

# What a receive, a visibility change or a redrive changes of a stored message.
_TIMES = ("visible_at", "received_at")
_PLAIN = ("receive_count", "first_receive_ms", "receipt_handle")


def record(engine: MemoryEngine, changed: Changed) -> dict[str, Any]:
    """The delta of `changed`, read from `engine` now."""
    wall = engine.clock.wall_offset_s()
    queues: dict[str, Any] = {}
    for name in changed.queues:
        state = engine._queues.get(name)
        queues[name] = None if state is None else {"whole": dump_queue(state, wall)}
    for (name, message_id), new in changed.messages.items():
        delta = _delta(engine, queues, name)
        if delta is None:
            continue
        message = engine._queues[name].messages.get(message_id)
        if message is None:
            delta["drop"].append(message_id)
        elif new:
            delta["put"].append(dump_message(message, wall))
        else:
            fields: dict[str, Any] = {"state": message.state.value}
            fields.update({f: getattr(message, f) + wall for f in _TIMES})
            fields.update({f: getattr(message, f) for f in _PLAIN})
            delta["set"].append([message_id, fields])
    for name, dedup_id in changed.deduplication:
        delta = _delta(engine, queues, name)
        entry = None if delta is None else engine._queues[name].deduplication._ids.get(dedup_id)
        if delta is not None and entry is not None:
            delta["dedup"].append([dedup_id, entry[1], entry[0] + wall])
    result: dict[str, Any] = {"queues": queues}
    if changed.engine:
        result["engine"] = dump_engine(engine, wall)
    return result


def _delta(engine: MemoryEngine, queues: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The message deltas of queue `name` in a record; None when it is recorded whole or
    gone (that covers its messages)."""
    if name in queues:
        held = queues[name]
        return None if held is None or "whole" in held else held
    state = engine._queues.get(name)
    if state is None:
        queues[name] = None
        return None
    delta = {"put": [], "set": [], "drop": [], "dedup": [], "next_sequence": state.next_sequence}
    queues[name] = delta
    return delta


def replay(data: Mapping[str, Any], records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """A snapshot's data brought forward by `records`, in order (see the module)."""
    queues = {q["config"]["name"]: _keyed(q) for q in data["queues"]}
    result = dict(data)
    for item in records:
        for name, change in item["queues"].items():
            if change is None:
                queues.pop(name, None)
            elif "whole" in change:
                queues[name] = _keyed(change["whole"])
            elif name in queues:
                _apply(queues[name], change)
        if "engine" in item:
            result.update(item["engine"])
    result["queues"] = [{**q, "messages": list(q["messages"].values())} for q in queues.values()]
    return result


def _keyed(queue: Mapping[str, Any]) -> dict[str, Any]:
    messages = {m["message_id"]: m for m in queue["messages"]}
    return {**queue, "messages": messages, "deduplication": list(queue["deduplication"])}


def _apply(queue: dict[str, Any], change: Mapping[str, Any]) -> None:
    messages: dict[str, Any] = queue["messages"]
    for saved in change["put"]:
        messages[saved["message_id"]] = saved
    for message_id, fields in change["set"]:
        if message_id in messages:
            messages[message_id] = {**messages[message_id], **fields}
    for message_id in change["drop"]:
        messages.pop(message_id, None)
    queue["deduplication"].extend(change["dedup"])
    queue["next_sequence"] = change["next_sequence"]
