"""The journal file of `serve-sqs --persist PATH`: `PATH.journal`, append-only, one line per
group of changes (`backends.memory.journal` records), each synced to disk before the answers
that depend on it go out.

Rules this module keeps:
- A line is `<crc32 of the JSON, 8 hex digits> <JSON [sequence number, record]>\\n`; JSON
  never holds a raw newline. Appends are synced (`fdatasync`) before `append` returns.
- Reading stops at the first line that is cut short (no newline), does not match its CRC or
  does not read: that line and any after it were being written when the process or the
  machine stopped, so none was synced, so none was acknowledged. `read` says how many bytes
  it left.
- Segments: records are appended to PATH.journal; a fold (`backends.serve.sqs.persist`)
  renames it aside to `PATH.journal.<N>`, N the number of its last record, and starts a new
  PATH.journal, so appends go on while the snapshot is written. `segments` lists them in
  the order their records were written: the numbered ones by N, then PATH.journal. Each
  segment is read on its own: a torn tail in one (a write that failed) does not hide the
  records of the next.
- The files are the owner's only (they hold message bodies).
"""

from __future__ import annotations

import glob
import json
import os
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["JournalFile", "Replayed", "encode", "read", "segment_path", "segments"]


def encode(sequence: int, record: Mapping[str, Any]) -> bytes:
    """One journal line."""
    payload = json.dumps([sequence, record], separators=(",", ":")).encode()
    return b"%08x %s\n" % (zlib.crc32(payload), payload)


@dataclass(slots=True)
class Replayed:
    """What `read` found: the records in order with their sequence numbers, and the bytes
    of a torn tail left unread."""

    records: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    ignored_bytes: int = 0


def read(path: Path) -> Replayed:
    """The whole records of the journal at `path` (none when there is no file)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return Replayed()
    found = Replayed()
    start = 0
    while start < len(raw):
        end = raw.find(b"\n", start)
        parsed = None if end < 0 else _line(raw[start:end])
        if parsed is None:
            found.ignored_bytes = len(raw) - start
            break
        found.records.append(parsed)
        start = end + 1
    return found


def _line(line: bytes) -> tuple[int, dict[str, Any]] | None:
    checksum, _, payload = line.partition(b" ")
    try:
        if int(checksum, 16) != zlib.crc32(payload):
            return None
        sequence, record = json.loads(payload)
    except (ValueError, TypeError, RecursionError):
        return None
    if not isinstance(sequence, int) or not isinstance(record, dict):
        return None
    return sequence, record


def segment_path(journal: Path, last: int) -> Path:
    """The name a segment of `journal` is renamed to, `last` the number of its last record."""
    return journal.with_name(f"{journal.name}.{last}")


def segments(journal: Path) -> list[tuple[int | None, Path]]:
    """The segments of `journal` that exist, oldest first, each with the number of its last
    record (None for `journal` itself, the one appended to)."""
    prefix = journal.name + "."
    found: list[tuple[int | None, Path]] = []
    for path in journal.parent.glob(glob.escape(prefix) + "*"):
        number = path.name[len(prefix) :]
        if number.isdigit() and number.isascii():
            found.append((int(number), path))
    found.sort(key=lambda item: item[0] or 0)
    if journal.exists():
        found.append((None, journal))
    return found


class JournalFile:
    """The journal open for appending (created if missing, mode 0600)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.fchmod(self._fd, 0o600)

    def append(self, lines: bytes) -> None:
        """Write `lines` at the end and sync them (blocking: call it from a thread)."""
        view = memoryview(lines)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]
        os.fdatasync(self._fd)

    def truncate(self) -> None:
        """Empty the journal (its records are in a snapshot now) and sync that."""
        os.ftruncate(self._fd, 0)
        os.fsync(self._fd)

    def close(self) -> None:
        os.close(self._fd)
