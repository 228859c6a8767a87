"""A module run under cProfile on a CPU clock, for bench/profile.py:

    python -m bench.apps.profiled OUT -m worker run APP ...

Like `python -m cProfile -o OUT -m ...`, but timed by `time.process_time`, so that the time
the worker spends waiting on its sockets (epoll) is not counted as a function's own time,
and profiling only from SIGUSR1 on (sent once the worker says "ready"), so that imports
and start-up are not counted either. The stats are written to OUT when the module exits
(after SIGTERM, once it has drained).
"""

from __future__ import annotations

import cProfile
import runpy
import signal
import sys
import time
from types import FrameType


def main() -> None:
    if len(sys.argv) < 4 or sys.argv[2] != "-m":
        raise SystemExit("usage: python -m bench.apps.profiled OUT -m MODULE [ARGS ...]")
    out, module = sys.argv[1], sys.argv[3]
    sys.argv = [module, *sys.argv[4:]]
    profiler = cProfile.Profile(time.process_time)

    def begin(signum: int, frame: FrameType | None) -> None:
        profiler.enable()

    signal.signal(signal.SIGUSR1, begin)
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit:
        pass
    finally:
        profiler.disable()
        profiler.dump_stats(out)


if __name__ == "__main__":
    main()
