"""`backends.serve.sqs.persist.Persistence` in process: what a failed write leaves on disk,
a fold that lets journal appends go on, the files a crash at any moment leaves."""

from __future__ import annotations

import errno
import json
import shutil
import threading
from collections.abc import Iterable
from pathlib import Path

import anyio
import pytest

import backends.serve.sqs.persist as persist
from backends.memory import MemoryEngine
from backends.memory.changes import Changes
from backends.memory.snapshot import dump
from backends.serve.sqs.persist import InUse, Persistence
from worker.clock import ManualClock
from worker.types import OutgoingMessage, QueueSpec

pytestmark = pytest.mark.anyio
WAIT_S = 10.0


def _engine() -> MemoryEngine:
    return MemoryEngine(ManualClock(), changes=Changes())


def _bodies(engine: MemoryEngine) -> list[str]:
    return sorted(m.body for m in engine.receive("jobs", 10))


def _after_sigkill(tmp: Path, path: Path) -> MemoryEngine:
    """What a restart would see: the files as they are now, copied aside."""
    crash = tmp / "crash"
    crash.mkdir(parents=True)
    for found in path.parent.glob(path.name + "*"):
        if found.name != path.name + ".lock":
            shutil.copy(found, crash / found.name)
    engine = _engine()
    store = Persistence(engine, crash / path.name, interval_s=3600)
    store.open()
    store.close()
    return engine


def _with_jobs(path: Path) -> tuple[MemoryEngine, Persistence]:
    """An engine persisted at `path` (folded by hand only), with a queue `jobs` on disk."""
    engine = _engine()
    store = Persistence(engine, path, interval_s=3600)
    store.open()
    engine.create_queue(QueueSpec("jobs"))
    store.compact_now()
    return engine, store


async def test_a_failed_fold_loses_no_acknowledged_send(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "state.json"
    engine, store = _with_jobs(path)
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


async def test_journal_appends_go_on_while_a_fold_writes_and_a_crash_then_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The fold held the journal's lock while it wrote the whole state: every answer waited
    # for it (1.8 s for a send at 100 MB of state).
    path = tmp_path / "state.json"
    engine, store = _with_jobs(path)
    entered, release = threading.Event(), threading.Event()
    real = persist._write_atomically

    def held(target: Path, pieces: Iterable[bytes]) -> None:
        if target == path:  # not the restarts' below
            entered.set()
            release.wait(WAIT_S)
        real(target, pieces)

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(store.run)
        engine.send("jobs", [OutgoingMessage(body="before")])
        await store.durable()
        monkeypatch.setattr(persist, "_write_atomically", held)
        folded = anyio.Event()

        async def fold() -> None:
            await store._compact()
            folded.set()

        tasks.start_soon(fold)
        assert await anyio.to_thread.run_sync(entered.wait, WAIT_S)
        engine.send("jobs", [OutgoingMessage(body="during")])
        with anyio.fail_after(WAIT_S / 2):
            await store.durable()  # answered while the snapshot is being written
        assert _bodies(_after_sigkill(tmp_path / "mid", path)) == ["before", "during"]
        release.set()
        with anyio.fail_after(WAIT_S):
            await folded.wait()
        assert not (path.parent / "state.json.journal.1").exists()  # the fold's segment went
        assert _bodies(_after_sigkill(tmp_path / "after", path)) == ["before", "during"]
        tasks.cancel_scope.cancel()


async def test_a_failed_journal_write_fails_answers_until_a_fold_holds_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "state.json"
    engine, store = _with_jobs(path)

    def full_disk(self: Persistence, sequence: int, delta: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(store.run)
        with monkeypatch.context() as patched:
            patched.setattr(Persistence, "_append", full_disk)
            engine.send("jobs", [OutgoingMessage(body="refused")])
            with pytest.raises(OSError, match="No space left"):
                await store.durable()
            engine.send("jobs", [OutgoingMessage(body="refused too")])
            with pytest.raises(OSError, match="No space left"):
                await store.durable()
        await store._compact()  # the disk has room again
        engine.send("jobs", [OutgoingMessage(body="kept")])
        with anyio.fail_after(WAIT_S):
            await store.durable()
        restarted = _after_sigkill(tmp_path, path)
        tasks.cancel_scope.cancel()
    # The refused ones were in the engine when the fold ran: on disk too (never promised).
    assert _bodies(restarted) == ["kept", "refused", "refused too"]


def test_a_second_store_on_the_same_path_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    first = Persistence(_engine(), path, interval_s=3600)
    first.open()
    held = r"in use by another process \(pid \d+\) holding .*state\.json\.lock"
    with pytest.raises(InUse, match=held):
        Persistence(_engine(), path, interval_s=3600).open()
    first.close()
    again = Persistence(_engine(), path, interval_s=3600)
    again.open()
    again.close()


def test_a_snapshot_is_encoded_in_pieces_that_read_as_its_data() -> None:
    engine = MemoryEngine(ManualClock())
    engine.create_queue(QueueSpec("empty"))
    engine.create_queue(QueueSpec("jobs"))
    for i in range(600):
        engine.send("jobs", [OutgoingMessage(body=f"m{i}")])
    data = json.loads(json.dumps(dump(engine)))
    pieces = list(persist._encoded(data))
    assert len(pieces) > 4 and json.loads(b"".join(pieces)) == data
