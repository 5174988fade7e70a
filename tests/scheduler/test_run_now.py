"""Run now (issue 16): a manual fire through a serving scheduler, under the autojump clock.

A manual fire meets a held run exactly as a scheduled boundary would (``skip``, ``buffer-one``,
``supersede``, or an override for this fire), launches with its own input and a key of its
own, and never moves the cursor: the schedule's boundaries fire as if it had not happened.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
import trio
import trio.testing

from trio_triggers._constants import RESERVATION_LEASE_MS
from trio_triggers._identities import idempotency_key
from trio_triggers._scheduler import Fired, Scheduler, open_scheduler
from trio_triggers._store._engine import EngineStore

from .harness import MIN, H, ScriptedRunner, Sim, hourly, ledger

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from trio.testing import MockClock

    from trio_triggers._store._protocol import TriggerStore


@pytest.fixture
async def serving(
    inner_store: TriggerStore, runner: ScriptedRunner, sim: Sim
) -> AsyncIterator[Scheduler]:
    async with (
        open_scheduler(inner_store, runner, clock=sim.clock) as scheduler,
        trio.open_nursery() as nursery,
    ):
        await nursery.start(scheduler.serve)
        yield scheduler
        nursery.cancel_scope.cancel()


async def cursor(store: TriggerStore) -> int | None:
    got = await store.get("hourly")
    assert got is not None
    return got.last_fired_at


async def test_with_nothing_held_it_launches_its_own_input_and_leaves_the_schedule_alone(
    autojump_clock: MockClock,
    inner_store: TriggerStore,
    runner: ScriptedRunner,
    sim: Sim,
    serving: Scheduler,
) -> None:
    await inner_store.register(hourly("skip", "none"))
    await sim.advance_to(30 * MIN)
    fired = await serving.fire("hourly", key="k1", input={"why": "now"})
    occurrence = 30 * MIN - 1  # the request's instant, off the whole-second grid
    assert fired == Fired(
        trigger_id="hourly",
        occurrence=occurrence,
        key="k1",
        action="fire",
        outcome="launched",
        run_id="run-1",
    )
    [request] = runner.starts
    assert request.input == {"why": "now"}
    assert request.idempotency_key == idempotency_key("hourly", occurrence)
    runner.stop("run-1")
    await sim.advance_to(H + MIN)
    assert await ledger(inner_store) == {
        occurrence: ("completed", "run-1"),
        H: ("launched", "run-2"),  # the boundary fired on time, as if nothing had happened
    }
    assert runner.starts[1].input == {"source": "schedule"}
    assert await cursor(inner_store) == H


async def held(inner_store: TriggerStore, runner: ScriptedRunner, sim: Sim, overlap: str) -> None:
    """``hourly`` under ``overlap`` holding run-1 of boundary H, at H + 10 min."""
    await inner_store.register(hourly(overlap, "none"))
    await sim.advance_to(H + 10 * MIN)
    assert runner.active == {"run-1"}
    assert await cursor(inner_store) == H


async def test_during_a_held_run_under_skip_it_is_skipped(
    autojump_clock: MockClock,
    inner_store: TriggerStore,
    runner: ScriptedRunner,
    sim: Sim,
    serving: Scheduler,
) -> None:
    await held(inner_store, runner, sim, "skip")
    fired = await serving.fire("hourly", key="k")
    assert (fired.action, fired.outcome, fired.run_id) == ("skip", "skipped", None)
    assert len(runner.starts) == 1
    runner.stop("run-1")
    await sim.advance_to(2 * H + MIN)
    rows = await ledger(inner_store)
    assert rows[fired.occurrence] == ("skipped", None)
    assert rows[2 * H] == ("launched", "run-2")
    assert await cursor(inner_store) == 2 * H


async def test_during_a_held_run_under_buffer_one_it_runs_when_the_run_ends(
    autojump_clock: MockClock,
    inner_store: TriggerStore,
    runner: ScriptedRunner,
    sim: Sim,
    serving: Scheduler,
) -> None:
    await held(inner_store, runner, sim, "buffer-one")
    fired = await serving.fire("hourly", key="k", input="mine")
    assert (fired.action, fired.outcome) == ("buffer", "buffered")
    assert len(runner.starts) == 1
    await sim.advance(5 * MIN)
    runner.stop("run-1")  # the next look at run-1 (within run_poll_interval) settles it
    await sim.advance(20_000)  # and the manual fire follows at once (no 60 s poll wait)
    assert len(runner.starts) == 2
    assert runner.starts[1].input == "mine"
    assert runner.starts[1].idempotency_key == idempotency_key("hourly", fired.occurrence)
    rows = await ledger(inner_store)
    assert rows[H] == ("completed", "run-1")
    assert rows[fired.occurrence] == ("launched", "run-2")
    assert await cursor(inner_store) == H
    assert (await inner_store.inspect("hourly")).pending_at is None


async def test_during_a_held_run_under_supersede_it_replaces_the_run(
    autojump_clock: MockClock,
    inner_store: TriggerStore,
    runner: ScriptedRunner,
    sim: Sim,
    serving: Scheduler,
) -> None:
    await held(inner_store, runner, sim, "supersede")
    fired = await serving.fire("hourly", key="k")
    assert (fired.action, fired.outcome, fired.run_id) == ("supersede", "launched", "run-2")
    assert runner.cancelled == ["run-1"]
    rows = await ledger(inner_store)
    assert rows[H] == ("superseded", "run-1")
    assert (await inner_store.inspect("hourly")).active_run_id == "run-2"
    assert await cursor(inner_store) == H


@pytest.mark.parametrize(
    ("policy", "override", "action"),
    [
        ("skip", "supersede", "supersede"),
        ("supersede", "skip", "skip"),
        ("skip", "buffer-one", "buffer"),
    ],
)
async def test_an_explicit_override_decides_this_fire_only(
    autojump_clock: MockClock,
    inner_store: TriggerStore,
    runner: ScriptedRunner,
    sim: Sim,
    serving: Scheduler,
    policy: str,
    override: str,
    action: str,
) -> None:
    await held(inner_store, runner, sim, policy)
    fired = await serving.fire("hourly", key="k", overlap=override)  # type: ignore[arg-type]
    assert fired.action == action
    got = await inner_store.get("hourly")
    assert got is not None
    assert got.overlap == policy
    if action == "buffer":
        # The trigger's own policy is skip: the end of run-1 still wakes the loop for it.
        runner.stop("run-1")
        await sim.advance(20_000)  # its monitor's next look (15 s), then at once: no poll wait
        assert len(runner.starts) == 2
        assert (await ledger(inner_store))[fired.occurrence] == ("launched", "run-2")


async def test_a_repeated_key_answers_the_first_fire_and_runs_nothing(
    autojump_clock: MockClock,
    inner_store: TriggerStore,
    runner: ScriptedRunner,
    sim: Sim,
    serving: Scheduler,
) -> None:
    await inner_store.register(hourly("skip", "none"))
    await sim.advance_to(10 * MIN)
    first = await serving.fire("hourly", key="once")
    await sim.advance(MIN)
    again = await serving.fire("hourly", key="once")
    assert again == Fired(
        trigger_id="hourly",
        occurrence=first.occurrence,
        key="once",
        action=None,
        repeated=True,
        outcome="launched",
        run_id="run-1",
    )
    assert len(runner.starts) == 1


async def test_a_fire_whose_launcher_died_is_launched_by_a_serving_scheduler(
    autojump_clock: MockClock,
    inner_store: TriggerStore,
    runner: ScriptedRunner,
    sim: Sim,
    serving: Scheduler,
) -> None:
    await inner_store.register(hourly("skip", "none"))
    await sim.advance_to(10 * MIN)
    assert isinstance(inner_store, EngineStore)
    # A process claimed a manual fire and died before launching it: only the claim is written.
    made = await inner_store.claim_manual("hourly", key="k", input={"n": 7})
    assert made.claim.action == "fire"
    await sim.advance(RESERVATION_LEASE_MS + 2 * MIN)  # the lease ends: re-armed, then launched
    [request] = runner.starts
    assert request.input == {"n": 7}
    assert request.idempotency_key == idempotency_key("hourly", made.occurrence)
    assert (await ledger(inner_store))[made.occurrence] == ("launched", "run-1")
    assert await cursor(inner_store) is None
