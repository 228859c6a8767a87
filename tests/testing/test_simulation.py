"""The deterministic simulation: its loop, its checks, its shrinker, and a budget of seeds.

The seeds run the real runtime of a fleet (2-3 workers) on one virtual clock against the
in-memory engine, every call given a drawn fate, with stalls, SIGTERMs and SIGKILLs; a seed
fails when the history breaks a rule (`worker.testing.simulation.history`). The budget here
is what CI runs on every change; `python -m bench.simulate --seeds N` runs more.
"""

from __future__ import annotations

import asyncio
import contextvars
import gc
import json
from pathlib import Path

import pytest

from backends.memory import MemoryEngine
from worker.clock import ManualClock
from worker.testing.simulation import Schedule, SimLoop, draw, shrink, simulate
from worker.testing.simulation.history import History
from worker.testing.simulation.loop import PROCESS, START, Stuck
from worker.testing.simulation.network import Network
from worker.testing.simulation.schedule import Attempt, Fault, Signal, Stall
from worker.types import Deletion, OutgoingMessage, QueueSpec, RedrivePolicy

#: Seeds CI runs: chunks spread over the test workers.
CHUNKS, PER_CHUNK = 8, 50

#: The schedules that found defects (as drawn when they did, so that a change to `draw`
#: cannot turn them into other schedules), each with what it found: they must keep passing.
FOUND = json.loads((Path(__file__).parent / "found_schedules.json").read_text())


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_a_budget_of_seeds_keeps_every_rule(chunk: int) -> None:
    first = chunk * PER_CHUNK
    failed = {
        seed: [str(v) for v in result.violations]
        for seed in range(first, first + PER_CHUNK)
        if (result := simulate(draw(seed))).failed
    }
    assert failed == {}, "replay one: python -m bench.simulate --replay SEED"


def test_a_budget_of_tenant_capped_seeds_keeps_every_rule() -> None:
    """Per-tenant caps (a hold of 1): a tenant's messages wait, receives pause, and none is
    ever released toward the dead-letter queue."""
    failed = {
        seed: [str(v) for v in result.violations]
        for seed in range(100)
        if (result := simulate(draw(seed, flows=("tenants",)))).failed
    }
    assert failed == {}, "replay one: python -m bench.simulate --replay SEED --flows tenants"


@pytest.mark.parametrize("name", sorted(FOUND))
def test_schedules_that_found_defects_keep_every_rule(name: str) -> None:
    schedule = Schedule.from_json(json.dumps(FOUND[name]["schedule"]))
    assert simulate(schedule).violations == (), FOUND[name]["found"]


def test_a_seed_gives_the_same_history_every_time() -> None:
    first, second = simulate(draw(130)), simulate(draw(130))
    assert first.digest == second.digest
    assert first.events == second.events and first.runs == second.runs > 0


def test_a_schedule_written_out_replays_exactly() -> None:
    schedule = draw(77)
    again = Schedule.from_json(schedule.to_json())
    assert again == schedule
    assert simulate(again).digest == simulate(schedule).digest


# -- the loop ---------------------------------------------------------------------------


def _process(name: str) -> contextvars.Context:
    context = contextvars.Context()
    context.run(PROCESS.set, name)
    return context


def test_a_stall_holds_back_one_process_while_the_others_go_on() -> None:
    loop = SimLoop()
    ticks: list[tuple[str, float]] = []

    async def tick(name: str) -> None:
        for _ in range(4):
            await asyncio.sleep(1)
            ticks.append((name, loop.time() - START))

    async def main() -> None:
        stalled = loop.create_task(tick("a"), context=_process("a"))
        free = loop.create_task(tick("b"), context=_process("b"))
        loop.stall("a", START + 1.5, START + 3.25)
        await asyncio.gather(stalled, free)

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    assert [t for name, t in ticks if name == "b"] == [1, 2, 3, 4]
    # "a" was due at 2 and 3 while stalled: it goes on at 3.25, then a second later.
    assert [t for name, t in ticks if name == "a"] == [1, 3.25, 4.25, 5.25]


def test_blocking_code_goes_on_first_when_the_block_ends() -> None:
    loop = SimLoop()
    order: list[str] = []

    async def blocker() -> None:
        await loop.block(5)
        order.append(f"blocker at {loop.time() - START}")

    async def timer() -> None:
        await asyncio.sleep(1)  # due during the block
        order.append(f"timer at {loop.time() - START}")

    async def main() -> None:
        process = _process("p")
        tasks = [loop.create_task(timer(), context=process.copy())]  # its sleep starts at 0
        tasks.append(loop.create_task(blocker(), context=process.copy()))
        await asyncio.gather(*tasks)

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    assert order == ["blocker at 5.0", "timer at 5.0"]


def test_a_loop_with_nothing_left_to_wake_its_tasks_is_stuck() -> None:
    loop = SimLoop()
    try:
        with pytest.raises(Stuck):
            loop.run_until_complete(loop.create_future())
    finally:
        loop.close()


# -- the checks can fail --------------------------------------------------------------------


def _history() -> tuple[History, MemoryEngine, ManualClock]:
    clock = ManualClock()
    engine = MemoryEngine(clock, epoch="0123456789ab")
    engine.create_queue(QueueSpec("dlq"))
    engine.create_queue(QueueSpec("q", visibility_timeout_s=10, redrive=RedrivePolicy("dlq", 2)))
    history = History(engine, "q", "dlq", [""])
    result = engine.send("q", [OutgoingMessage(body="{}")])
    history.sent(0, result.message_ids["0"])
    return history, engine, clock


def _receive(history: History, engine: MemoryEngine, process: str) -> str:
    [received] = engine.receive("q", 1)
    history.handed_out(
        process, engine.clock.now(), [(received.message_id, received.receipt_handle)]
    )
    return received.receipt_handle


def test_the_checks_catch_a_run_and_a_side_effect_on_a_lapsed_lease() -> None:
    history, engine, clock = _history()
    handle = _receive(history, engine, "w0")
    clock.advance(11)  # the visibility ended
    run = history.started("w0", history.ids[0], handle)
    assert run is not None
    history.acted(run, handle)
    history.sending("w0", "delete", [handle])
    kinds = [v.kind for v in history.violations]
    assert kinds == ["run-on-lapsed-lease", "side-effect-after-lapse", "stale-handle-sent"]


def test_the_checks_catch_overlapping_runs_and_a_lost_message() -> None:
    history, engine, clock = _history()
    first = _receive(history, engine, "w0")
    run = history.started("w0", history.ids[0], first)
    clock.advance(11)
    second = _receive(history, engine, "w1")
    history.started("w1", history.ids[0], second)
    clock.advance(1)
    assert run is not None
    history.acted(run, first)  # after the other run started
    history.ended(run, "raised")
    engine.delete("q", [_deletion(second)])  # deleted, but no run ended well
    kinds = [v.kind for v in history.check()]
    assert kinds == ["side-effect-after-lapse", "runs-overlap", "lost"]


def test_the_checks_catch_a_healthy_message_dead_lettered() -> None:
    history, engine, clock = _history()
    for process in ("w0", "w1"):  # two receives, each simply let go: nothing failed
        _receive(history, engine, process)
        clock.advance(11)
    assert engine.receive("q", 1) == []  # the third receive moves it to the DLQ
    [violation] = history.check()
    assert violation.kind == "dead-lettered-unexplained"


def test_a_dead_letter_after_failures_or_faults_is_explained() -> None:
    history, engine, clock = _history()
    handle = _receive(history, engine, "w0")
    run = history.started("w0", history.ids[0], handle)
    assert run is not None
    history.ended(run, "raised")
    clock.advance(11)
    _receive(history, engine, "w1")
    history.disturbed("w1", clock.now(), clock.now() + 1)  # a stall, say
    clock.advance(11)
    engine.receive("q", 1)
    assert history.check() == []


def _deletion(handle: str) -> Deletion:
    return Deletion("0", handle)


# -- the shrinker ---------------------------------------------------------------------------


def test_shrinking_keeps_only_the_parts_the_failure_needs() -> None:
    big = Schedule(
        seed=1,
        sends=(0.0, 1.0, 2.0),
        runs=((Attempt(3.0),), (Attempt(4.0, fails=True),), (Attempt(5.0),)),
        faults=(Fault(0, "receive", 3, "lost"), Fault(1, "extend", 0, "late", 2.0)),
        stalls=(Stall(0, 10.0, 2.0),),
        signals=(Signal(1, 20.0, "term"),),
    )

    def fails(schedule: Schedule) -> bool:  # needs the late extend and a failing run
        late = any(f.kind == "late" for f in schedule.faults)
        return late and any(a.fails for runs in schedule.runs for a in runs)

    small = shrink(big, fails)
    assert small.faults == (Fault(1, "extend", 0, "late", 2.0),)
    assert small.stalls == () and small.signals == ()
    assert small.runs == ((Attempt(4.0, fails=True),),)
    assert small.sends == (1.0,)


def test_a_finished_simulation_leaves_no_task_or_world_behind() -> None:
    """Every task still pending at the end (a long poll the service serves, a killed
    process's work) is ended before the loop closes: one left pending stays reachable from
    anyio's per-task state, and a run of 100,000 seeds grew by gigabytes."""
    for seed in range(12):
        simulate(draw(seed))
    gc.collect()
    assert [o for o in gc.get_objects() if isinstance(o, Network)] == []
