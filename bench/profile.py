"""Where the CPU goes: the engine benchmark and the side-by-side worker over SQS's protocol
under cProfile (a table of own time by function and by layer) and py-spy (flame graphs).

    python -m bench.profile [--messages N] [--sqs-messages N] [--out docs/profile.md]

Writes docs/profile.md and docs/bench/flame_*.svg; `python -m bench.report` runs it too.
cProfile slows pure-Python calls more than C ones, so its shares lean towards Python code;
py-spy samples the running process from outside (no slowdown to speak of) and its flame
graph is the check on them. When py-spy cannot attach (no ptrace permission), the page says
so and carries cProfile's tables alone.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from bench import engine_throughput, side_by_side
from bench._common import run_async
from bench._harness import Process
from bench._profile_layers import Profile, layer_shares, top_functions
from bench.peers import contenders as peers
from bench.peers.contenders import ROOT, Contender
from worker.cli.logging import configure_logging

FLAME_ENGINE = "flame_engine.svg"
FLAME_SQS = "flame_sqs.svg"


@dataclass(frozen=True, slots=True)
class Run:
    title: str
    #: What was run, for the page.
    command: str
    profile: Profile | None
    #: The flame graph's file name under docs/bench/, or why there is none.
    flame: str
    flame_drawn: bool


# -- the engine, in this process -----------------------------------------------------------


def profile_engine(messages: int) -> Profile:
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        run_async(engine_throughput.drain, messages)
    finally:
        profiler.disable()
    return Profile.of(pstats.Stats(profiler))


def _py_spy() -> str | None:
    return shutil.which("py-spy") or (
        str(Path(sys.executable).with_name("py-spy"))
        if Path(sys.executable).with_name("py-spy").exists()
        else None
    )


def flame_engine(messages: int, svg: Path) -> str | None:
    """py-spy over `bench.engine_throughput --worker-only`; None, or why it failed."""
    spy = _py_spy()
    if spy is None:
        return "py-spy is not installed"
    command = [
        *(spy, "record", "--format", "flamegraph", "-o", str(svg), "--"),
        *(sys.executable, "-m", "bench.engine_throughput", "--worker-only"),
        *("--loop", "asyncio", "--messages", str(messages)),
    ]
    try:
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        return "py-spy did not finish within 600 s"
    return _spy_result(done, svg)


def _spy_result(done: subprocess.CompletedProcess[str], svg: Path) -> str | None:
    if done.returncode == 0 and svg.exists():
        return None
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    return f"py-spy failed (status {done.returncode}): {' / '.join(lines[-2:])[:300]}"


# -- the worker over SQS, in its own process -----------------------------------------------


def _lease_worker(lean: bool) -> Contender:
    name = "lease-worker, lean path" if lean else "lease-worker"
    return next(c for c in peers.lease_workers() if c.name == name)


def profile_sqs(messages: int, contender: Contender, stats_file: Path) -> Profile | str:
    """cProfile over `lease-worker run` draining `messages` (its `-o` file is written when the
    worker exits after SIGTERM); the profile, or why there is none."""
    reason = peers.missing(contender)
    if reason is not None:
        return reason
    python, rest = contender.command[0], contender.command[1:]
    assert rest[:2] == ("-m", "worker"), rest
    wrapper = (python, "-m", "bench.apps.profiled", str(stats_file))
    # A stop waits for the long poll on the wire (up to 20 s when the queue is drained);
    # a 1 s grace cuts it short, so that the worker exits, writing its profile, well within
    # the harness's stop (SIGTERM, then SIGKILL 3 s later).
    profiled = replace(contender, command=(*wrapper, *rest, "--grace-s", "1"))

    def begin(process: Process) -> None:
        if process.ready.wait(60):
            os.kill(process.pid, signal.SIGUSR1)

    got = side_by_side.attempt(profiled, messages, on_start=begin)
    if isinstance(got, str):
        return got
    if not stats_file.exists():
        return "the worker exited without writing its profile"
    return Profile.of(pstats.Stats(str(stats_file)))


def flame_sqs(messages: int, contender: Contender, svg: Path) -> str | None:
    """py-spy attached (`--pid`) to a `lease-worker run` draining `messages`; it writes the
    flame graph when the worker exits. None, or why there is none."""
    spy = _py_spy()
    if spy is None:
        return "py-spy is not installed"
    spies: list[subprocess.Popen[str]] = []

    def attach(process: Process) -> None:
        if not process.ready.wait(60):
            return
        command = [spy, "record", "--pid", str(process.pid), "--format", "flamegraph"]
        spies.append(
            subprocess.Popen(
                [*command, "-o", str(svg)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
        )

    got = side_by_side.attempt(contender, messages, on_start=attach)
    if not spies:
        return got if isinstance(got, str) else "py-spy never started"
    try:
        _, stderr = spies[0].communicate(timeout=60)
    except subprocess.TimeoutExpired:
        spies[0].kill()
        spies[0].wait()
        return "py-spy did not finish within 60 s of the worker's exit"
    done = subprocess.CompletedProcess(spies[0].args, spies[0].returncode, "", stderr)
    return _spy_result(done, svg)


# -- the page ------------------------------------------------------------------------------

#: The layers in the order the page lists them.
ORDER = (
    *("runtime", "engine", "sqs backend", "botocore", "http", "prometheus", "asyncio"),
    "logging",
)


def shares_table(runs: list[Run]) -> list[str]:
    profiled = [run for run in runs if run.profile is not None]
    lines = [
        "| layer | " + " | ".join(run.title for run in profiled) + " |",
        "| --- |" + " ---: |" * len(profiled),
    ]
    shares = [layer_shares(run.profile) for run in profiled if run.profile is not None]
    totals = [sum(share.values()) or 1.0 for share in shares]
    for layer in (*ORDER, "other"):
        if not any(share[layer] for share in shares):
            continue
        cells = [
            f"{100 * share[layer] / total:.1f} %"
            for share, total in zip(shares, totals, strict=True)
        ]
        lines.append(f"| {layer} | " + " | ".join(cells) + " |")
    return lines


def top_table(run: Run, count: int) -> list[str]:
    assert run.profile is not None
    total = run.profile.total_s or 1.0
    lines = [
        "| function | layer | calls | own s | own % | cumulative s |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for f in top_functions(run.profile, count):
        name = f.name.replace("|", "/").replace("`", "'")
        lines.append(
            f"| `{name}` | {f.layer} | {f.calls:,} | {f.own_s:.3f} | "
            f"{100 * f.own_s / total:.1f} | {f.cumulative_s:.3f} |"
        )
    return lines


def page(runs: list[Run], command: str, images: str) -> str:
    lines = [
        "# Profile",
        "",
        "Produced by `python -m bench.profile` (and by `bench/run`, which regenerates "
        "docs/benchmarks.md as well); one run on one machine. " + _body(__doc__).replace("\n", " "),
        "",
        f"- command: `{command}`",
        *(f"- {run.title}: {run.command}" for run in runs),
        "",
        "## Share of own time by layer",
        "",
        "Own time (cProfile, CPU clock); C functions and standard-library modules of no layer "
        "(email, re, json) are counted in the layer that called them. "
        "runtime: worker/ (receiver, dispatcher, leases, settler, metrics); engine: "
        "backends/memory; sqs backend: backends/sqs (the lean path's own code included, its "
        "signer too); botocore: aiobotocore and botocore (serialising, signing, parsing, event "
        "hooks); http: the lean path's backends/sqs/lean_http.py, and aiohttp, yarl, multidict "
        "(botocore's transport, and the lean path's through a proxy); asyncio: asyncio, "
        "anyio, uvloop; logging: structlog and logging.",
        "",
        *shares_table(runs),
        "",
    ]
    for run in runs:
        lines += [f"## {run.title}", ""]
        if run.profile is None:
            lines += [f"Not profiled: {run.flame}", ""]
            continue
        lines += [f"Top functions by own time ({run.profile.total_s:.2f} s in all):", ""]
        lines += [*top_table(run, 20), ""]
        if run.flame_drawn:
            target = f"{images}/{run.flame}"
            lines += [
                f"Flame graph (py-spy; open [{run.flame}]({target}) on its own to zoom):",
                "",
                f"[![flame graph of {run.title}]({target})]({target})",
                "",
            ]
        else:
            lines += [f"No flame graph: {run.flame}; cProfile's table above only.", ""]
    return "\n".join(lines)


def summary(runs: list[Run], link: str) -> list[str]:
    """For docs/benchmarks.md: the layer shares and where the page is."""
    return [
        f"Where the CPU goes, by layer (cProfile's own time; the whole page: [{link}]({link}), "
        "with the top functions and py-spy flame graphs):",
        "",
        *shares_table(runs),
    ]


def _body(docstring: str | None) -> str:
    """The docstring's last paragraph (the first is its title, then its usage)."""
    return (docstring or "").strip().rpartition("\n\n")[2].strip()


# -- the whole -----------------------------------------------------------------------------


def _settings(contender: Contender) -> str:
    if contender.name == "lease-worker":
        return contender.settings.split(";")[0]
    return "the same " + contender.settings.removeprefix("the same ")


def run_all(messages: int, sqs_messages: int, images: Path, *, full: bool = True) -> list[Run]:
    """The engine, then the worker over SQS: plain, and with `--sqs-client lean`. Not `full`
    (smoke size): the plain worker only, and no flame graph of it."""
    images.mkdir(parents=True, exist_ok=True)
    engine_svg = images / FLAME_ENGINE
    engine_why = flame_engine(messages, engine_svg)
    runs = [
        Run(
            "engine (memory backend)",
            f"`bench.engine_throughput`'s drain of {messages:,} messages, no-op handler, "
            "asyncio loop, in-process",
            profile_engine(messages),
            engine_why or FLAME_ENGINE,
            engine_why is None,
        )
    ]
    variants = ((False, FLAME_SQS), (True, "flame_sqs_lean.svg"))
    for is_lean, svg_name in variants if full else variants[:1]:
        contender = _lease_worker(is_lean)
        with tempfile.TemporaryDirectory() as scratch:
            got = profile_sqs(sqs_messages, contender, Path(scratch) / "worker.prof")
        if isinstance(got, str):
            why: str | None = got
        elif full:
            why = flame_sqs(sqs_messages, contender, images / svg_name)
        else:
            why = "not drawn at smoke size"
        runs.append(
            Run(
                f"{contender.name} over SQS",
                f"{_settings(contender)}, draining {sqs_messages:,} messages from a "
                "`serve-sqs` process (start-up not counted: profiling starts once the worker "
                "is ready)",
                None if isinstance(got, str) else got,
                why or svg_name,
                why is None,
            )
        )
    return runs


def write(
    messages: int, sqs_messages: int, out: Path, command: str, *, full: bool = True
) -> list[Run]:
    images = out.parent / "bench"
    runs = run_all(messages, sqs_messages, images, full=full)
    out.write_text(page(runs, command, os.path.relpath(images, out.parent)))
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=100_000, help="engine drain")
    parser.add_argument("--sqs-messages", type=int, default=20_000, help="worker over SQS")
    parser.add_argument("--out", type=Path, default=Path("docs/profile.md"))
    args = parser.parse_args()
    configure_logging(level="warning")
    command = (
        f"python -m bench.profile --messages {args.messages} --sqs-messages {args.sqs_messages}"
    )
    write(args.messages, args.sqs_messages, args.out, command)
    print(f"written to {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
