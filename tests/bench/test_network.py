"""bench/network.py: its tables on made-up figures, and one tiny drain through the proxy.

The whole section, peers included, runs in tests/bench/test_bench_smoke.py
(`bench.report --smoke`, at one delay); here the machinery: a contender reaches the endpoint
only through the proxy, on persistent connections, and the proxy's CPU is read apart.
"""

from __future__ import annotations

import pytest

from bench import network, side_by_side
from bench.network import Run
from tests.bench.made_up import named, row


def _run(delay_ms: float, name: str, rate: float, cpu_ms: float, failure: str | None = None) -> Run:
    drained = row(named(name), rate, cpu_ms, failure, hop_cpu_s=0.02)
    return Run(delay_ms, drained, connections=0 if failure else 1)


def _runs() -> list[Run]:
    return [
        _run(0, "lease-worker, lean path, uvloop", 6_000, 0.100),
        _run(0, "aws-sqs-consumer", 5_000, 0.180),
        _run(0, "bare aiobotocore loop", 4_500, 0.170),
        _run(5, "lease-worker", 450, 0.250),
        _run(5, "lease-worker, lean path, uvloop", 480, 0.120),
        _run(5, "aws-sqs-consumer", 400, 0.200),
        _run(5, "bare aiobotocore loop", 0, 0, failure="exited with status 1"),
        _run(1, "lease-worker", 1_500, 0.200),
        _run(1, "aws-sqs-consumer", 1_200, 0.320),
        _run(1, "bare aiobotocore loop", 1_250, 0.150),
    ]


def test_the_latency_bound_is_ten_messages_per_two_round_trips() -> None:
    assert network.bound(0) is None
    assert network.bound(1) == pytest.approx(2_500)
    assert network.bound(5) == pytest.approx(500)


def test_ratios_pair_each_of_ours_with_the_peer_and_floor_at_the_same_delay() -> None:
    lines = network.ratios(_runs())
    # At 5 ms the floor failed: no ratios there; at 0 and 1 ms one row of ours each.
    assert lines[2:] == [
        # 0.180 / 0.100, 6,000 / 5,000, 0.170 / 0.100, 6,000 / 4,500.
        "| 0 ms | lease-worker, lean path, uvloop | **1.80** | 1.20 | **1.70** | 1.33 |",
        # 0.320 / 0.200, 1,500 / 1,200, 0.150 / 0.200, 1,500 / 1,250.
        "| 2 ms | lease-worker | **1.60** | 1.25 | **0.75** | 1.20 |",
    ]


def test_the_table_shows_the_bound_the_proxy_and_why_a_row_is_missing() -> None:
    lines = network.table(_runs())
    assert len(lines) == 2 + 10
    assert "| 10 ms | lease-worker | 450 (500) | 0.250 | 0.020 | 0.050 | 0.201 | 1 |" in lines
    assert "| 0 ms | aws-sqs-consumer | 5,000 | 0.180 | 0.020 | 0.050 | 0.201 | 1 |" in lines
    assert any("**not measured**: exited with status 1" in line for line in lines)


def test_the_goals_rows_are_at_the_longest_delay_with_all_three_measured() -> None:
    assert network.goals(_runs()) == [
        "| lease-worker, RTT 2 ms through a proxy: aws-sqs-consumer's CPU/msg ÷ ours | 1.60 | "
        "(for reference) | — |",
        "| lease-worker, RTT 2 ms through a proxy: bare aiobotocore loop's CPU/msg ÷ ours "
        "| 0.75 | ≥ 1.0 | **no** |",
    ]
    assert "not measured" in network.goals(_runs()[:2])[0]
    assert "no ratios" in network.ratios([])[0]


def test_as_many_messages_at_every_delay_and_at_least_fifty() -> None:
    assert [network.messages_at(d, 6_000) for d in network.DELAYS_MS] == [6_000] * 3
    assert network.messages_at(5, 20) == 50


@pytest.mark.process
def test_the_floor_drains_through_the_proxy_on_one_connection() -> None:
    floor = named(network.FLOOR)
    proxy = network.Proxy(delay_ms=5)
    row = side_by_side.measure(floor, 30, via=proxy)
    assert row.failure is None
    assert (row.requests["ReceiveMessage"], row.requests["DeleteMessageBatch"]) == (3, 3)
    # One keep-alive connection for all six calls.
    assert proxy.connections == [1]
    # From the first receive at the server to the last delete there: the first answer and
    # delete (10 ms), then two more batches of two round trips each (2 x 20 ms).
    assert row.wall_s >= 0.050
    assert row.hop_cpu_s >= 0.0


def test_a_cpu_time_under_one_clock_tick_gives_no_ratio_instead_of_a_crash() -> None:
    # At smoke size a contender's CPU can read 0 (/proc counts in 10 ms ticks).
    runs = [
        _run(5, "lease-worker", 480, 0.0),
        _run(5, "aws-sqs-consumer", 490, 0.200),
        _run(5, "bare aiobotocore loop", 495, 0.200),
    ]
    assert network.ratios(runs)[2] == "| 10 ms | lease-worker | n/a | 0.98 | n/a | 0.97 |"
    assert [line.split(" | ")[1:] for line in network.goals(runs)] == [
        ["n/a", "(for reference)", "— |"],
        ["n/a", "≥ 1.0", "n/a |"],
    ]


def test_the_saving_over_a_network_is_set_beside_the_saving_with_no_delay() -> None:
    runs = [
        _run(0, "lease-worker", 6_000, 0.060),
        _run(0, "aws-sqs-consumer", 5_000, 0.120),
        _run(0, "bare aiobotocore loop", 5_500, 0.110),
        _run(5, "lease-worker", 400, 0.210),
        _run(5, "aws-sqs-consumer", 390, 0.290),
        _run(5, "bare aiobotocore loop", 395, 0.280),
    ]
    saving, peer, floor = network.goals(runs)
    # 0.290 - 0.210 = 0.080 ms saved at 10 ms, against 0.120 - 0.060 = 0.060 ms with none;
    # the ratio falls (1.38 against 2.00) as every client pays the same wake-ups.
    assert saving == (
        "| lease-worker: client CPU saved per message against aws-sqs-consumer, RTT 10 ms "
        "through a proxy (with no delay) | 0.080 ms (0.060 ms) | holds (≥ with no delay) | yes |"
    )
    assert peer.split(" | ")[1:] == ["1.38", "(for reference)", "— |"]
    assert floor.split(" | ")[1:] == ["1.33", "≥ 1.0", "yes |"]
    runs[3] = _run(5, "lease-worker", 400, 0.250)  # 0.040 ms saved: less than with none
    assert network.goals(runs)[0].endswith("| holds (≥ with no delay) | **no** |")


def test_each_contender_keeps_its_median_cpu_round_or_its_failure() -> None:
    rounds = [
        _run(5, "lease-worker", 450, 0.300),
        _run(5, "lease-worker", 440, 0.150),
        _run(5, "lease-worker", 445, 0.250),
    ]
    kept = network.keep(rounds)
    assert kept.cpu_ms == pytest.approx(0.250)
    assert kept.rounds_cpu_ms == pytest.approx((0.300, 0.150, 0.250))
    assert "| **0.250** (0.300 / 0.150 / 0.250) |" in network.table([kept])[2]
    assert network.keep(rounds[:2]).cpu_ms == pytest.approx(0.300)  # the higher middle one
    failed = _run(5, "lease-worker", 0, 0, failure="did not drain in 30 s")
    assert network.keep([rounds[0], failed]) is failed


def test_only_the_fastest_configuration_is_judged_the_default_is_for_reference() -> None:
    runs = [
        _run(5, "lease-worker", 400, 0.300),
        _run(5, "lease-worker, lean path, uvloop", 420, 0.150),
        _run(5, "aws-sqs-consumer", 390, 0.270),
        _run(5, "bare aiobotocore loop", 395, 0.240),
    ]
    lines = network.goals(runs)
    assert lines[:2] == [
        "| lease-worker, RTT 10 ms through a proxy: aws-sqs-consumer's CPU/msg ÷ ours | 0.90 | "
        "(the default, for reference) | — |",
        "| lease-worker, RTT 10 ms through a proxy: bare aiobotocore loop's CPU/msg ÷ ours "
        "| 0.80 | (the default, for reference) | — |",
    ]
    assert [line.split(" | ")[1:] for line in lines[2:]] == [
        ["1.80", "(for reference)", "— |"],
        ["1.60", "≥ 1.0", "yes |"],
    ]
