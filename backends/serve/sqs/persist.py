"""`serve-sqs --persist PATH`: the engine's state on disk, so that it survives a restart and a
crash. What it promises: **no answered change is lost**. A send, delete, visibility change,
receive, queue change, purge or move task that got its answer is on disk before the answer
went out, so a SIGKILL (or a power cut, the disk willing) at any moment loses none of them.

Rules this module keeps:
- Files: PATH, a JSON `backends.memory.snapshot`; PATH.journal and, during a fold or after
  one that failed, PATH.journal.<N> (`backends.serve.sqs.journal`): the changes since that
  snapshot as state deltas (`backends.memory.journal` says why deltas and not requests);
  and PATH.lock, held (`flock`) by the one process serving PATH: a second one refuses to
  start rather than write over the first one's journal.
- The engine reports each change to a `Changes` sink. A request's answer waits in `durable`
  until every change made before it returns is on disk (a read-only request waits for
  those too: it must not answer with what a crash could still undo): the changes of every
  request answered while one write is under way go together in the next line, one
  `fdatasync` for all of them (group commit), written from a worker thread while the
  event loop goes on serving. A write that fails (a full disk) fails the answers that
  waited on it (InternalError) until a snapshot is written again.
- Changes leave the sink only into a journal line: a fold never takes them (the snapshot
  holds them, and so does the next line, harmlessly: a delta is a state, applied twice it
  is the same), so a fold that fails loses nothing.
- Fold (compaction): every `interval_s`, and when the server stops, if anything was
  journaled since the last one, under the lock only for a moment: PATH.journal renamed
  aside to PATH.journal.<N> (N its last record) and a new one started, the engine's state
  taken. Then, while journal lines go on being appended, the state is written to PATH
  atomically (a temporary file, synced, renamed over PATH, the directory synced) with N,
  and the segments up to N are deleted. A crash at any point leaves PATH (old or new) and
  the segments holding every record after its N.
- At start: take PATH.lock, read PATH (missing: empty), apply the records after its number
  from every segment in order (a torn tail is ignored: it was never acknowledged), restore
  the engine, then fold at once, so the journal starts empty and the new epoch of receipt
  handles is on disk before any handle of it is handed out. A PATH that does not read is
  an error (nothing is served over a state that was lost).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import anyio
import structlog

from backends.memory.changes import Changes
from backends.memory.engine import MemoryEngine
from backends.memory.journal import record, replay
from backends.memory.snapshot import FORMAT, dump, restore
from backends.serve.sqs.journal import JournalFile, encode, read, segment_path, segments

__all__ = ["InUse", "Persistence", "load_snapshot", "save_snapshot"]

_log = structlog.get_logger("lease_worker.sqs_endpoint")
#: The snapshot's member naming the last journal record it includes.
_JOURNAL_KEY = "journal"
#: Messages encoded per piece of a snapshot: the thread writing it lets the loop run between.
_CHUNK = 256


class InUse(OSError):
    """Another process holds PATH.lock: it serves PATH."""


class Persistence:
    """PATH and its journal for one engine whose `changes` sink is set (see the module).
    `open` loads and folds; `run` (a task) writes the journal and folds until cancelled,
    then folds once more; requests await `durable` before answering."""

    def __init__(self, engine: MemoryEngine, path: Path, *, interval_s: float) -> None:
        if engine.changes is None:
            raise ValueError("a persisted engine needs a Changes sink")
        self._engine = engine
        self._changes: Changes = engine.changes
        self.path = path
        self._interval_s = interval_s
        self._journal: JournalFile | None = None
        self._lock_fd: int | None = None
        self._segment_used = False  # PATH.journal had an append since it was started
        self._sequence = 0  # the number of the last record written (or in the snapshot)
        self._compacted = 0  # the number of the last record the snapshot on disk includes
        self._durable = 0  # `Changes.count` up to which everything is on disk
        self._broken: str | None = None
        self._broken_at = 0  # `Changes.count` when a write failed: a later snapshot mends it
        self._lock = anyio.Lock()  # the journal file: one append or rotation at a time
        self._folding = anyio.Lock()
        self._wanted = anyio.Event()
        self._written = anyio.Event()

    @property
    def journal_path(self) -> Path:
        return self.path.with_name(self.path.name + ".journal")

    @property
    def lock_path(self) -> Path:
        return self.path.with_name(self.path.name + ".lock")

    def open(self) -> bool:
        """Take PATH.lock, load PATH and its journal into the engine (which has no queues)
        and fold; False when there was nothing to load. `ValueError` with a one-line reason
        when PATH does not read; `InUse` when another process serves PATH; `OSError` when
        the fold cannot be written."""
        self._take_lock()
        try:
            return self._load()
        except BaseException:
            self.close()
            raise

    def _load(self) -> bool:
        data = _read_snapshot(self.path)
        after = 0 if data is None else int(data.get(_JOURNAL_KEY, 0))
        records: list[tuple[int, dict[str, Any]]] = []
        for _, segment in segments(self.journal_path):
            found = read(segment)
            if found.ignored_bytes:
                _log.warning(
                    "sqs_endpoint.journal_torn", path=str(segment), bytes=found.ignored_bytes
                )
            records.extend((n, r) for n, r in found.records if n > after)
        loaded = data is not None or bool(records)
        data = data or {"format": FORMAT, "epochs": [], "deleted": {}, "moves": [], "queues": []}
        records.sort(key=lambda item: item[0])
        self._sequence = max([after, *(n for n, _ in records)])
        try:
            restore(self._engine, replay(data, (r for _, r in records)))
        except (ValueError, KeyError, TypeError) as error:
            raise ValueError(f"{self.path}: {error}") from None
        # The state on disk whole, then every segment deleted (PATH.journal too, with any
        # torn tail: new lines must follow whole ones) and a new journal started.
        count = self._changes.count
        self._write_snapshot(self._snapshot(), every_segment=True)
        self._changes.take()  # held by the snapshot just written
        self._durable = count
        self._journal = JournalFile(self.journal_path)
        self._segment_used = False
        _sync_directory(self.path.parent)
        return loaded

    def compact_now(self) -> None:
        """Fold synchronously (after `open`, before serving); `OSError` when it cannot."""
        self._rotate()
        count = self._changes.count
        self._write_snapshot(self._snapshot())
        self._changes.take()  # held by the snapshot just written
        self._durable = max(self._durable, count)

    async def durable(self) -> None:
        """Return once every change made so far is on disk; `OSError` when it cannot be."""
        target = self._changes.count
        while self._durable < target:
            if self._broken is not None:
                raise OSError(f"the journal cannot be written: {self._broken}")
            written = self._written
            self._wanted.set()
            await written.wait()

    async def run(self) -> None:
        """Write the journal as `durable` asks and fold every `interval_s`, until
        cancelled; then fold once more."""
        try:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(self._compact_every)
                while True:
                    await self._wanted.wait()
                    self._wanted = anyio.Event()
                    await self._write_journal()
        finally:
            with anyio.CancelScope(shield=True):
                await self._compact()
            self.close()

    def close(self) -> None:
        """Close the journal and let PATH.lock go (`run` does it when it ends)."""
        if self._journal is not None:
            self._journal.close()
            self._journal = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None

    async def _compact_every(self) -> None:
        while True:
            await anyio.sleep(self._interval_s)
            if self._sequence > self._compacted or self._broken is not None:
                await self._compact()

    async def _write_journal(self) -> None:
        async with self._lock:
            if self._broken is not None:
                self._wake()  # the changes stay in the sink: the next snapshot holds them
                return
            count = self._changes.count
            changed = self._changes.take()
            if changed:
                self._sequence += 1
                delta = record(self._engine, changed)  # plain data, apart from the engine
                self._segment_used = True
                try:
                    await anyio.to_thread.run_sync(self._append, self._sequence, delta)
                except OSError as error:
                    # These changes are in no file now, and a line after a torn one would
                    # not be read: answers fail until a snapshot holds them.
                    self._broken = error.strerror or type(error).__name__
                    self._broken_at = count
                    where = str(self.journal_path)
                    _log.error("sqs_endpoint.persist_failed", path=where, error=self._broken)
            if self._broken is None:
                self._durable = max(self._durable, count)
            self._wake()

    async def _compact(self) -> None:
        async with self._folding:
            async with self._lock:  # a moment: no append is under way while the segment turns
                try:
                    await anyio.to_thread.run_sync(self._rotate)
                except OSError as error:
                    self._failed(self.journal_path, error)
                    return
                count = self._changes.count
                data = self._snapshot()  # the state now: up to `count`, records up to N
            try:
                await anyio.to_thread.run_sync(self._write_snapshot, data)
            except OSError as error:
                self._failed(self.path, error)  # nothing lost: the segments are kept
                return
            if self._broken is not None and count >= self._broken_at:
                self._broken = None
            self._durable = max(self._durable, count)
            self._wake()

    def _failed(self, path: Path, error: OSError) -> None:
        _log.error("sqs_endpoint.persist_failed", path=str(path), error=error.strerror)
        self._wake()

    def _take_lock(self) -> None:
        descriptor = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(descriptor, 32, 0).decode(errors="replace").strip()
            os.close(descriptor)
            by = f" (pid {holder})" if holder.isdigit() else ""
            reason = f"in use by another process{by} holding {self.lock_path}"
            raise InUse(errno.EWOULDBLOCK, reason) from None
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, f"{os.getpid()}\n".encode(), 0)
        self._lock_fd = descriptor

    def _rotate(self) -> None:
        """PATH.journal renamed aside to PATH.journal.<N> and a new one started, if it was
        appended to (blocking: from a thread once serving)."""
        if self._journal is not None and not self._segment_used:
            return
        if self._journal is not None:
            self._journal.close()
            self._journal = None
        if self.journal_path.exists():
            os.replace(self.journal_path, segment_path(self.journal_path, self._sequence))
        self._journal = JournalFile(self.journal_path)
        self._segment_used = False
        _sync_directory(self.path.parent)

    def _append(self, sequence: int, delta: dict[str, Any]) -> None:
        if self._journal is None:  # a rotation that could not start the new one (a full disk)
            self._journal = JournalFile(self.journal_path)
        self._journal.append(encode(sequence, delta))

    def _wake(self) -> None:
        written, self._written = self._written, anyio.Event()
        written.set()

    def _snapshot(self) -> dict[str, Any]:
        data = dump(self._engine)
        data[_JOURNAL_KEY] = self._sequence
        return data

    def _write_snapshot(self, data: dict[str, Any], *, every_segment: bool = False) -> None:
        """PATH atomically, then the segments it holds deleted (blocking: from a thread
        once serving)."""
        last = int(data[_JOURNAL_KEY])
        _write_atomically(self.path, _encoded(data))
        self._compacted = last
        for number, segment in segments(self.journal_path):
            if every_segment or (number is not None and number <= last):
                segment.unlink(missing_ok=True)


def _read_snapshot(path: Path) -> dict[str, Any] | None:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as error:
        raise ValueError(f"cannot read {path}: {error.strerror}") from None
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        raise ValueError(f"{path} is not JSON") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"{path}: not a snapshot of format {FORMAT}")
    return data


def load_snapshot(engine: MemoryEngine, path: Path) -> bool:
    """Restore the snapshot `path` alone into `engine` (which has no queues); False when
    there is no file. `ValueError` with a one-line reason when it cannot be read."""
    data = _read_snapshot(path)
    if data is None:
        return False
    try:
        restore(engine, data)
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None
    return True


def save_snapshot(engine: MemoryEngine, path: Path) -> None:
    """Write the engine's state to `path` atomically (a snapshot alone, no journal)."""
    _write_atomically(path, _encoded(dump(engine)))


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _encoded(data: dict[str, Any]) -> Iterator[bytes]:
    """`data` as JSON in pieces, the messages a few at a time: the C encoder holds the GIL
    for a whole call, so one call for the whole state would stall the event loop."""
    rest = {k: v for k, v in data.items() if k != "queues"}
    yield _dumps(rest)[:-1] + b',"queues":['
    for i, queue in enumerate(data.get("queues", [])):
        fields = {k: v for k, v in queue.items() if k != "messages"}
        yield (b"," if i else b"") + _dumps(fields)[:-1] + b',"messages":['
        messages = queue.get("messages", [])
        for start in range(0, len(messages), _CHUNK):
            chunk = b",".join(_dumps(m) for m in messages[start : start + _CHUNK])
            yield (b"," if start else b"") + chunk
        yield b"]}"
    yield b"]}"


def _sync_directory(path: Path) -> None:
    directory = os.open(path, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def _write_atomically(path: Path, pieces: Iterable[bytes]) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    # Owner only: the snapshot holds every message body.
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(descriptor, 0o600)  # a leftover from a crash keeps its mode otherwise
    with os.fdopen(descriptor, "wb") as file:
        for piece in pieces:
            file.write(piece)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)
    _sync_directory(path.parent)
