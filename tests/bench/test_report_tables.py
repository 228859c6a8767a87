"""The report's ratios, scale-out rows, goals and profile layers, on made-up figures."""

from __future__ import annotations

import base64
import cProfile
import json
import pstats
import sysconfig
from dataclasses import replace
from pathlib import Path

import pytest

from bench import (
    _harness,
    _profile_layers,
    engine_throughput,
    goals,
    lease_scale,
    long_handlers,
    scale_out,
    side_by_side,
)
from bench._common import Timing
from bench.peers import contenders as peers
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
        row(named("bare aiobotocore loop"), 4_500, 0.170),
    ]


def test_ratios_are_against_the_fastest_measured_peer_and_the_floor() -> None:
    rows = _with_floor()
    refs = side_by_side.references(rows)
    # The bare aiobotocore loop is a peer (slower here); the floor is the raw HTTP drain.
    assert [r.contender.name for r in refs] == ["aws-sqs-consumer", peers.FLOOR]
    lines = side_by_side.ratios(rows)
    lean = next(line for line in lines if line.startswith("| lease-worker, lean path, uvloop |"))
    # 6,000 / 5,000 msgs/s; 0.180 / 0.100 ms; 6,000 / 9,000; 0.040 / 0.100.
    assert lean == "| lease-worker, lean path, uvloop | **1.20** | **1.80** | **0.67** | **0.40** |"


def test_a_cpu_time_under_procs_clock_tick_is_nan_not_a_crash() -> None:
    """At smoke size a drain can take less CPU than /proc's 10 ms tick: read as 0, its ratio
    is nan (the report once failed there with a ZeroDivisionError)."""
    rows = [*_with_floor(), row(named("lease-worker, botocore client"), 6_000, 0.0)]
    lines = side_by_side.ratios(rows)
    ticked = next(line for line in lines if line.startswith("| lease-worker, botocore client |"))
    assert ticked == "| lease-worker, botocore client | **1.20** | **nan** | **0.67** | **nan** |"


def test_scale_out_keeps_configurations_measured_at_several_process_counts() -> None:
    got = scale_out.series(_rows())
    assert {config: [r.contender.processes for r in rows] for config, rows in got.items()} == {
        "lease-worker": [1, 2],
        "lease-worker, lean path, uvloop": [1, 2],
    }
    table = scale_out.table(_rows())
    assert "| lease-worker | 2 | 7,000 | **3,500** | 0.210 | 4,762 | 0.050 |" in table


def test_scale_out_reads_a_cpu_time_under_procs_clock_tick_as_nan() -> None:
    """A scale-out row whose worker CPU read 0 (under /proc's 10 ms tick, at smoke size)
    shows nan messages per CPU-second (the report once failed there, dividing by zero)."""
    rows = [
        row(named("lease-worker"), 4_000, 0.0),
        row(named("lease-worker, 2 processes"), 7_000, 0.0),
    ]
    table = scale_out.table(rows)
    assert "| lease-worker | 1 | 4,000 | **4,000** | 0.000 | nan | 0.050 |" in table


def test_scale_out_says_so_when_nothing_ran_twice(tmp_path: Path) -> None:
    rows = _rows()[:1]
    assert scale_out.table(rows)[0].startswith("(not measured")
    assert scale_out.chart(rows, tmp_path / "scale_out.png") is False


def _scale() -> lease_scale.Result:
    return lease_scale.Result(
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


def _with_floor() -> list[Row]:
    return [*_rows(), row(named(peers.FLOOR), 9_000, 0.040)]


def test_goals_judge_the_default_against_the_fastest_peer_and_the_floor() -> None:
    engine = [
        engine_throughput.Result(
            "asyncio",
            40_000,
            Timing(1.0, 0.9),
            Timing(0.25, 0.2),
            ((40_000, 160_000, 100_000), (30_000, 150_000, 90_000)),
            Timing(0.4, 0.3),
        )
    ]
    long_rows = [long_handlers.Row(60, 1.3, 1.2, 7.0, 0.1, 0.1, 6.0)]
    spark = goals.Spark(6_000, "max_batch 5000, trigger 0 s")
    table = goals.goals_table(engine, _scale(), _with_floor(), long_rows, spark)
    said = peers.defaults().says()
    # The default (lease-worker, no flags): 4,000 msgs/s at 0.200 ms against
    # aws-sqs-consumer's 5,000 at 0.180, and the floor's 0.040 ms.
    assert {
        f"| The default ({said}): msgs/s ÷ the fastest peer's (aws-sqs-consumer) | 0.80 (0.80) "
        "| ≥ 1.5 | **no** |",
        "| The default: aws-sqs-consumer's CPU per message ÷ the default's | 0.90 (0.90) | ≥ 2.0 "
        "| **no** |",
        f"| The default's client CPU per message ÷ the floor's ({peers.FLOOR}: 0.040 ms) "
        "| 5.00 (5.00) | ≤ 2.0 | **no** |",
    } <= set(table)
    # Against the steady ceiling (1/0.25 s), the median of the rounds' own ratios beside it.
    engine_line = next(line for line in table if line.startswith("| Engine:"))
    assert engine_line.endswith("| 0.250 (0.225) | ≥ 0.2 | yes |")
    assert "burst ceiling, a note: 0.400" in engine_line
    assert any("6,000 msgs/s | ≥ 5,000 msgs/s | yes |" in line for line in table)
    assert any("(tracemalloc) | 2.93 KiB | ≤ 3 KiB | yes |" in line for line in table)
    assert any(
        "calls (floor ceil(N/10)) | 10,000 (10,000) | = the floor | yes |" in line for line in table
    )
    assert any("CPython's collector | 1.200 s | < 1 s | **no** |" in line for line in table)
    assert any(
        "at 60 min (fixed lease ÷ per-message heartbeat) | 1.30 ÷ 7.00 | < 1 | yes |" in line
        for line in table
    )


def test_goals_say_what_was_not_measured(tmp_path: Path) -> None:
    engine: list[engine_throughput.Result] = []
    table = goals.goals_table(
        engine, _scale(), _rows()[1:], [], goals.read_spark(tmp_path / "x.json")
    )
    assert any("over SQS | not measured |" in line for line in table)
    assert any(line.startswith("| Spark:") and "| not measured |" in line for line in table)


def test_the_spark_figure_is_read_from_its_file(tmp_path: Path) -> None:
    path = tmp_path / "spark_source.json"
    path.write_text(json.dumps({"rate": 5123.4, "setting": "max_batch 5000"}))
    assert goals.read_spark(path) == goals.Spark(5123.4, "max_batch 5000")
    path.write_text("not json")
    assert goals.read_spark(path) is None


def test_medians_sit_beside_the_fastest_round() -> None:
    got = replace(
        row(named("lease-worker"), 4_000, 0.200),
        rates=(3_000, 4_000, 3_500),
        cpus=(3e-4, 2e-4, 2.5e-4),
    )
    assert got.median_rate == 3_500 and got.median_cpu_per_message == 2.5e-4
    line = side_by_side.table([got])[-1]
    assert "| **4,000** (3,500; 3,000 / 4,000 / 3,500) | 0.200 (0.250) |" in line


def test_the_default_row_follows_the_code(monkeypatch: pytest.MonkeyPatch) -> None:
    import backends.factory

    monkeypatch.setattr(backends.factory, "DEFAULT_SQS_CLIENT", "botocore")
    assert peers.defaults().client == "botocore"
    workers = {c.name: c for c in peers.lease_workers()}
    default = workers["lease-worker"]
    assert "--sqs-client" not in default.command and "--loop" not in default.command
    assert "botocore client" in default.settings
    assert workers["lease-worker, botocore client"].same_as_default
    assert not workers["lease-worker, lean path"].same_as_default
    monkeypatch.setattr(backends.factory, "DEFAULT_SQS_CLIENT", "lean")
    workers = {c.name: c for c in peers.lease_workers()}
    assert workers["lease-worker, lean path"].same_as_default
    assert not workers["lease-worker, botocore client"].same_as_default


def test_celery_bodies_are_kombu_task_messages_with_their_own_ids() -> None:
    first, second = (json.loads(base64.b64decode(side_by_side._celery_body(i))) for i in (1, 2))
    assert first["headers"]["task"] == "noop"
    assert first["headers"]["id"] != second["headers"]["id"]
    assert first["properties"]["delivery_info"]["routing_key"] == _harness.QUEUE
    assert json.loads(base64.b64decode(first["body"]))[0] == []


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


def test_a_floor_whose_cpu_reads_zero_is_a_nan_row_not_a_crash() -> None:
    """At smoke size the floor's CPU per message can read 0: the report failed with
    ZeroDivisionError (seen in tests/bench/test_bench_smoke.py)."""
    rows = [*_rows(), row(named(peers.FLOOR), 9_000, 0.0)]
    table = goals.goals_table([], _scale(), rows, [], None)
    floor_line = next(line for line in table if "÷ the floor's" in line)
    assert "| nan (nan) | ≤ 2.0 | **no** |" in floor_line
