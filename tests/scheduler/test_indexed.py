"""The tick on a store with the attention index: it reads only what needs attention.

(``docs/scheduler.md``, "What a tick reads".) The scenario and worked-example suites run the
reference listing tick through a recording wrapper; these tests drive real stores directly, so
the scheduler takes the indexed path, and count the store calls a tick makes.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

import trio
import trio.testing

from trio_triggers._errors import TriggerError
from trio_triggers._scheduler import SchedulerOptions, open_scheduler
from trio_triggers._scheduler._core import TAKE_HOLD_MS
from trio_triggers._store import MemoryTriggerStore

from .harness import MIN, H, ScriptedRunner, Sim, hourly, key, ledger

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from trio.testing import MockClock

STORE_METHODS = (
    "list",
    "get",
    "claim_fire",
    "claim_pending",
    "record_result",
    "active_run",
    "active_occurrence",
    "inspect",
    "due",
    "holding",
    "next_attention",
)


def count_calls(store: Any) -> Counter[str]:
    """Count every call of the store's methods (instance attributes wrap the bound methods)."""
    calls: Counter[str] = Counter()

    def wrap(name: str, method: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def counted(*args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return await method(*args, **kwargs)

        return counted

    for name in STORE_METHODS:
        setattr(store, name, wrap(name, getattr(store, name)))
    return calls


async def test_idle_rows_cost_no_store_call_per_row(
    autojump_clock: MockClock, sim: Sim, runner: ScriptedRunner
) -> None:
    store = MemoryTriggerStore(clock=sim.clock)
    idle = [hourly(id=f"idle-{n:05d}", cron="0 0 * * *") for n in range(10_000)]
    await store.register_many(idle)
    await store.register(hourly(id="hot", cron="* * * * *"))
    calls = count_calls(store)
    runner.finish_at_once = True
    options = SchedulerOptions(run_poll_interval=1)
    async with open_scheduler(store, runner, options=options, clock=sim.clock) as scheduler:
        await sim.tick(scheduler, MIN)
        await sim.tick(scheduler, 2 * MIN)
    assert runner.keys == [key("hot", MIN), key("hot", 2 * MIN)]
    # Two ticks: one due read each, a recovery sweep or two, one next_attention
    # each, and the hot trigger's own claims and results. Nothing for the 10 000 idle rows.
    assert calls["list"] == 0
    assert calls["get"] == 0
    assert calls["due"] == 2
    assert calls["next_attention"] == 2
    assert calls["holding"] <= 2  # the recovery sweep (every recovery_interval, 30 s)
    assert calls["claim_fire"] == 2
    assert sum(calls.values()) < 20, calls


async def test_serve_sleeps_until_the_earliest_attention_instant(
    autojump_clock: MockClock, sim: Sim, runner: ScriptedRunner
) -> None:
    store = MemoryTriggerStore(clock=sim.clock)
    await store.register(hourly(id="a", cron="30 * * * *"))
    await store.register(hourly(id="b", cron="45 * * * *"))
    calls = count_calls(store)
    async with (
        open_scheduler(
            store, runner, options=SchedulerOptions(poll_interval=7200), clock=sim.clock
        ) as scheduler,
        trio.open_nursery() as nursery,
    ):
        await nursery.start(scheduler.serve)
        await trio.testing.wait_all_tasks_blocked()
        assert scheduler.next_due_at() == 30 * MIN
        await sim.advance_to(46 * MIN)
        nursery.cancel_scope.cancel()
    assert runner.keys == [key("a", 30 * MIN), key("b", 45 * MIN)]
    assert calls["due"] == 3  # at start, at :30 and at :45: not once a second


async def test_schedulers_take_disjoint_due_rows(autojump_clock: MockClock, sim: Sim) -> None:
    store = MemoryTriggerStore(clock=sim.clock)
    await store.register_many([hourly(id=f"t{n:03d}", cron="* * * * *") for n in range(100)])
    runner = ScriptedRunner(dedup=True)
    runner.finish_at_once = True
    calls = count_calls(store)
    async with (
        open_scheduler(store, runner, options=SchedulerOptions(host="a"), clock=sim.clock) as a,
        open_scheduler(store, runner, options=SchedulerOptions(host="b"), clock=sim.clock) as b,
    ):
        await sim.advance_to(MIN)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(a.run_once)
            nursery.start_soon(b.run_once)
        await trio.testing.wait_all_tasks_blocked()
    # Each row was taken by exactly one of them: one claim per trigger, not two.
    assert calls["claim_fire"] == 100
    assert sorted(runner.keys) == sorted(key(f"t{n:03d}", MIN) for n in range(100))


async def test_rows_taken_by_a_dead_scheduler_come_back(
    autojump_clock: MockClock, sim: Sim, runner: ScriptedRunner
) -> None:
    store = MemoryTriggerStore(clock=sim.clock)
    await store.register(hourly())
    await sim.advance_to(H)
    taken = await store.due(H, hold_ms=TAKE_HOLD_MS)  # a peer takes the row, then dies
    assert [row.row.trigger_id for row in taken] == ["hourly"]
    async with open_scheduler(store, runner, clock=sim.clock) as scheduler:
        await sim.tick(scheduler)
        assert runner.keys == []  # still held by the dead peer's take
        await sim.tick(scheduler, H + TAKE_HOLD_MS)
    assert runner.keys == [key("hourly", H)]


async def test_a_trigger_is_observed_when_it_is_registered(
    autojump_clock: MockClock, sim: Sim, runner: ScriptedRunner
) -> None:
    store = MemoryTriggerStore(clock=sim.clock)
    await store.register(hourly("skip", "none"))
    # No scheduler ran at registration; the first one starts after the first boundary.
    async with open_scheduler(store, runner, clock=sim.clock) as scheduler:
        await sim.tick(scheduler, H + 30 * MIN)
    assert runner.keys == [key("hourly", H)]


async def test_a_held_run_of_a_dead_process_is_recovered_by_the_sweep(
    autojump_clock: MockClock, sim: Sim, runner: ScriptedRunner
) -> None:
    store = MemoryTriggerStore(clock=sim.clock)
    await store.register(hourly())
    async with open_scheduler(store, runner, clock=sim.clock) as first:
        await sim.tick(first, H)
    assert await store.active_run("hourly") == "run-1"  # its process is gone, the run goes on
    runner.stop("run-1")
    async with open_scheduler(store, runner, clock=sim.clock) as second:
        await sim.tick(second, H + 10 * MIN)  # nothing is due: the sweep finds the run
    assert (await ledger(store))[H] == ("completed", "run-1")
    assert await store.active_run("hourly") is None


async def test_nothing_is_claimed_past_a_failed_claim(
    autojump_clock: MockClock, sim: Sim, runner: ScriptedRunner
) -> None:
    store = MemoryTriggerStore(clock=sim.clock)
    await store.register(hourly("skip", "all", max_catch_up=5))
    runner.finish_at_once = True
    async with open_scheduler(store, runner, clock=sim.clock) as first:
        await sim.tick(first, H)
    real = store.claim_fire
    failures = [TriggerError("store", "store down")]

    async def flaky(trigger_id: str, occurrence: int, **kwargs: Any) -> Any:
        if occurrence == 2 * H and failures:
            raise failures.pop()
        return await real(trigger_id, occurrence, **kwargs)

    store.claim_fire = flaky  # type: ignore[method-assign]
    # A restart after a pause owes [2H, 3H]; 2H's claim fails, so 3H is not claimed either:
    # the cursor stays before the owed boundary instead of passing it.
    async with open_scheduler(store, runner, clock=sim.clock) as second:
        await sim.tick(second, 3 * H + MIN)
    assert runner.keys == [key("hourly", H)]
    current = await store.get("hourly")
    assert current is not None
    assert current.last_fired_at == H
    # The next process (after the failed tick's take has lapsed) fires both.
    async with open_scheduler(store, runner, clock=sim.clock) as third:
        await sim.tick(third, 3 * H + MIN + TAKE_HOLD_MS)
    assert runner.keys == [key("hourly", H), key("hourly", 2 * H)]
    rows = await ledger(store)
    assert sorted(rows) == [H, 2 * H, 3 * H]  # every owed boundary is in the ledger
    assert rows[3 * H][0] == "skipped"  # behind 2H's run, under skip


async def test_a_predecessor_is_not_stranded_when_supersede_is_edited_away(
    autojump_clock: MockClock, sim: Sim, runner: ScriptedRunner
) -> None:
    """Issue 21 item 2. run-1 runs for H; a supersede claimant reserves 2H over it and dies
    before cancelling it; the trigger is then edited to ``skip``. When the reservation's lease
    expires, run-1 gets the holder slot back, so a tick reaches it and its ``launched`` row
    settles when it ends (before, the release dropped it and the row stayed launched forever).
    """
    store = MemoryTriggerStore(clock=sim.clock)
    await store.register(hourly("supersede"))
    options = SchedulerOptions(run_poll_interval=60)
    async with open_scheduler(store, runner, options=options, clock=sim.clock) as first:
        await sim.tick(first, H)
    assert runner.keys == [key("hourly", H)]
    assert (await ledger(store))[H] == ("launched", "run-1")
    # The claimant that dies: it reserves 2H (displacing run-1) and does nothing more.
    await sim.advance_to(2 * H)
    current = await store.get("hourly")
    assert current is not None
    claim = await store.claim_fire("hourly", 2 * H, expected_revision=current.revision)
    assert claim.action == "supersede"
    assert claim.active_run_id == "run-1"
    edited = await store.register(hourly("skip"))
    assert edited.overlap == "skip"
    # A peer's claim is the first call to meet the expired lease (5 min, long gone at 3H).
    await sim.advance_to(3 * H)
    peer = await store.claim_fire("hourly", 3 * H, expected_revision=edited.revision)
    assert peer.action == "skip"  # run-1 holds again, and 3H meets skip against it
    assert (await store.inspect("hourly")).active_run_id == "run-1"
    async with open_scheduler(store, runner, options=options, clock=sim.clock) as second:
        await sim.tick(second)
        runner.stop("run-1")
        await sim.advance(2 * MIN)
        await trio.testing.wait_all_tasks_blocked()
        await sim.tick(second)
    rows = await ledger(store)
    assert rows[H] == ("completed", "run-1")
    assert runner.cancelled == []  # nobody cancels a run the edit took out of supersede
    assert rows[3 * H][0] == "skipped"  # 3H met the new policy against the running run-1
