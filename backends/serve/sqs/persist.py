"""`serve-sqs --persist PATH`: the engine's state in a file, so that it survives a restart.

Rules this module keeps:
- The file is a JSON `backends.memory.snapshot`. It is written atomically: to a temporary
  file in the same directory, flushed to disk, then renamed over PATH (and the directory
  synced), so PATH always holds a whole snapshot, the old or the new.
- It is written every `interval_s` while serving and once more when the server stops, so a
  crash loses at most the last interval. It is read once, at start; a missing file is an
  empty engine, a file that does not read as a snapshot is an error (nothing is served over
  a state that was lost).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import anyio
import structlog

from backends.memory.engine import MemoryEngine
from backends.memory.snapshot import dump, restore

__all__ = ["load_snapshot", "persist_every", "save_snapshot"]

_log = structlog.get_logger("lease_worker.sqs_endpoint")


def load_snapshot(engine: MemoryEngine, path: Path) -> bool:
    """Restore `path` into `engine` (which has no queues); False when there is no file.
    `ValueError` with a one-line reason when it cannot be read."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return False
    except OSError as error:
        raise ValueError(f"cannot read {path}: {error.strerror}") from None
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        raise ValueError(f"{path} is not JSON") from None
    try:
        restore(engine, data)
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None
    return True


def save_snapshot(engine: MemoryEngine, path: Path) -> None:
    """Write the engine's state to `path` atomically."""
    data = json.dumps(dump(engine), separators=(",", ":")).encode()
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


async def persist_every(engine: MemoryEngine, path: Path, interval_s: float) -> None:
    """Save every `interval_s` until cancelled, then save once more."""
    try:
        while True:
            await anyio.sleep(interval_s)
            _save_logged(engine, path)
    finally:
        _save_logged(engine, path)  # synchronous: a cancellation cannot cut it short


def _save_logged(engine: MemoryEngine, path: Path) -> None:
    try:
        save_snapshot(engine, path)
    except OSError as error:  # a full disk must not stop the server; it says so
        _log.error("sqs_endpoint.persist_failed", path=str(path), error=error.strerror)
