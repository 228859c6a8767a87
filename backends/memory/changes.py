"""What an engine changed: the sink a `MemoryEngine` reports its mutations to, so that a
journal (`backends.memory.journal`) can record them as state deltas.

Rules this module keeps:
- A message is named by (queue, message id), `new` when it was just stored (a send, a
  redrive, a move): a new message is recorded whole, a known one by its changing fields.
- A queue named by `queue` is recorded whole (attributes, tags, every message): its
  metadata changed, or a purge, a move or a deletion touched it at once. Such changes are
  rare (operators' calls); the hot ones (send, receive, visibility, delete) are per message.
- Deduplication ids are named one by one, as sends remember them.
- Changes driven by time alone (a delay or a visibility ending, retention) are not reported:
  a restored engine derives them again from the saved wall-clock times.
- `count` only grows: a waiter that saw it at N knows its own change is recorded once N
  changes are.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Changed", "Changes"]


@dataclass(slots=True)
class Changed:
    """One batch of changes, taken from `Changes` (see the module)."""

    messages: dict[tuple[str, str], bool] = field(default_factory=dict)
    queues: set[str] = field(default_factory=set)
    deduplication: set[tuple[str, str]] = field(default_factory=set)
    #: Move tasks or deleted queue names changed (the engine's own state).
    engine: bool = False

    def __bool__(self) -> bool:
        return bool(self.messages or self.queues or self.deduplication or self.engine)


class Changes:
    """The sink: the engine calls `message`, `queue`, `deduplication` and `engine`; the
    journal takes what accumulated with `take`."""

    __slots__ = ("_changed", "count")

    def __init__(self) -> None:
        self._changed = Changed()
        #: Changes reported so far, ever (never reset).
        self.count = 0

    def message(self, queue: str, message_id: str, *, new: bool = False) -> None:
        self.count += 1
        messages = self._changed.messages
        key = (queue, message_id)
        messages[key] = new or messages.get(key, False)

    def queue(self, name: str) -> None:
        self.count += 1
        self._changed.queues.add(name)
        self._changed.engine = True  # a deleted queue's name is the engine's to keep

    def deduplication(self, queue: str, dedup_id: str) -> None:
        self.count += 1
        self._changed.deduplication.add((queue, dedup_id))

    def engine(self) -> None:
        self.count += 1
        self._changed.engine = True

    def pending(self) -> bool:
        return bool(self._changed)

    def take(self) -> Changed:
        """Everything reported since the last `take`; the sink starts empty again."""
        taken, self._changed = self._changed, Changed()
        return taken
