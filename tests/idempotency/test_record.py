"""The pure rules of `worker.idempotency.record`: what a record found in the way means."""

from __future__ import annotations

import pytest

from worker.idempotency.record import Judgement, Record, RecordState, Verdict, body_hash, judge

NOW = 1_800_000_000.0


def claim(*, stale_at: float = NOW + 600, body: str | None = None) -> Record:
    return Record(
        key="q:k",
        token="t",
        state=RecordState.IN_PROGRESS,
        owner="w",
        stale_at=stale_at,
        expires_at=stale_at,
        body_hash=body,
    )


@pytest.mark.parametrize(
    ("beat_until", "stale_at", "skew_s", "expected"),
    [
        (NOW + 20, NOW + 600, 0.0, Judgement(Verdict.LIVE, NOW + 20)),
        (NOW + 20, NOW + 600, 1.0, Judgement(Verdict.LIVE, NOW + 21)),
        (NOW, NOW + 600, 0.0, Judgement(Verdict.STALE)),  # the heartbeat just ran out
        (NOW - 0.5, NOW + 600, 1.0, Judgement(Verdict.LIVE, NOW + 0.5)),  # within the skew
        (NOW - 1.0, NOW + 600, 1.0, Judgement(Verdict.STALE)),
        (None, NOW + 600, 1.0, Judgement(Verdict.STALE)),  # no heartbeat at all
        (NOW + 20, NOW + 5, 0.0, Judgement(Verdict.LIVE, NOW + 5)),  # the cap comes first
        (NOW + 20, NOW - 3, 1.0, Judgement(Verdict.STALE)),  # let go, or capped
    ],
)
def test_an_in_progress_claim_lives_with_its_owners_heartbeat_and_its_cap(
    beat_until: float | None, stale_at: float, skew_s: float, expected: Judgement
) -> None:
    record = claim(stale_at=stale_at)
    assert judge(record, now=NOW, beat_until=beat_until, body=None, skew_s=skew_s) == expected


def test_a_completion_holds_until_its_ttl() -> None:
    done = claim().completed(at=NOW, ttl_s=60, result=None)
    assert judge(done, now=NOW + 59.9, beat_until=None, body=None).verdict is Verdict.COMPLETED
    assert judge(done, now=NOW + 60, beat_until=None, body=None).verdict is Verdict.STALE


def test_another_body_is_a_mismatch_before_anything_else() -> None:
    mine, other = body_hash('{"amount": 10}'), body_hash('{"amount": 99}')
    done = claim(body=mine).completed(at=NOW, ttl_s=60, result=None)
    assert judge(done, now=NOW, beat_until=None, body=other).verdict is Verdict.MISMATCH
    assert judge(done, now=NOW, beat_until=None, body=mine).verdict is Verdict.COMPLETED
    live = claim(body=mine)
    assert judge(live, now=NOW, beat_until=NOW + 9, body=other).verdict is Verdict.MISMATCH
    # Unvalidated on either side: no opinion on the body.
    assert judge(done, now=NOW, beat_until=None, body=None).verdict is Verdict.COMPLETED
    assert judge(claim(), now=NOW, beat_until=NOW + 9, body=other).verdict is Verdict.LIVE


def test_a_record_survives_its_json() -> None:
    record = claim(body="abc").completed(at=NOW + 0.125, ttl_s=86_400, result='{"r": [1, 2]}')
    assert Record.from_json(record.to_json()) == record
    let_go = claim().let_go(at=NOW)
    assert let_go.stale_at == NOW and claim().let_go(at=NOW + 10_000).stale_at == NOW + 600
