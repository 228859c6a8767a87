"""`backends.serve.sqs.persist.Persistence` in process: what a failed write leaves on disk,
a fold that lets journal appends go on, the files a crash at any moment leaves."""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

import anyio
import pytest

import backends.serve.sqs.persist as persist
from backends.memory import MemoryEngine
from backends.memory.changes import Changes
from backends.serve.sqs.persist import Persistence
from worker.clock import ManualClock
from worker.types import OutgoingMessage, QueueSpec

pytestmark = pytest.mark.anyio


def _engine() -> MemoryEngine:
    return MemoryEngine(ManualClock(), changes=Changes())


def _after_sigkill(tmp: Path, path: Path) -> MemoryEngine:
    """What a restart would see: the files as they are now, copied aside."""
    crash = tmp / "crash"
    crash.mkdir()
    for found in path.parent.glob(path.name + "*"):
        if found.name != path.name + ".lock":
            shutil.copy(found, crash / found.name)
    engine = _engine()
    store = Persistence(engine, crash / path.name, interval_s=3600)
    store.open()
    store.close()
    return engine


async def test_a_failed_fold_loses_no_acknowledged_send(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "state.json"
    engine = _engine()
    store = Persistence(engine, path, interval_s=3600)
    store.open()
    engine.create_queue(QueueSpec("jobs"))
    store.compact_now()
    # The fold took the pending changes and, its snapshot failing, acknowledged them in no
    # file: the send below was answered 200 and lost to a SIGKILL.
    real = persist._write_atomically

    def full_disk(target: Path, data: bytes) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(store.run)
        # A send's engine call is over; its answer waits for `durable` while the periodic
        # compaction (a whole new snapshot: ENOSPC, where a small journal append is not) runs.
        engine.send("jobs", [OutgoingMessage(body="acknowledged")])
        monkeypatch.setattr(persist, "_write_atomically", full_disk)
        await store._compact()
        monkeypatch.setattr(persist, "_write_atomically", real)
        try:
            with anyio.fail_after(5):
                await store.durable()  # returns: the send would be answered 200 now
        except OSError:
            acknowledged = False  # answered InternalError: nothing promised
        else:
            acknowledged = True
        restarted = _after_sigkill(tmp_path, path)  # SIGKILL here
        tasks.cancel_scope.cancel()
    if acknowledged:
        assert restarted.counts("jobs").visible == 1, "the acknowledged send is lost"
