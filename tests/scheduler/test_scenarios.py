"""End-to-end scheduler scenarios under the autojump clock, on the memory and SQLite stores.

They complement the §18 worked examples (``test_worked_examples.py``) with longer runs through
``serve``: boundaries over hours, downtime and catch-up, buffer draining, two schedulers on one
store, and the wake-on-deadline loop.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import pytest
import trio
import trio.testing

from trio_triggers import _wake
from trio_triggers._identities import idempotency_key
from trio_triggers._scheduler import SchedulerOptions, notify_registered, open_scheduler
from trio_triggers._scheduler._core import LAUNCH_RECORD_ATTEMPTS

from .harness import (
    MIN,
    H,
    RecordingStore,
    ScriptedRunner,
    Sim,
    hourly,
    key,
    ledger,
    seed_fired,
    store_error,
)

if TYPE_CHECKING:
    from trio.testing import MockClock

ABANDONED = "A trigger abandoned catch-up work beyond its bound"


async def test_hourly_fires_each_boundary_and_settles_completed(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore, runner: ScriptedRunner
) -> None:
    await store.inner.register(hourly("skip", "none"))
    runner.finish_at_once = True
    launched_at: list[int] = []

    async def note(request: Any) -> None:
        launched_at.append(sim.now())

    runner.start_hook = note
    # A poll interval far longer than the schedule: only the wake-on-deadline sleep can
    # dispatch each boundary on time.
    options = SchedulerOptions(poll_interval=6 * 3600)
    async with (
        open_scheduler(store, runner, options=options, clock=sim.clock) as scheduler,
        trio.open_nursery() as nursery,
    ):
        await nursery.start(scheduler.serve)
        await sim.advance_to(6 * H + 30 * MIN)
        nursery.cancel_scope.cancel()
    assert runner.keys == [key("hourly", n * H) for n in range(1, 7)]
    # Dispatch lateness is zero: each start happens at the boundary's own wall instant.
    assert launched_at == [n * H for n in range(1, 7)]
    rows = await ledger(store.inner)
    assert rows == {n * H: ("completed", f"run-{n}") for n in range(1, 7)}
    assert runner.keys[0] == "hourly:1970-01-01T01:00:00.000Z"


@pytest.mark.parametrize(
    ("state", "error"),
    [
        ("failed", "Run run-1 failed"),
        ("cancelled", "Run run-1 was cancelled"),
        ("missing", "Run run-1 is unknown to the runner"),
    ],
)
async def test_stopped_runs_settle_failed_with_the_contract_message(
    autojump_clock: MockClock,
    sim: Sim,
    store: RecordingStore,
    runner: ScriptedRunner,
    state: Any,
    error: str,
) -> None:
    await seed_fired(store.inner, hourly())
    runner.default_state = state
    runner.finish_at_once = True
    async with open_scheduler(store, runner, clock=sim.clock) as scheduler:
        await sim.tick(scheduler, H)
    page = await store.inner.history()
    newest = page.items[0]
    assert (newest.occurrence, newest.outcome, newest.run_id, newest.error) == (
        H,
        "failed",
        "run-1",
        error,
    )


async def test_new_trigger_skips_the_boundary_before_registration(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore, runner: ScriptedRunner
) -> None:
    await sim.advance_to(H + 10 * MIN)
    await store.inner.register(hourly("skip", "all", 5))
    async with open_scheduler(store, runner, clock=sim.clock) as scheduler:
        await sim.tick(scheduler)
        assert runner.starts == []
        await sim.tick(scheduler, 2 * H)
    assert runner.keys == [key("hourly", 2 * H)]


@pytest.mark.parametrize(
    ("catch_up", "bound", "owed", "warned"),
    [
        ("none", 5, [5 * H], False),
        ("one", 5, [5 * H], False),
        ("all", 5, [2 * H, 3 * H, 4 * H, 5 * H], False),
        ("all", 2, [5 * H], True),
        ("one", 0, [5 * H], True),
    ],
)
async def test_catch_up_after_downtime(
    autojump_clock: MockClock,
    sim: Sim,
    store: RecordingStore,
    runner: ScriptedRunner,
    caplog: pytest.LogCaptureFixture,
    catch_up: str,
    bound: int,
    owed: list[int],
    warned: bool,
) -> None:
    await seed_fired(store.inner, hourly("skip", catch_up, bound))
    runner.finish_at_once = True
    async with open_scheduler(store, runner, clock=sim.clock) as before:
        await sim.tick(before, H)
    assert runner.keys == [key("hourly", H)]
    store.calls.clear()
    caplog.clear()
    # Down from H to 5H + 20 min; a new process starts.
    async with open_scheduler(store, runner, clock=sim.clock) as after:
        await sim.tick(after, 5 * H + 20 * MIN)
    assert store.claim_occurrences() == owed
    warnings = [r for r in caplog.records if r.getMessage() == ABANDONED]
    assert len(warnings) == (1 if warned else 0)
    if warned:
        assert warnings[0].levelno == logging.WARNING
        assert warnings[0].trigger_id == "hourly"  # type: ignore[attr-defined]
    if catch_up != "all" or warned:
        assert runner.keys[-1] == key("hourly", 5 * H)  # the current boundary is kept


async def test_buffer_coalesces_to_newest_and_drains_when_the_run_settles(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore, runner: ScriptedRunner
) -> None:
    await seed_fired(store.inner, hourly("buffer-one", "none"))
    options = SchedulerOptions(poll_interval=6 * 3600, run_poll_interval=60)
    async with (
        open_scheduler(store, runner, options=options, clock=sim.clock) as scheduler,
        trio.open_nursery() as nursery,
    ):
        await nursery.start(scheduler.serve)
        await sim.advance_to(3 * H + 10 * MIN)
        assert runner.keys == [key("hourly", H)]
        assert (await store.inner.inspect("hourly")).pending_at == 3 * H  # newest wins
        runner.stop("run-1")
        # The monitor notices within one run poll and wakes the loop: the buffered 3H is
        # launched right away, not at the next boundary.
        await sim.advance(2 * MIN)
        assert runner.keys == [key("hourly", H), key("hourly", 3 * H)]
        assert sim.now() < 4 * H
        nursery.cancel_scope.cancel()
    rows = await ledger(store.inner)
    assert rows[H][0] == "completed"
    assert rows[2 * H][0] == "buffered"  # coalesced into 3H, never launched
    assert rows[3 * H] == ("launched", "run-2")


async def test_registration_through_the_process_wakes_serve(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore, runner: ScriptedRunner
) -> None:
    options = SchedulerOptions(poll_interval=600)
    async with (
        open_scheduler(store, runner, options=options, clock=sim.clock) as scheduler,
        trio.open_nursery() as nursery,
    ):
        await nursery.start(scheduler.serve)
        await trio.testing.wait_all_tasks_blocked()
        assert store.count("list") == 1
        await sim.advance_to(10_000)
        await scheduler.register(hourly("skip", "none", cron="* * * * *"))
        await trio.testing.wait_all_tasks_blocked()
        assert store.count("list") == 2  # ticked at once, not after 600 s
        assert scheduler.next_due_at() == MIN
        # A store (or any code) can wake every scheduler of that store the same way.
        notify_registered(store)
        await trio.testing.wait_all_tasks_blocked()
        assert store.count("list") == 3
        await sim.advance_to(MIN + 1)
        assert runner.keys == [idempotency_key("hourly", MIN)]
        nursery.cancel_scope.cancel()


async def test_a_direct_store_registration_wakes_serve(
    autojump_clock: MockClock, sim: Sim, inner_store: Any, runner: ScriptedRunner
) -> None:
    """``await store.register(...)`` (not through the scheduler) wakes it too: every built-in
    store notifies its schedulers itself."""
    options = SchedulerOptions(poll_interval=600)
    async with (
        open_scheduler(inner_store, runner, options=options, clock=sim.clock) as scheduler,
        trio.open_nursery() as nursery,
    ):
        await nursery.start(scheduler.serve)
        await trio.testing.wait_all_tasks_blocked()
        assert scheduler.next_due_at() is None
        await sim.advance_to(10_000)
        await inner_store.register(hourly("skip", "none", cron="* * * * *"))
        await trio.testing.wait_all_tasks_blocked()
        assert scheduler.next_due_at() == MIN  # ticked at once, not after 600 s
        await sim.advance_to(MIN + 1)
        assert runner.keys == [idempotency_key("hourly", MIN)]
        nursery.cancel_scope.cancel()


async def test_a_wrapper_store_registration_wakes_the_schedulers_opened_on_it(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore, runner: ScriptedRunner
) -> None:
    """The store owns the wake-up: a wrapper (a store object of its own) notifies for itself,
    so ``await wrapper.register(...)`` alone wakes a scheduler sleeping on the wrapper."""
    options = SchedulerOptions(poll_interval=600)
    async with (
        open_scheduler(store, runner, options=options, clock=sim.clock) as scheduler,
        trio.open_nursery() as nursery,
    ):
        await nursery.start(scheduler.serve)
        await trio.testing.wait_all_tasks_blocked()
        assert store.count("list") == 1
        await sim.advance_to(10_000)
        await store.register(hourly("skip", "none", cron="* * * * *"))
        await trio.testing.wait_all_tasks_blocked()
        assert store.count("list") == 2  # ticked at once, not after 600 s
        assert sim.now() == 10_000
        nursery.cancel_scope.cancel()


async def test_waiting_on_a_scheduler_instead_of_polling(
    autojump_clock: MockClock, sim: Sim, inner_store: Any, runner: ScriptedRunner
) -> None:
    """``idle`` and ``next_attention`` are values to wait on: a registration through the store
    alone wakes the sleeping scheduler, which publishes its new next attention at once."""
    options = SchedulerOptions(poll_interval=600)
    async with (
        open_scheduler(inner_store, runner, options=options, clock=sim.clock) as scheduler,
        trio.open_nursery() as nursery,
    ):
        assert scheduler.idle.value is False  # not serving yet
        await nursery.start(scheduler.serve)
        await scheduler.idle.wait_value(True)  # the first tick is done: asleep
        assert scheduler.next_attention.value is None  # nothing registered
        await sim.advance_to(10_000)
        await inner_store.register(hourly("skip", "none", cron="* * * * *"))
        assert await scheduler.next_attention.wait_value(MIN) == MIN
        assert sim.now() == 10_000  # woken at once, not after the 600 s poll
        await scheduler.idle.wait_value(True)
        await scheduler.next_attention.wait_value(2 * MIN)  # the boundary at MIN was served
        assert sim.now() == MIN
        assert runner.keys == [idempotency_key("hourly", MIN)]
        nursery.cancel_scope.cancel()


async def test_scheduler_register_adds_no_second_wake(
    autojump_clock: MockClock, sim: Sim, inner_store: Any, runner: ScriptedRunner
) -> None:
    """``Scheduler.register`` only delegates: the one notification is the store's."""
    notified: list[None] = []
    unsubscribe = _wake.subscribe(inner_store, lambda: notified.append(None))
    try:
        async with open_scheduler(inner_store, runner, clock=sim.clock) as scheduler:
            await scheduler.register(hourly("skip", "none"))
            assert len(notified) == 1
            await inner_store.register(hourly("skip", "none", cron="* * * * *"))
            assert len(notified) == 2
    finally:
        unsubscribe()


async def test_two_schedulers_launch_every_boundary_once(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore
) -> None:
    runner = ScriptedRunner(dedup=True)

    async def finish_later(request: Any) -> None:
        return None

    runner.start_hook = finish_later
    await seed_fired(store.inner, hourly("skip", "none", cron="*/10 * * * *"))
    options = SchedulerOptions(poll_interval=60, run_poll_interval=30)
    async with (
        open_scheduler(store, runner, options=options, clock=sim.clock) as a,
        open_scheduler(store, runner, options=options, clock=sim.clock) as b,
        trio.open_nursery() as nursery,
    ):
        await nursery.start(a.serve)
        await nursery.start(b.serve)
        for n in range(1, 13):
            await sim.advance_to(n * 10 * MIN + 3 * MIN)
            runner.stop_all()  # each run takes about three minutes
        await sim.advance(5 * MIN)
        nursery.cancel_scope.cancel()
    boundaries = [n * 10 * MIN for n in range(1, 13)]
    assert runner.keys == [key("hourly", o) for o in boundaries]  # one start per boundary
    rows = await ledger(store.inner)
    assert all(rows[o][0] == "completed" for o in boundaries)
    launched = [r for r in store.results if r.outcome == "launched"]
    assert sorted(r.occurrence for r in launched) == boundaries


async def test_reattach_after_a_process_dies(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore, runner: ScriptedRunner
) -> None:
    # §18.2 case 59, on every store.
    await store.inner.register(hourly("skip", "one"))
    async with open_scheduler(store, runner, clock=sim.clock) as first:
        await sim.tick(first, H)
        await sim.tick(first, 2 * H)
    assert await store.inner.active_run("hourly") == "run-1"
    async with open_scheduler(store, runner, clock=sim.clock) as second:
        await sim.tick(second, 3 * H)
        assert await store.inner.active_run("hourly") == "run-1"
        runner.stop("run-1")
        await sim.tick(second, 4 * H)
    assert runner.keys == [key("hourly", 2 * H), key("hourly", 4 * H)]
    assert runner.cancelled == []
    current = await store.inner.get("hourly")
    assert current is not None
    assert current.last_fired_at == 4 * H
    assert (await ledger(store.inner))[2 * H] == ("completed", "run-1")


async def test_a_ticks_claims_share_a_transaction_on_a_batching_store(
    autojump_clock: MockClock, sim: Sim, inner_store: Any, runner: ScriptedRunner
) -> None:
    """Rows with nothing held skip the ``concurrency`` slots, so a tick's claims are in flight
    together: on SQLite forty claims ride one or two transactions, not forty (and never only
    ``concurrency`` at a time); every boundary is launched once either way."""
    ids = [f"m{k:02d}" for k in range(40)]
    for trigger_id in ids:
        await seed_fired(inner_store, hourly("skip", "none", id=trigger_id, cron="* * * * *"))
    sizes: list[int] = []
    if getattr(inner_store, "_batching", False):
        original = inner_store._run_batch

        async def spy(bodies: Any, **hints: Any) -> Any:
            sizes.append(len(bodies))
            return await original(bodies, **hints)

        inner_store._run_batch = spy
    options = SchedulerOptions(concurrency=2)
    async with open_scheduler(inner_store, runner, options=options, clock=sim.clock) as scheduler:
        await sim.tick(scheduler, MIN)
    assert sorted(runner.keys) == [idempotency_key(t, MIN) for t in ids]
    if inner_store.__class__.__name__ != "MemoryTriggerStore":
        assert max(sizes) >= len(ids) - 1  # the first claim may lead alone


async def test_the_listing_tick_claims_nothing_past_a_failed_claim(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore, runner: ScriptedRunner
) -> None:
    """A store without the attention index (this wrapper) takes the listing tick. Backlog
    [2H, 3H] under ``catch_up="all"``; the claim of 2H fails once. Were 3H claimed after it,
    the cursor would pass 2H and the next process, which counts from the cursor, would never
    fire or record 2H."""
    await seed_fired(store.inner, hourly("skip", "all", max_catch_up=5))
    runner.finish_at_once = True
    async with open_scheduler(store, runner, clock=sim.clock) as first:
        await sim.tick(first, H)
    assert runner.keys == [key("hourly", H)]
    store.fail["claim_fire"] = [store_error()]
    async with open_scheduler(store, runner, clock=sim.clock) as second:
        await sim.tick(second, 3 * H + MIN)
    # 2H's claim failed and 3H was not claimed: the cursor stays before the owed boundary.
    assert store.claim_occurrences()[-1] == 2 * H
    assert runner.keys == [key("hourly", H)]
    current = await store.inner.get("hourly")
    assert current is not None
    assert current.last_fired_at == H
    # The next process owes both again and fires 2H; 3H is skipped behind it.
    async with open_scheduler(store, runner, clock=sim.clock) as third:
        await sim.tick(third, 3 * H + 2 * MIN)
    assert runner.keys == [key("hourly", H), key("hourly", 2 * H)]
    rows = await ledger(store.inner)
    assert sorted(rows) == [0, H, 2 * H, 3 * H]  # every owed boundary is in the ledger


async def test_the_listing_tick_retries_a_failed_claim_in_the_same_process(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore, runner: ScriptedRunner
) -> None:
    """The same process, on its next tick, claims the failed boundary first (its watermark
    stayed before it), then the later ones."""
    await seed_fired(store.inner, hourly("buffer-one", "all", max_catch_up=5))
    runner.finish_at_once = True
    async with open_scheduler(store, runner, clock=sim.clock) as scheduler:
        await sim.tick(scheduler, H)
        store.fail["claim_fire"] = [store_error()]
        store.calls.clear()
        await sim.tick(scheduler, 3 * H + MIN)
        assert store.claim_occurrences() == [2 * H]
        store.calls.clear()
        await sim.tick(scheduler, 3 * H + 2 * MIN)
        assert store.claim_occurrences() == [2 * H, 3 * H]
    rows = await ledger(store.inner)
    assert sorted(rows) == [0, H, 2 * H, 3 * H]


async def test_a_first_sight_counts_from_a_claimed_occurrence_on_the_listing_tick(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore, runner: ScriptedRunner
) -> None:
    """Found by the simulator's listing worlds. H is claimed, its ``launched`` write fails, so
    the launch puts H back in the pending slot and the cursor has never moved; the process
    stops. The next process's first sight must count from H (the trigger has fired), not owe
    nothing as for a trigger that never fired: 2H is owed."""
    await store.register(hourly("skip", "all", max_catch_up=5))
    runner.finish_at_once = True
    async with open_scheduler(store, runner, clock=sim.clock) as first:
        await sim.tick(first, 0)  # first sight at registration: nothing owed yet
        store.fail["record_result"] = [store_error()] * LAUNCH_RECORD_ATTEMPTS
        await sim.tick(first, H)
        await trio.sleep(5)  # the retries' backoff, then the re-arm
    current = await store.inner.get("hourly")
    assert current is not None
    assert current.last_fired_at is None
    assert (await store.inner.inspect("hourly")).pending_at == H
    async with open_scheduler(store, runner, clock=sim.clock) as second:
        await sim.tick(second, 2 * H + 25 * MIN)
    rows = await ledger(store.inner)
    assert sorted(rows) == [H, 2 * H]
    assert rows[H][0] == "completed"
