"""The report's ratios, scale-out rows, goals and profile layers, on made-up figures."""

from __future__ import annotations

import cProfile
import json
import pstats
import sysconfig
from pathlib import Path

import pytest

from bench import _profile_layers, engine_throughput, goals, lease_scale, scale_out, side_by_side
from bench._common import Timing
from bench.side_by_side import Row
from tests.bench.made_up import named, row


def _rows() -> list[Row]:
    return [
        row(named("lease-worker"), 4_000, 0.200),
        row(named("lease-worker, lean path, uvloop"), 6_000, 0.100),
        row(named("lease-worker, 2 processes"), 7_000, 0.210),
        row(named("lease-worker, lean path, uvloop, 2 processes"), 10_000, 0.110),
        row(named("aws-sqs-consumer"), 5_000, 0.180),
        row(named("dramatiq-sqs"), 0, 0, failure="pip install failed"),
        row(named("floor: raw aiobotocore loop"), 4_500, 0.170),
    ]


def test_ratios_are_against_the_fastest_measured_peer_and_the_floor() -> None:
    rows = _rows()
    refs = side_by_side.references(rows)
    assert [r.contender.name for r in refs] == ["aws-sqs-consumer", "floor: raw aiobotocore loop"]
    lines = side_by_side.ratios(rows)
    lean = next(line for line in lines if line.startswith("| lease-worker, lean path, uvloop |"))
    # 6,000 / 5,000 msgs/s; 0.180 / 0.100 ms; 6,000 / 4,500; 0.170 / 0.100.
    assert lean == "| lease-worker, lean path, uvloop | **1.20** | **1.80** | **1.33** | **1.70** |"


def test_scale_out_keeps_configurations_measured_at_several_process_counts() -> None:
    got = scale_out.series(_rows())
    assert {config: [r.contender.processes for r in rows] for config, rows in got.items()} == {
        "lease-worker": [1, 2],
        "lease-worker, lean path, uvloop": [1, 2],
    }
    table = scale_out.table(_rows())
    assert "| lease-worker | 2 | 7,000 | **3,500** | 0.210 | 4,762 | 0.050 |" in table


def test_scale_out_says_so_when_nothing_ran_twice(tmp_path: Path) -> None:
    rows = _rows()[:1]
    assert scale_out.table(rows)[0].startswith("(not measured")
    assert scale_out.chart(rows, tmp_path / "scale_out.png") is False


def test_goals_show_each_figure_against_its_target() -> None:
    timing = Timing(wall_s=1.0, cpu_s=0.5)
    engine = [engine_throughput.Result("asyncio", 40_000, Timing(1.0, 0.9), timing)]
    scale = lease_scale.Result(
        100_000,
        3,
        [10_000] * 3,
        10_000,
        0,
        1.2,
        5_000.0,
        100_000,
        traced_bytes_per_message=3000,
        cli_cpu_s_per_round=0.3,
    )
    table = goals.goals_table(engine, scale, _rows())
    assert "| Engine: runtime ÷ bare tasks, on asyncio | 1.000 | ≥ 0.33 | yes |" in table
    assert any("(tracemalloc) | 2.93 KiB | ≤ 3 KiB | yes |" in line for line in table)
    assert any("CPython's collector | 1.200 s | < 1 s | **no** |" in line for line in table)
    assert any("`lease-worker run`'s collector | 0.300 s | < 1 s | yes |" in line for line in table)
    # The goal is judged on the fastest one-process configuration; the default is shown.
    lean = "| lease-worker, lean path, uvloop: "
    assert {
        "| lease-worker: msgs/s ÷ aws-sqs-consumer | 0.80 | (the default, for reference) | — |",
        f"{lean}msgs/s ÷ aws-sqs-consumer | 1.20 | ≥ 1.5 | **no** |",
        f"{lean}aws-sqs-consumer's CPU/msg ÷ ours | 1.80 | ≥ 1.5 | yes |",
    } <= set(table)


def test_layers_come_from_files_and_c_functions_go_to_their_callers() -> None:
    stdlib = sysconfig.get_paths()["stdlib"]
    runtime = (f"{_profile_layers.ROOT}/worker/runtime/settler.py", 1, "apply")
    botocore = ("/x/site-packages/botocore/parsers.py", 1, "parse")
    length = ("~", 0, "<built-in method builtins.len>")
    email = (f"{stdlib}/email/parser.py", 1, "parsestr")
    table = {
        runtime: (1, 1, 1.0, 4.0, {}),
        botocore: (1, 1, 1.0, 6.0, {}),
        # len: 1.5 s of it called from the runtime, 0.5 s from botocore.
        length: (2, 2, 2.0, 2.0, {runtime: (1, 1, 1.5, 1.5), botocore: (1, 1, 0.5, 0.5)}),
        # email, a stdlib module of no layer, called only by botocore.
        email: (1, 1, 4.0, 4.0, {botocore: (1, 1, 4.0, 4.0)}),
    }
    profile = _profile_layers.Profile(table)
    assert profile.layer(length) == "runtime"
    assert profile.layer(email) == "botocore"
    assert _profile_layers.layer_shares(profile) == {
        "runtime": pytest.approx(2.5),
        "botocore": pytest.approx(5.5),
    }
    assert _profile_layers.layer_of(f"{stdlib}/asyncio/base_events.py") == "asyncio"


def test_a_real_profile_adds_up() -> None:
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(2000):
        json.dumps({"a": [1, 2, 3]})
    profiler.disable()
    profile = _profile_layers.Profile.of(pstats.Stats(profiler))
    shares = _profile_layers.layer_shares(profile)
    assert sum(shares.values()) == pytest.approx(profile.total_s)
    # Called from this test file (no layer), json and its C encoder stay "other".
    assert set(shares) == {"other"}
