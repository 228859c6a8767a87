"""`return_large_blocks`: glibc's malloc set to give large blocks back to the system when freed.

glibc serves a block of 128 KiB or more with an mmap of its own and unmaps it when it is
freed, but it raises that threshold to the size of each such block freed (up to 32 MiB on
64-bit Linux): once the first 1 MiB body or receive answer is freed, the next ones come
from the heap, whose freed memory stays in the process (its RSS) until a later allocation
happens to fit in it. `max_bytes` then bounds what the runtime holds but not the process's
memory. Measured (bench/flow_bytes.py: 1 MiB JSON bodies, `max_bytes` 16 MiB): peak RSS
over idle 26-31 MiB with glibc's moving threshold, 17.3 MiB with it fixed at 128 KiB.

A fixed threshold makes each block of 128 KiB or more an mmap and a munmap, its pages
faulted in afresh: 0.33 ms a MiB allocated, written and freed where the heap took 0.04 ms;
in the run above, the worker's CPU for 100 messages of 1 MiB went from 0.45 s to 0.65-0.74 s
(about 3 ms a message, each made of a few such blocks: the answer, the body, the payload).
Smaller blocks (small messages) are served as before.

Process-wide, so the library never calls it by itself: `lease-worker run` does when some
queue counts `max_bytes`, and an embedding program may. It does nothing off glibc (musl,
macOS), nor where the environment tunes the threshold already (`MALLOC_MMAP_THRESHOLD_`,
or `GLIBC_TUNABLES` naming `glibc.malloc.mmap_threshold`): the operator's choice stands.
"""

from __future__ import annotations

import ctypes
import os

__all__ = ["DEFAULT_THRESHOLD", "return_large_blocks"]

#: glibc's own starting threshold, kept from then on.
DEFAULT_THRESHOLD = 128 * 1024
_M_TRIM_THRESHOLD = -1  # mallopt's parameters (malloc.h)
_M_MMAP_THRESHOLD = -3


def _glibc() -> bool:
    try:
        return bool(os.confstr("CS_GNU_LIBC_VERSION"))
    except (AttributeError, ValueError, OSError):  # no such name here: not glibc
        return False


def _tuned_by_environment() -> bool:
    return "MALLOC_MMAP_THRESHOLD_" in os.environ or "glibc.malloc.mmap_threshold" in (
        os.environ.get("GLIBC_TUNABLES", "")
    )


def return_large_blocks(threshold: int = DEFAULT_THRESHOLD) -> bool:
    """Fix glibc's mmap threshold at `threshold` bytes; True if it was set now."""
    if threshold < 1:
        raise ValueError(f"threshold={threshold!r}: must be >= 1")
    if not _glibc() or _tuned_by_environment():
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the process's own C library
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    # The trim threshold moved with the mmap threshold (twice it): back to its start too,
    # so that free memory at the top of the heap goes back as it did before.
    return bool(mallopt(_M_MMAP_THRESHOLD, threshold)) and bool(
        mallopt(_M_TRIM_THRESHOLD, threshold)
    )
