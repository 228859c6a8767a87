"""`return_large_blocks`: glibc's mmap threshold fixed, so that freed large bodies leave the
process's memory; and `lease-worker run` asks for it only when some queue counts bytes.

The allocator is process-wide state: what it does is looked at in a child Python process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from worker import Message, Worker, WorkerConfig
from worker.cli.main import build_parser
from worker.cli.run import _configure, _counts_bytes
from worker.config import FlowControl
from worker.runtime.malloc import return_large_blocks

ROOT = Path(__file__).resolve().parents[2]

#: Frees a 4 MiB block (glibc then raises its threshold to 4 MiB), allocates 1 MiB, and
#: prints whether that 1 MiB got an mmap of its own (mallinfo2's hblks), before and after.
_PROBE = """
import ctypes, sys
from worker.runtime.malloc import return_large_blocks
if sys.argv[1] == "set":
    assert return_large_blocks()
class Info(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Info
def mapped():
    big = bytearray(4 << 20)
    del big
    before = libc.mallinfo2().hblks
    block = bytearray(1 << 20)
    return libc.mallinfo2().hblks - before
print(mapped(), mapped())
"""


def _glibc() -> bool:
    try:
        return bool(os.confstr("CS_GNU_LIBC_VERSION"))
    except (AttributeError, ValueError, OSError):
        return False


def _probe(mode: str) -> list[int]:
    environment = {
        k: v for k, v in os.environ.items() if k not in ("MALLOC_MMAP_THRESHOLD_", "GLIBC_TUNABLES")
    }
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, mode],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return [int(value) for value in done.stdout.split()]


@pytest.mark.skipif(not _glibc(), reason="glibc's malloc only")
def test_a_large_block_is_mapped_apart_after_a_larger_one_was_freed() -> None:
    # glibc's default: the freed 4 MiB raised the threshold; the 1 MiB comes from the heap,
    # where freed memory stays in the process.
    assert _probe("default") == [0, 0]
    assert _probe("set") == [1, 1]


def test_an_operators_own_setting_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "1048576")
    assert return_large_blocks() is False
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_")
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.mmap_threshold=65536")
    assert return_large_blocks() is False
    with pytest.raises(ValueError, match="must be >= 1"):
        return_large_blocks(0)


def test_run_fixes_the_threshold_only_when_some_queue_counts_bytes() -> None:
    plain = Worker()
    capped_worker = Worker(WorkerConfig(flow=FlowControl(max_bytes=2**20)))
    capped_handler = Worker()

    async def handle(message: Message) -> None:
        return None

    for app in (plain, capped_worker):
        app.handler("jobs")(handle)
    capped_handler.handler("jobs", flow=FlowControl(max_bytes=2**20))(handle)
    assert not _counts_bytes(plain)
    assert _counts_bytes(capped_worker)
    assert _counts_bytes(capped_handler)
    args = build_parser().parse_args(["run", "app:app", "--max-bytes-in-flight", "1000"])
    plain.config = _configure(plain, args)
    assert _counts_bytes(plain)
