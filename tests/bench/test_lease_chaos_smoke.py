"""bench/lease_chaos.py at small sizes: each scenario on real processes (serve-sqs or
serve-smq, `lease-worker run` workers, the delaying HTTP proxy), its goals asserted.

Sizes: `pause` with 40 messages, 2-s leases and 2 pauses of 3 s (longer than a lease, so
each pause lapses what the stopped worker holds); `smq-late` with a 5-s lease whose first
extension answer is held 1 s (longer than the default renewal timeout, a third of the
margin: a renewal abandoned then would be retried with a retired handle); `sqs-late` with
4 messages, 6-s leases and every extension answer held 1.5 s; `sigterm-poll` as in full.
Short long polls (`wait_s`) where the poll is not the point, so that workers stop at once.

Two defects that these scenarios found are told apart from any other miss, and reported as
expected failures (`pytest.xfail`, with the counts) rather than failures, until the runtime
fixes them (then these tests pass as they are):
- `pause`: a receive answer that reached a worker's socket just before a SIGSTOP is read
  after the SIGCONT and given a deadline counted from then (`Receiver._handed_out` takes
  "now" as the answer's arrival), so its handler runs although the service had handed the
  message out again meanwhile: a stale run, concurrent with the new one, or a second commit.
  Only misses in which every concurrent pair and every unexplained duplicate involves such a
  stale run are taken for it.
- `sigterm-poll`: at a SIGTERM the worker cancels its long poll (supervisor.py before the
  fix), so the messages the held answer carried stay in flight for their visibility timeout.
  Taken for it only when the held answer was not delivered.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import lease_chaos
from bench.chaos_fleet import Pause, Report, Run
from bench.chaos_pause import PauseSettings, analyse, run_pause
from bench.http_delay import operation
from bench.lease_chaos import LateSettings, PollSettings

# -- the judging rules, on made-up runs ---------------------------------------------------


def test_a_run_frozen_by_a_pause_and_fenced_on_waking_overlaps_nothing_after_the_stop() -> None:
    frozen = Run(1, "m", 1, started=10.0, ended=19.2, aborted="CancelledError")
    again = Run(2, "m", 2, started=16.0, ended=18.0, committed=True)
    pause = Pause(1, stopped=11.0, continued=19.0)
    assert analyse([frozen, again], [pause], [], until=30.0).concurrent == []
    # Aborted long after the SIGCONT: it ran on after the pause, beside the other run.
    late = Run(1, "m", 1, started=10.0, ended=21.0, aborted="CancelledError")
    assert analyse([late, again], [pause], [], until=30.0).concurrent == [(late, again)]


def test_a_commit_after_the_pause_beside_another_run_is_concurrent_and_unexplained() -> None:
    first = Run(1, "m", 1, started=10.0, ended=19.5, committed=True)
    second = Run(2, "m", 2, started=16.0, ended=18.0, committed=True)
    analysis = analyse([first, second], [Pause(1, 11.0, 19.0)], [], until=30.0)
    assert analysis.concurrent == [(first, second)]
    # The first commit's worker was paused before the next run began: explained.
    assert analysis.duplicates == {"m": ["pause"]}


def test_a_run_started_after_a_later_delivery_began_is_stale() -> None:
    newer = Run(1, "m", 3, started=10.0, ended=11.0, committed=True)
    older = Run(2, "m", 2, started=10.5, ended=11.5, committed=True)
    analysis = analyse([newer, older], [], [], until=30.0)
    assert analysis.stale == [older]
    assert analysis.unexplained == {"m": ["unexplained"]}


def test_the_proxy_names_sqs_and_smq_calls() -> None:
    json_headers = {"x-amz-target": "AmazonSQS.ChangeMessageVisibilityBatch"}
    assert operation("POST", "/", json_headers, b"{}") == "ChangeMessageVisibilityBatch"
    form = {"content-type": "application/x-www-form-urlencoded; charset=utf-8"}
    assert operation("POST", "/", form, b"Action=ReceiveMessage&Version=1") == "ReceiveMessage"
    change = "/queues/q/messages?ReceiptHandle=h&VisibilityTimeout=10"
    assert operation("PUT", change, {}, b"") == "ChangeMessageVisibility"
    assert operation("GET", "/queues/q/messages?waitseconds=30", {}, b"") == "ReceiveMessage"
    assert operation("GET", "/queues/q/messages?peekonly=true", {}, b"") == "PeekMessage"


def test_the_command_line_names_every_scenario(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        lease_chaos.main(["--help"])
    assert exit_.value.code == 0
    shown = capsys.readouterr().out
    assert all(name in shown for name in ("pause", "smq-late", "sqs-late", "sigterm-poll"))


# -- the scenarios, on real processes ------------------------------------------------------


def _judge(report: Report, known: str | None) -> None:
    print(report.show())
    if not report.ok and known is not None:
        pytest.xfail(f"{known}: {report.counts}")
    missed = [goal for goal, met in report.goals.items() if not met]
    assert not missed, report.show()


@pytest.mark.process
@pytest.mark.timeout(90)
def test_pause(tmp_path: Path) -> None:
    settings = PauseSettings(
        messages=40,
        pauses=2,
        pause_s=3.0,
        visibility_s=2,
        min_work_s=0.5,
        max_work_s=1.5,
        max_in_flight=5,
        wait_s=1,
        timeout_s=60.0,
    )
    report = run_pause(settings, tmp_path)
    counts = report.counts
    missed = {goal for goal, met in report.goals.items() if not met}
    stale_only = (
        counts["stale runs"] > 0
        and missed <= {"no concurrent runs", "every duplicate explained"}
        and counts["concurrent runs"] == counts["concurrent runs with a stale run"]
        and counts["unexplained duplicates"] == counts["unexplained duplicates with a stale run"]
    )
    known = "a receive answer read after a stall starts a stale run" if stale_only else None
    _judge(report, known)


@pytest.mark.process
@pytest.mark.timeout(60)
def test_smq_late(tmp_path: Path) -> None:
    settings = LateSettings(1, 5, None, 5.0, 5.0, 1.0, 1, wait_s=1, timeout_s=40.0)
    _judge(lease_chaos.run_smq_late(settings, tmp_path), None)


@pytest.mark.process
@pytest.mark.timeout(60)
def test_sqs_late(tmp_path: Path) -> None:
    settings = LateSettings(4, 6, 2.0, 6.0, 7.0, 1.5, None, wait_s=1, timeout_s=40.0)
    _judge(lease_chaos.run_sqs_late(settings, tmp_path), None)


@pytest.mark.process
@pytest.mark.timeout(60)
def test_sigterm_poll(tmp_path: Path) -> None:
    report = lease_chaos.run_sigterm_poll(PollSettings(timeout_s=40.0), tmp_path)
    missed = {goal for goal, met in report.goals.items() if not met}
    cancelled = report.counts.get("held answer delivered") == 0
    in_flight = missed == {"nothing in flight within 2.0 s of the exit"}
    known = "the long poll is cancelled at SIGTERM" if cancelled and in_flight else None
    _judge(report, known)
