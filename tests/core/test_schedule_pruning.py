"""The lease heap prunes what it no longer needs (issue 12, defect 15)."""

from __future__ import annotations

from worker.core.schedule import LeaseSchedule


def test_finished_leases_do_not_stay_in_the_heap_until_their_due_time() -> None:
    """Defect 15: every finished lease stayed in the heap until its due time; 100,000
    short handlers under hour-long visibility kept 100,000 entries."""
    schedule: LeaseSchedule[int] = LeaseSchedule()
    for key in range(100_000):
        schedule.set(key, "jobs", due_at=3_600.0 + key)
        schedule.discard(key)  # settled long before it was due
    assert len(schedule) == 0
    assert schedule.heap_entries <= 64 + 1


def test_rescheduling_keeps_the_heap_proportional_to_the_live_leases() -> None:
    schedule: LeaseSchedule[int] = LeaseSchedule()
    for key in range(1_000):
        schedule.set(key, "jobs", due_at=20.0)
    for round_ in range(50):  # every lease renewed 50 times
        for key in range(1_000):
            schedule.set(key, "jobs", due_at=40.0 + round_)
    assert len(schedule) == 1_000
    assert schedule.heap_entries <= 2 * 1_000 + 64
    # Pruning kept the order: all 1,000 are due together, at their latest time.
    assert schedule.next_due() == 89.0
    taken = schedule.pop_batch(89.0, window=0.0, limit=2_000)
    assert taken is not None and sorted(taken[1]) == list(range(1_000))
