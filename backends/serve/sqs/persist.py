"""`serve-sqs --persist PATH`: the engine's state on disk, so that it survives a restart and a
crash. What it promises: **no answered change is lost**. A send, delete, visibility change,
receive, queue change, purge or move task that got its answer is on disk before the answer
went out, so a SIGKILL (or a power cut, the disk willing) at any moment loses none of them.

Rules this module keeps:
- Two files: PATH, a JSON `backends.memory.snapshot`, and PATH.journal
  (`backends.serve.sqs.journal`), the changes since that snapshot as state deltas
  (`backends.memory.journal` says why deltas and not requests).
- The engine reports each change to a `Changes` sink. A request's answer waits in `durable`
  until its changes are journaled: the changes of every request answered while one write
  is under way go together in the next line, one `fdatasync` for all of them (group
  commit), written from a worker thread while the event loop goes on serving. A request that
  changed nothing waits for nothing. A write that fails (a full disk) fails the answers that
  waited on it (InternalError) until a snapshot is written again.
- Compaction: every `interval_s`, and when the server stops, if the journal holds anything,
  the whole state is written to PATH atomically (a temporary file, synced, renamed over
  PATH, the directory synced), then the journal is emptied. The snapshot carries the number
  of the last record it includes, so a crash between the two replays nothing twice.
- At start: read PATH (missing: empty), apply the journal's records after its number (a torn
  last record is ignored: it was never acknowledged), restore the engine, then compact at
  once, so the journal starts empty and the new epoch of receipt handles is on disk before
  any handle of it is handed out. A PATH that does not read is an error (nothing is served
  over a state that was lost).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import anyio
import structlog

from backends.memory.changes import Changes
from backends.memory.engine import MemoryEngine
from backends.memory.journal import record, replay
from backends.memory.snapshot import FORMAT, dump, restore
from backends.serve.sqs.journal import JournalFile, encode, read

__all__ = ["Persistence", "load_snapshot", "save_snapshot"]

_log = structlog.get_logger("lease_worker.sqs_endpoint")
#: The snapshot's member naming the last journal record it includes.
_JOURNAL_KEY = "journal"


class Persistence:
    """PATH and PATH.journal for one engine whose `changes` sink is set (see the module).
    `open` loads and compacts; `run` (a task) writes the journal and compacts until
    cancelled, then compacts once more; requests await `durable` before answering."""

    def __init__(self, engine: MemoryEngine, path: Path, *, interval_s: float) -> None:
        if engine.changes is None:
            raise ValueError("a persisted engine needs a Changes sink")
        self._engine = engine
        self._changes: Changes = engine.changes
        self.path = path
        self._interval_s = interval_s
        self._journal: JournalFile | None = None
        self._sequence = 0  # the number of the last record written (or in the snapshot)
        self._compacted = 0  # the number of the last record the snapshot on disk includes
        self._durable = 0  # `Changes.count` up to which everything is on disk
        self._broken: str | None = None
        self._lock = anyio.Lock()
        self._wanted = anyio.Event()
        self._written = anyio.Event()

    @property
    def journal_path(self) -> Path:
        return self.path.with_name(self.path.name + ".journal")

    def open(self) -> bool:
        """Load PATH and its journal into the engine (which has no queues) and compact;
        False when there was nothing to load. `ValueError` with a one-line reason when PATH
        does not read."""
        data = _read_snapshot(self.path)
        found = read(self.journal_path)
        if found.ignored_bytes:
            _log.warning(
                "sqs_endpoint.journal_torn", path=str(self.journal_path), bytes=found.ignored_bytes
            )
        loaded = data is not None or bool(found.records)
        data = data or {"format": FORMAT, "epochs": [], "deleted": {}, "moves": [], "queues": []}
        after = int(data.get(_JOURNAL_KEY, 0))
        records = [(n, r) for n, r in found.records if n > after]
        self._sequence = max([after, *(n for n, _ in records)])
        try:
            restore(self._engine, replay(data, (r for _, r in records)))
        except (ValueError, KeyError, TypeError) as error:
            raise ValueError(f"{self.path}: {error}") from None
        self._journal = JournalFile(self.journal_path)
        self._changes.take()
        self._write_snapshot(self._snapshot())
        return loaded

    def compact_now(self) -> None:
        """Compact synchronously (at start, before serving)."""
        self._changes.take()
        self._durable = self._changes.count
        self._write_snapshot(self._snapshot())

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
        """Write the journal as `durable` asks and compact every `interval_s`, until
        cancelled; then compact once more."""
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
            if self._journal is not None:
                self._journal.close()

    async def _compact_every(self) -> None:
        while True:
            await anyio.sleep(self._interval_s)
            if self._sequence > self._compacted or self._broken is not None:
                await self._compact()

    async def _write_journal(self) -> None:
        async with self._lock:
            count = self._changes.count
            changed = self._changes.take()
            if changed and self._broken is None:
                self._sequence += 1
                delta = record(self._engine, changed)  # plain data, apart from the engine
                try:
                    await anyio.to_thread.run_sync(self._append, self._sequence, delta)
                except OSError as error:
                    self._broken = error.strerror or type(error).__name__
                    where = str(self.journal_path)
                    _log.error("sqs_endpoint.persist_failed", path=where, error=self._broken)
            if self._broken is None:
                self._durable = count
            self._wake()

    async def _compact(self) -> None:
        async with self._lock:
            count = self._changes.count
            self._changes.take()
            data = self._snapshot()
            try:
                await anyio.to_thread.run_sync(self._write_snapshot, data)
            except OSError as error:
                _log.error("sqs_endpoint.persist_failed", path=str(self.path), error=error.strerror)
                self._wake()
                return
            self._broken = None
            self._durable = count
            self._wake()

    def _append(self, sequence: int, delta: dict[str, Any]) -> None:
        assert self._journal is not None, "open() first"
        self._journal.append(encode(sequence, delta))

    def _wake(self) -> None:
        written, self._written = self._written, anyio.Event()
        written.set()

    def _snapshot(self) -> dict[str, Any]:
        data = dump(self._engine)
        data[_JOURNAL_KEY] = self._sequence
        return data

    def _write_snapshot(self, data: dict[str, Any]) -> None:
        """PATH atomically, then the journal emptied (blocking: from a thread once serving)."""
        _write_atomically(self.path, json.dumps(data, separators=(",", ":")).encode())
        self._compacted = int(data[_JOURNAL_KEY])
        assert self._journal is not None, "open() first"
        self._journal.truncate()


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
    _write_atomically(path, json.dumps(dump(engine), separators=(",", ":")).encode())


def _write_atomically(path: Path, data: bytes) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    # Owner only: the snapshot holds every message body.
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(descriptor, 0o600)  # a leftover from a crash keeps its mode otherwise
    with os.fdopen(descriptor, "wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
