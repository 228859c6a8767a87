"""bench/late_receives.py: its judging rules on made-up runs, then a receive answer held
longer than the visibility on real processes (serve-sqs, the proxy, two `lease-worker run`
workers), where no handler may run on a lease the service no longer holds.

The process test holds every receive answer 4 s on 3-s leases (the bench's scenario `a`,
shortened): whatever the machine's load, each answer reaches the held worker after its
lease's deadline (dated from the receive's send), so that worker runs nothing, and the
other consumer handles every message (or the DLQ takes it, if the held worker's receives
used up its receive count first). Nothing here depends on how fast the processes are.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import late_receives
from bench.http_delay import Exchange
from bench.late_ledger import Receive, Run, after_lapse, lost, overlaps
from bench.late_receives import Scenario, Setup

# -- the judging rules, on made-up runs ---------------------------------------------------


def _run(process: str, count: int, started: float, ended: float, held: bool = True) -> Run:
    return Run(process, 1, "m", count, started, ended, held, ended, "ok" if held else "Lost")


def test_runs_of_one_message_from_two_receives_at_once_overlap() -> None:
    first, second = _run("held", 1, 10.0, 12.0), _run("direct", 2, 11.0, 13.0)
    assert overlaps([first, second]) == [(first, second)]
    assert overlaps([first, _run("direct", 2, 12.5, 14.0)]) == []


def test_a_run_that_never_ended_overlaps_every_later_run() -> None:
    unfinished = Run("held", 1, "m", 1, 10.0)
    later = _run("direct", 2, 100.0, 101.0)
    assert overlaps([later, unfinished]) == [(unfinished, later)]


def test_a_side_effect_after_the_message_was_handed_out_again_is_after_a_lapse() -> None:
    effect = _run("held", 1, 8.0, 10.5)
    receives = [Receive("m", "held", 0.0), Receive("m", "direct", 6.0)]
    assert after_lapse([effect], receives) == [effect]
    # Before the second receive, or refused by `ensure_held()`: not counted.
    assert after_lapse([_run("held", 1, 3.0, 5.5)], receives) == []
    assert after_lapse([_run("held", 1, 8.0, 10.5, held=False)], receives) == []


def test_a_message_neither_handled_nor_left_in_a_queue_is_lost() -> None:
    runs = [_run("direct", 1, 0.0, 1.0), Run("held", 1, "n", 1, 0.0, 1.0, True, 1.0, "Lost")]
    assert lost(["m", "n", "o", "p"], runs, left=["o"]) == ["n", "p"]


def test_the_proxy_reads_the_message_ids_of_both_sqs_protocols() -> None:
    json_answer = b'{"Messages": [{"MessageId": "a", "Body": "x"}, {"MessageId" : "b"}]}'
    xml_answer = b"<Message><MessageId>c</MessageId><Body>y</Body></Message>"
    assert Exchange("ReceiveMessage", 0.0, answer=json_answer).carried() == ["a", "b"]
    assert Exchange("ReceiveMessage", 0.0, answer=xml_answer).carried() == ["c"]


# -- on real processes -------------------------------------------------------------------


@pytest.mark.process
@pytest.mark.timeout(90)
def test_a_receive_answer_held_past_the_visibility_runs_nothing_and_loses_nothing(
    tmp_path: Path,
) -> None:
    scenario = Scenario("a-short", hold_s=4.0, work_s=1.0, visibility_s=3, timeout_s=60.0)
    result = late_receives.run(scenario, Setup("this checkout"), tmp_path)
    shown = "\n".join([*late_receives.table([result]), *result.details])
    print(shown)
    assert result.failure is None, shown
    tally = result.tally
    assert tally is not None
    assert (tally.overlaps, tally.after_lapse, tally.lost) == (0, 0, 0), shown
    assert tally.runs.get("held", 0) == 0, shown
    assert tally.handled + tally.dead == scenario.messages, shown
    assert tally.effects == tally.handled, shown  # one side effect per message handled
