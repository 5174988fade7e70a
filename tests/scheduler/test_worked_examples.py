"""The worked scheduler examples of ``triggers.md`` §18.2, one test per case.

Every test runs on the memory and the SQLite store (the ``store`` fixture is parametrized);
cases that replace store answers ("Listed …", "claim_fire answers …") do so through the
recording wrapper, so the inner store only serves what is not overridden.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import msgspec
import pytest
import trio
import trio.testing

from trio_triggers._constants import MAX_SAFE_INTEGER
from trio_triggers._errors import TriggerError
from trio_triggers._identities import is_reservation, reservation_id, reservation_occurrence
from trio_triggers._scheduler import SchedulerOptions, open_scheduler
from trio_triggers._scheduler._core import LAUNCH_RECORD_ATTEMPTS
from trio_triggers._store._models import Claim, Held, Listed, PendingClaim, Result, listed

from .harness import (
    LEASE,
    MIN,
    H,
    RecordingStore,
    ScriptedRunner,
    Sim,
    UnavailableStore,
    claim_fire_answering_fire,
    const,
    hourly,
    key,
    ledger,
    newest,
    raising,
    registered,
    seed,
    seed_fired,
    store_error,
)

if TYPE_CHECKING:
    from trio.testing import MockClock

HOUR_S = 3600


def opts(**kwargs: Any) -> SchedulerOptions:
    return SchedulerOptions(**kwargs)


async def noop(*args: Any, **kwargs: Any) -> None:
    await trio.lowlevel.checkpoint()


# 1
async def test_01_new_trigger_first_poll_fires_nothing(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore, runner: ScriptedRunner
) -> None:
    await store.inner.register(hourly("skip", "none"))
    async with open_scheduler(store, runner, clock=sim.clock) as scheduler:
        await sim.tick(scheduler, int(1.5 * H))
        assert runner.starts == []
        await sim.tick(scheduler, 2 * H)
    assert runner.keys == ["hourly:1970-01-01T02:00:00.000Z"]


# 2
@pytest.mark.parametrize(("catch_up", "count"), [("none", 1), ("one", 1), ("all", 3)])
@pytest.mark.parametrize("overlap", ["skip", "buffer-one", "supersede"])
async def test_02_overlap_by_catch_up_on_first_sight(
    autojump_clock: MockClock,
    sim: Sim,
    store: RecordingStore,
    runner: ScriptedRunner,
    overlap: str,
    catch_up: str,
    count: int,
) -> None:
    await seed(store.inner, hourly(overlap, catch_up), "launched", runner)
    options = opts(run_poll_interval=HOUR_S)
    async with open_scheduler(store, runner, options=options, clock=sim.clock) as scheduler:
        await sim.tick(scheduler, 3 * H)
    outcomes = store.outcomes()
    if overlap == "skip":
        assert runner.starts == []
        assert outcomes.count("skipped") == count
    elif overlap == "buffer-one":
        assert runner.starts == []
        assert outcomes.count("buffered") == count
    else:
        assert len(runner.starts) == count
        assert outcomes.count("launched") == count
        assert "seed" in runner.cancelled


# 3
async def test_03_buffer_coalesces_then_drains(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore, runner: ScriptedRunner
) -> None:
    await seed(store.inner, hourly("buffer-one", "all"), "launched", runner)
    async with open_scheduler(store, runner, clock=sim.clock) as scheduler:
        await sim.tick(scheduler, 3 * H)
        assert runner.starts == []
        assert (await store.inner.inspect("hourly")).pending_at == 3 * H
        runner.stop("seed")
        await sim.tick(scheduler)
    assert runner.keys == ["hourly:1970-01-01T03:00:00.000Z"]


# 4
async def test_04_supersede(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore, runner: ScriptedRunner
) -> None:
    await seed_fired(store.inner, hourly("supersede", "one"))
    options = opts(run_poll_interval=HOUR_S)
    async with open_scheduler(store, runner, options=options, clock=sim.clock) as scheduler:
        await sim.tick(scheduler, H)
        assert runner.keys == [key("hourly", H)]
        await sim.tick(scheduler, 2 * H)
    assert len(runner.starts) == 2
    assert runner.cancelled == ["run-1"]
    superseded = [r for r in store.results if r.outcome == "superseded"]
    assert [(r.occurrence, r.run_id) for r in superseded] == [(H, "run-1")]


# 5
async def test_05_restart_recovers_from_durable_cursor(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore, runner: ScriptedRunner
) -> None:
    await seed_fired(store.inner, hourly("skip", "one"))
    async with open_scheduler(store, runner, clock=sim.clock) as a:
        await sim.tick(a, H)
    runner.stop_all()
    async with open_scheduler(store, runner, clock=sim.clock) as b:
        await sim.tick(b, 3 * H)
    completed = [r for r in store.results if r.outcome == "completed"]
    assert [(r.occurrence, r.run_id) for r in completed] == [(H, "run-1")]
    assert runner.keys == [key("hourly", H), key("hourly", 3 * H)]


# 6
async def test_06_two_schedulers_one_winner(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore, runner: ScriptedRunner
) -> None:
    await seed_fired(store.inner, hourly())
    async with (
        open_scheduler(store, runner, clock=sim.clock) as a,
        open_scheduler(store, runner, clock=sim.clock) as b,
    ):
        await sim.advance_to(H)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(a.run_once)
            nursery.start_soon(b.run_once)
        await trio.testing.wait_all_tasks_blocked()
    assert runner.keys == [key("hourly", H)]
    assert store.outcomes().count("launched") == 1


# 7
async def test_07_default_run_polling(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore, runner: ScriptedRunner
) -> None:
    await seed_fired(store.inner, hourly())
    async with open_scheduler(store, runner, clock=sim.clock) as scheduler:
        await sim.tick(scheduler, H)
        assert runner.inspected == ["run-1"]
        await sim.advance(14_000)
        await trio.testing.wait_all_tasks_blocked()
        assert runner.inspected == ["run-1"]
        await sim.advance(1_000)
        await trio.testing.wait_all_tasks_blocked()
        assert runner.inspected == ["run-1", "run-1"]


# 8
async def test_08_refused_launch_recorded_next_boundary_fires(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore, runner: ScriptedRunner
) -> None:
    runner.fail_starts = [TriggerError("store", "no capacity")]
    await seed_fired(store.inner, hourly())
    async with open_scheduler(store, runner, clock=sim.clock) as scheduler:
        await sim.tick(scheduler, H)
        await sim.tick(scheduler, 2 * H)
    assert len(runner.starts) == 2
    failed = [r for r in store.results if r.outcome == "failed"]
    assert [r.occurrence for r in failed] == [H]
    rows = await ledger(store.inner)
    assert rows[H][0] == "failed"
    assert is_reservation(rows[H][1])
    assert [r.occurrence for r in store.results if r.outcome == "launched"] == [2 * H]
    current = await store.inner.get("hourly")
    assert current is not None
    assert current.last_fired_at == 2 * H


# 9
async def test_09_cancelled_tick_claims_nothing(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore, runner: ScriptedRunner
) -> None:
    await seed_fired(store.inner, hourly())
    entered = trio.Event()
    release = trio.Event()

    async def block(*args: Any, **kwargs: Any) -> None:
        entered.set()
        await release.wait()

    store.before["claim_fire"] = block
    async with open_scheduler(store, runner, clock=sim.clock) as scheduler:
        await sim.advance_to(H)
        ended_by_cancel = False
        async with trio.open_nursery() as nursery:

            async def tick() -> None:
                nonlocal ended_by_cancel
                with trio.CancelScope() as scope:
                    cancel_scope.append(scope)
                    await scheduler.run_once()
                ended_by_cancel = scope.cancelled_caught

            cancel_scope: list[trio.CancelScope] = []
            nursery.start_soon(tick)
            await entered.wait()
            cancel_scope[0].cancel()
        release.set()
        del store.before["claim_fire"]
        await trio.testing.wait_all_tasks_blocked()
    assert ended_by_cancel
    assert runner.starts == []
    assert store.results == []


# 10
async def test_10_one_bad_trigger_does_not_silence_others(
    autojump_clock: MockClock,
    sim: Sim,
    store: RecordingStore,
    runner: ScriptedRunner,
    caplog: pytest.LogCaptureFixture,
) -> None:
    await store.inner.register(hourly("skip", "none", id="a-february-30"))
    await store.inner.register(hourly("skip", "none", id="b-hourly"))

    async def rewritten() -> list[Listed]:
        rows = await store.inner.list()
        out = []
        for row in rows:
            if row.trigger is not None and row.trigger_id == "a-february-30":
                row = msgspec.structs.replace(
                    row, trigger=msgspec.structs.replace(row.trigger, cron="0 0 30 2 *")
                )
            out.append(row)
        return out

    store.override["list"] = rewritten
    async with open_scheduler(store, runner, clock=sim.clock) as scheduler:
        await sim.tick(scheduler, int(1.5 * H))
        await sim.tick(scheduler, 2 * H)
    assert runner.keys == ["b-hourly:1970-01-01T02:00:00.000Z"]
    failures = [r for r in caplog.records if r.getMessage() == "A trigger tick failed"]
    assert failures
    assert all(r.trigger_id == "a-february-30" for r in failures)  # type: ignore[attr-defined]
    assert all(r.levelno == logging.ERROR and r.exc_info for r in failures)


# 11
async def test_11_supervisor_survives_crashed_tick(
    autojump_clock: MockClock,
    sim: Sim,
    store: RecordingStore,
    runner: ScriptedRunner,
    caplog: pytest.LogCaptureFixture,
) -> None:
    await store.inner.register(hourly("skip", "none"))
    store.fail["list"] = [RuntimeError("listing crashed")]
    await sim.advance_to(H - 90_000)
    options = opts(poll_interval=60)
    async with (
        open_scheduler(store, runner, options=options, clock=sim.clock) as scheduler,
        trio.open_nursery() as nursery,
    ):
        await nursery.start(scheduler.serve)
        await trio.sleep(120)
        nursery.cancel_scope.cancel()
    assert store.count("list") > 1
    assert runner.keys == ["hourly:1970-01-01T01:00:00.000Z"]
    crashed = [r for r in caplog.records if r.getMessage() == "A trigger scheduler tick failed"]
    assert len(crashed) == 1
    assert crashed[0].host == "local"  # type: ignore[attr-defined]


# 12
class Stop(BaseException):
    pass


async def test_12_supervisor_stops_on_cancellation(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore, runner: ScriptedRunner
) -> None:
    await store.inner.register(hourly("skip", "none"))
    store.fail["list"] = [Stop()]
    with pytest.raises(Stop):
        async with open_scheduler(store, runner, clock=sim.clock) as scheduler:
            await scheduler.serve()
    await trio.sleep(300)
    assert store.count("list") == 1


# 13
async def test_13_disabled_triggers_recover_but_never_claim(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore, runner: ScriptedRunner
) -> None:
    await seed(store.inner, hourly("skip", "none"), "launched", runner)
    await store.inner.register(hourly("skip", "none", enabled=False))
    async with open_scheduler(store, runner, clock=sim.clock) as scheduler:
        await sim.tick(scheduler, H)
        assert runner.inspected == ["seed"]
        assert runner.starts == []
        runner.stop("seed")
        await sim.tick(scheduler)
    assert await store.inner.active_run("hourly") is None
    assert runner.starts == []
    assert store.count("claim_fire") == 0
    assert store.count("claim_pending") == 0


# 14
async def test_14_idle_listed_row_costs_no_extra_reads(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore, runner: ScriptedRunner
) -> None:
    trigger = registered(hourly("skip", "one"), last_fired_at=0)
    store.override["list"] = const([listed(trigger)])
    store.override["active_run"] = raising(AssertionError("active_run must not be read"))
    store.override["claim_pending"] = raising(AssertionError("claim_pending must not be read"))
    store.override["claim_fire"] = claim_fire_answering_fire
    store.override["record_result"] = noop
    async with open_scheduler(store, runner, clock=sim.clock) as scheduler:
        await sim.tick(scheduler, H)
    assert runner.keys == ["hourly:1970-01-01T01:00:00.000Z"]
    assert store.count("active_run") == 0
    assert store.count("claim_pending") == 0


# 15
async def test_15_corrupt_row_is_isolated(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore, runner: ScriptedRunner
) -> None:
    healthy = registered(hourly(id="b-hourly"), last_fired_at=0)
    broken = Listed(
        trigger_id="a-corrupt",
        error=TriggerError("store", "could not decode trigger row a-corrupt"),
    )
    store.override["list"] = const([broken, listed(healthy)])
    store.override["claim_fire"] = claim_fire_answering_fire
    store.override["record_result"] = noop
    async with open_scheduler(store, runner, clock=sim.clock) as scheduler:
        await sim.tick(scheduler, H)
    assert runner.keys == ["b-hourly:1970-01-01T01:00:00.000Z"]


# 16
async def test_16_tick_uses_list(
    autojump_clock: MockClock, sim: Sim, caplog: pytest.LogCaptureFixture
) -> None:
    runner = ScriptedRunner()
    only_list = RecordingStore(UnavailableStore())
    only_list.override["list"] = const([])
    async with open_scheduler(only_list, runner, clock=sim.clock) as scheduler:
        await scheduler.run_once()
    beats = [r for r in caplog.records if r.getMessage() == "A trigger heartbeat failed"]
    assert len(beats) == 1
    assert beats[0].levelno == logging.WARNING

    only_enabled = RecordingStore(UnavailableStore())
    only_enabled.override["list_enabled"] = const([])
    async with open_scheduler(only_enabled, runner, clock=sim.clock) as scheduler:
        with pytest.raises(TriggerError) as info:
            await scheduler.run_once()
    assert (info.value.code, info.value.message) == ("store", "list is unavailable")


# 17
async def test_17_launched_and_recovered_runs_are_kept_locally(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore, runner: ScriptedRunner
) -> None:
    await seed_fired(store.inner, hourly())
    options = opts(run_poll_interval=HOUR_S)
    async with open_scheduler(store, runner, options=options, clock=sim.clock) as scheduler:
        await sim.tick(scheduler, H)
        before = len(store.calls)
        await sim.tick(scheduler)
        second = [name for name, _, _ in store.calls[before:]]
    assert "active_run" not in second
    assert "active_occurrence" not in second
    assert len(runner.starts) == 1
    assert runner.inspected == ["run-1"]


async def test_17b_recovered_run_is_kept_locally(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore, runner: ScriptedRunner
) -> None:
    await seed(store.inner, hourly(), "launched", runner)
    async with open_scheduler(store, runner, clock=sim.clock) as scheduler:
        await sim.tick(scheduler)
        first = store.names("active_run", "active_occurrence")
        before = len(store.calls)
        await sim.tick(scheduler)
        second = [n for n, _, _ in store.calls[before:] if n in ("active_run", "active_occurrence")]
    assert first == ["active_run", "active_occurrence"]
    assert second == []
    assert runner.starts == []
    assert runner.inspected == ["seed", "seed"]


# 18
@pytest.mark.parametrize(
    ("state", "error"),
    [
        ("failed", "Run run-1 failed"),
        ("cancelled", "Run run-1 was cancelled"),
        ("missing", "Run run-1 is unknown to the runner"),
    ],
)
async def test_18_stopped_run_mapping(
    autojump_clock: MockClock,
    sim: Sim,
    store: RecordingStore,
    runner: ScriptedRunner,
    state: Any,
    error: str,
) -> None:
    await store.inner.register(hourly("skip", "one"))
    async with open_scheduler(
        store, runner, options=opts(run_poll_interval=60), clock=sim.clock
    ) as scheduler:
        await sim.tick(scheduler, H)
        await sim.tick(scheduler, 2 * H)
        runner.stop("run-1", state)
        await sim.advance(MIN)
        await trio.testing.wait_all_tasks_blocked()
    assert store.outcomes() == ["launched", "failed"]
    failed = store.results[1]
    assert (failed.run_id, failed.error, failed.occurrence) == ("run-1", error, 2 * H)


# 19
async def test_19_recovered_failed_run(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore, runner: ScriptedRunner
) -> None:
    await seed(store.inner, hourly("skip", "none"), "launched", runner)
    runner.stop("seed", "failed")
    async with open_scheduler(store, runner, clock=sim.clock) as scheduler:
        await sim.tick(scheduler, 30 * MIN)
    assert store.results == [
        Result(
            trigger_id="hourly",
            occurrence=0,
            outcome="failed",
            run_id="seed",
            error="Run seed failed",
        )
    ]


# 20
async def test_20_finished_before_first_poll(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore, runner: ScriptedRunner
) -> None:
    await seed_fired(store.inner, hourly("skip", "one"))
    runner.finish_at_once = True
    async with open_scheduler(store, runner, clock=sim.clock) as scheduler:
        await sim.tick(scheduler, H)
    assert store.outcomes() == ["launched", "completed"]
    assert (store.results[1].run_id, store.results[1].occurrence) == ("run-1", H)


# 21
async def test_21_claim_lost_to_another_worker(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore, runner: ScriptedRunner
) -> None:
    await seed_fired(store.inner, hourly())
    store.override["claim_fire"] = const(Claim(claimed=False))
    async with open_scheduler(store, runner, clock=sim.clock) as scheduler:
        await sim.tick(scheduler, H)
    assert store.count("claim_fire") == 1
    assert runner.starts == []


def listed_supersede_all(store: RecordingStore) -> None:
    trigger = registered(hourly("supersede", "all"), last_fired_at=0)
    store.override["list"] = const([listed(trigger)])
    store.override["claim_fire"] = claim_fire_answering_fire
    store.override["record_result"] = noop


# 22
async def test_22_backlog_in_order(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore, runner: ScriptedRunner
) -> None:
    listed_supersede_all(store)
    async with open_scheduler(store, runner, clock=sim.clock) as scheduler:
        await sim.tick(scheduler, H)
        await sim.tick(scheduler, 4 * H)
    assert runner.keys == [key("hourly", n * H) for n in (1, 2, 3, 4)]


# 23
async def test_23_watermark_stops_at_a_failure(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore, runner: ScriptedRunner
) -> None:
    listed_supersede_all(store)
    failed_once = False

    async def fail_3h(trigger_id: str, occurrence: int, **kwargs: Any) -> None:
        nonlocal failed_once
        await trio.lowlevel.checkpoint()
        if occurrence == 3 * H and not failed_once:
            failed_once = True
            raise store_error()

    store.before["claim_fire"] = fail_3h
    async with open_scheduler(store, runner, clock=sim.clock) as scheduler:
        await sim.tick(scheduler, 3 * H)
        await sim.tick(scheduler, 3 * H)
    assert store.claim_occurrences() == [H, 2 * H, 3 * H, 3 * H]


# 24
async def test_24_non_bound_catch_up_failure(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore, runner: ScriptedRunner
) -> None:
    trigger = registered(hourly("skip", "all", 0), last_fired_at=0)
    trigger = msgspec.structs.replace(trigger, max_catch_up=MAX_SAFE_INTEGER)
    store.override["list"] = const([listed(trigger)])
    store.override["claim_fire"] = claim_fire_answering_fire
    async with open_scheduler(store, runner, clock=sim.clock) as scheduler:
        await sim.tick(scheduler, H)
    assert runner.starts == []
    assert store.results == []
    assert store.count("claim_fire") == 0


# 25
async def test_25_skip_while_own_launch_runs(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore, runner: ScriptedRunner
) -> None:
    await seed_fired(store.inner, hourly())
    options = opts(run_poll_interval=HOUR_S)
    async with open_scheduler(store, runner, options=options, clock=sim.clock) as scheduler:
        await sim.tick(scheduler, H)
        await sim.tick(scheduler, 2 * H)
    assert len(runner.starts) == 1
    assert store.outcomes().count("skipped") == 1


# 26
@pytest.mark.parametrize("live", [True, False])
async def test_26_foreign_stored_run(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore, runner: ScriptedRunner, live: bool
) -> None:
    trigger = registered(hourly())
    store.override["list"] = const([listed(trigger, Held(active_run_id="foreign-run"))])
    store.override["active_run"] = const("foreign-run")
    store.override["active_occurrence"] = const(None)
    store.override["clear_active"] = noop
    store.override["claim_pending"] = const(None)
    store.override["claim_fire"] = claim_fire_answering_fire
    if live:
        runner.active.add("foreign-run")
    async with open_scheduler(store, runner, clock=sim.clock) as scheduler:
        await sim.tick(scheduler, H)
    assert runner.inspected == ["foreign-run"]
    assert runner.starts == []
    assert store.count("clear_active") == (0 if live else 1)
    assert store.results == []


# 27
@pytest.mark.parametrize("concurrency", [4, 1])
async def test_27_slow_launch_does_not_hold_others(
    autojump_clock: MockClock,
    sim: Sim,
    store: RecordingStore,
    runner: ScriptedRunner,
    concurrency: int,
) -> None:
    await seed(store.inner, hourly(id="a"), "completed")
    await seed(store.inner, hourly(id="z"), "completed")
    runner.record_start_first = False

    async def slow_a(request: Any) -> None:
        if request.idempotency_key.startswith("a:"):
            await trio.sleep(120)

    runner.start_hook = slow_a
    options = opts(concurrency=concurrency)
    async with open_scheduler(store, runner, options=options, clock=sim.clock) as scheduler:
        await sim.tick(scheduler, H)
        assert runner.keys == ["z:1970-01-01T01:00:00.000Z"]
        await sim.advance(2 * MIN)
        await trio.testing.wait_all_tasks_blocked()
    assert runner.keys == ["z:1970-01-01T01:00:00.000Z", "a:1970-01-01T01:00:00.000Z"]


# 28
async def test_28_parked_launch_does_not_block_other_trigger(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore, runner: ScriptedRunner
) -> None:
    await seed(store.inner, hourly(id="a"), "completed")
    await seed(store.inner, hourly("skip", "none", id="b", cron="* * * * *"), "completed")
    counter = 0

    async def hook(request: Any) -> str | None:
        nonlocal counter
        if request.idempotency_key.startswith("a:"):
            await trio.sleep_forever()
        counter += 1
        return f"b-run-{counter}"  # never active: finishes at once

    runner.start_hook = hook
    async with open_scheduler(store, runner, clock=sim.clock) as scheduler:
        for at in (H, H + 30_000, H + MIN, H + 2 * MIN):
            await sim.tick(scheduler, at)
    b_keys = [k for k in runner.keys if k.startswith("b:")]
    assert b_keys == [key("b", H), key("b", H + MIN), key("b", H + 2 * MIN)]


# 29
async def test_29_delayed_losing_launch_across_two_hosts(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore, runner: ScriptedRunner
) -> None:
    await seed_fired(store.inner, hourly("supersede", "one", cron="* * * * *"))
    release = trio.Event()
    runner.record_start_first = False

    async def hook(request: Any) -> str | None:
        if request.idempotency_key == key("hourly", 60_000):
            await release.wait()
            runner.active.add("old-run")
            return "old-run"
        return None

    runner.start_hook = hook
    async with (
        open_scheduler(store, runner, options=opts(host="a"), clock=sim.clock) as a,
        open_scheduler(store, runner, options=opts(host="b"), clock=sim.clock) as b,
    ):
        await sim.tick(a, 60_000)
        await sim.tick(b, 120_000)
        assert await store.inner.active_run("hourly") == "run-1"
        release.set()
        await trio.testing.wait_all_tasks_blocked()
        assert runner.cancelled == ["old-run"]
        assert runner.active == {"run-1"}
        assert await store.inner.active_run("hourly") == "run-1"
    rows = await ledger(store.inner)
    assert rows[60_000][0] == "superseded"


# 30
@pytest.mark.parametrize("committed", [True, False])
async def test_30_idempotent_run_adopted_by_newer_attempt(
    autojump_clock: MockClock,
    sim: Sim,
    store: RecordingStore,
    runner: ScriptedRunner,
    committed: bool,
) -> None:
    await seed_fired(store.inner, hourly())

    async def hook(request: Any) -> str:
        await trio.sleep((LEASE + 1) / 1000)
        claim = await store.inner.claim_fire("hourly", H, expected_revision=1)
        assert claim.action == "fire"
        assert claim.reservation_id is not None
        if committed:
            await store.inner.record_result(
                Result(
                    trigger_id="hourly",
                    occurrence=H,
                    outcome="launched",
                    run_id="shared-run",
                    reservation_id=claim.reservation_id,
                )
            )
        runner.active.add("shared-run")
        return "shared-run"

    runner.start_hook = hook
    options = opts(start_timeout=600)
    async with open_scheduler(store, runner, options=options, clock=sim.clock) as scheduler:
        await sim.tick(scheduler, H)
        await sim.advance(LEASE + 1)
        await trio.testing.wait_all_tasks_blocked()
    assert runner.cancelled == []
    holder = (await store.inner.inspect("hourly")).active_run_id
    if committed:
        assert holder == "shared-run"
    else:
        assert is_reservation(holder)
        assert reservation_occurrence(holder) == H


# 31
async def test_31_runner_refuses_before_accepting(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore, runner: ScriptedRunner
) -> None:
    await seed_fired(store.inner, hourly())
    runner.fail_starts = [TriggerError("stale_owner", "refused")]
    async with open_scheduler(store, runner, clock=sim.clock) as scheduler:
        await sim.tick(scheduler, H)
    assert (await newest(store.inner))[1] == "failed"
    assert await store.inner.inspect("hourly") == Held()
    assert runner.cancelled == []


async def buffered_at_h(store: RecordingStore, trigger: Any) -> str:
    """Buffer-one/none: claim 0, claim H (buffer), completed(0); answers R0."""
    await store.inner.register(trigger)
    first = await store.inner.claim_fire("hourly", 0, expected_revision=1)
    assert first.action == "fire"
    assert first.reservation_id is not None
    assert (await store.inner.claim_fire("hourly", H, expected_revision=1)).action == "buffer"
    await store.inner.record_result(Result(trigger_id="hourly", occurrence=0, outcome="completed"))
    return first.reservation_id


# 32
async def test_32_buffered_lease_survives_failed_compensation(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore, runner: ScriptedRunner
) -> None:
    await buffered_at_h(store, hourly("buffer-one", "none"))
    await sim.advance_to(H)
    store.override["set_pending"] = raising(store_error())
    store.override["restore_pending"] = raising(store_error())
    broken = ScriptedRunner()
    broken.fail_starts = [TriggerError("runner", "down")] * 10
    async with open_scheduler(store, broken, clock=sim.clock) as scheduler:
        await sim.tick(scheduler)
    held = await store.inner.inspect("hourly")
    assert is_reservation(held.active_run_id)
    assert held.pending_at is None
    await sim.advance(LEASE + 1)
    async with open_scheduler(store.inner, runner, clock=sim.clock) as healthy:
        await sim.tick(healthy)
    assert runner.keys == ["hourly:1970-01-01T01:00:00.000Z"]


# 33
async def test_33_failed_claim_is_retried(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore, runner: ScriptedRunner
) -> None:
    await seed_fired(store.inner, hourly())
    store.fail["claim_fire"] = [store_error()]
    async with open_scheduler(store, runner, clock=sim.clock) as scheduler:
        await sim.tick(scheduler, H)
        await sim.tick(scheduler, H)
    assert store.count("claim_fire") == 2
    assert runner.keys == [key("hourly", H)]


# 34
async def test_34_committed_buffered_work_is_rearmed(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore, runner: ScriptedRunner
) -> None:
    await sim.advance_to(H)
    await buffered_at_h(store, hourly("buffer-one", "none"))
    runner.fail_starts = [TriggerError("runner", "down")]
    async with open_scheduler(store, runner, clock=sim.clock) as scheduler:
        await sim.tick(scheduler)
        assert len(runner.starts) == 1
        await sim.tick(scheduler)
    assert runner.keys == [key("hourly", H), key("hourly", H)]


# 35
async def test_35_unpersisted_launch_is_rearmed(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore, runner: ScriptedRunner
) -> None:
    await seed_fired(store.inner, hourly())
    # ``launched`` is retried first (docs/scheduler.md, "A failed compensation is retried"):
    # the boundary is re-armed only once every attempt failed.
    store.fail["record_result"] = [store_error("write failed")] * LAUNCH_RECORD_ATTEMPTS
    async with open_scheduler(store, runner, clock=sim.clock) as scheduler:
        await sim.tick(scheduler, H)
        await trio.sleep(5)  # the retries' backoff, then the re-arm
        assert len(runner.starts) == 1
        await sim.tick(scheduler)
    assert runner.keys == [key("hourly", H), key("hourly", H)]


async def test_a_launch_record_that_fails_once_is_retried_not_rearmed(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore, runner: ScriptedRunner
) -> None:
    """Once the runner answered with a run id the run exists: re-arming the boundary would let
    a later refused start record ``failed`` beside it, so a write failing for a moment is
    retried and the run is the holder after one start."""
    await seed_fired(store.inner, hourly())
    store.fail["record_result"] = [store_error("write failed")]
    async with open_scheduler(store, runner, clock=sim.clock) as scheduler:
        await sim.tick(scheduler, H)
        await trio.sleep(5)  # the retry's backoff
        await sim.tick(scheduler)
    assert runner.keys == [key("hourly", H)]
    holder = (await store.inner.inspect("hourly")).active_run_id
    assert holder is not None
    assert not is_reservation(holder)


# 36
async def test_36_recovered_reservation_kept_then_launched_after_lease(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore, runner: ScriptedRunner
) -> None:
    await store.inner.register(hourly("skip", "none"))
    other = await store.inner.claim_fire("hourly", 0, expected_revision=1)
    async with open_scheduler(store, runner, clock=sim.clock) as scheduler:
        await sim.tick(scheduler)
        await sim.tick(scheduler)
        assert store.count("active_run") == 2
        assert (await store.inner.inspect("hourly")).active_run_id == other.reservation_id
        assert runner.starts == []
        assert runner.inspected == []
        await sim.advance(LEASE + 1)
        await sim.tick(scheduler)
    assert runner.keys == ["hourly:1970-01-01T00:00:00.000Z"]
    assert await store.inner.active_run("hourly") == "run-1"


# 37
async def test_37_claimed_buffer_rearmed_after_lease(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore, runner: ScriptedRunner
) -> None:
    await store.inner.register(hourly("buffer-one", "none"))
    first = await store.inner.claim_fire("hourly", 0, expected_revision=1)
    await store.inner.record_result(
        Result(
            trigger_id="hourly",
            occurrence=0,
            outcome="launched",
            run_id="prior-run",
            reservation_id=first.reservation_id,
        )
    )
    assert (await store.inner.claim_fire("hourly", H, expected_revision=1)).action == "buffer"
    await store.inner.record_result(
        Result(trigger_id="hourly", occurrence=0, outcome="completed", run_id="prior-run")
    )
    pending = await store.inner.claim_pending("hourly", expected_revision=1)
    assert pending is not None
    assert pending.claim.action == "fire"
    async with open_scheduler(store, runner, clock=sim.clock) as scheduler:
        await sim.tick(scheduler)
        assert runner.starts == []
        await sim.advance(LEASE + 1)
        await sim.tick(scheduler)
    assert runner.keys == [key("hourly", H)]


# 38
async def test_38_leaving_the_block_detaches(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore, runner: ScriptedRunner
) -> None:
    await seed_fired(store.inner, hourly())
    async with open_scheduler(store, runner, clock=sim.clock) as scheduler:
        await sim.tick(scheduler, H)
        writes = len(store.calls)
    await trio.testing.wait_all_tasks_blocked()
    assert runner.cancelled == []
    assert "run-1" in runner.active
    assert len(store.calls) == writes
    with pytest.raises(RuntimeError):
        await scheduler.run_once()


# 39
@pytest.mark.parametrize("failures", [1, 4])
async def test_39_live_run_kept_through_inspection_failures(
    autojump_clock: MockClock,
    sim: Sim,
    store: RecordingStore,
    runner: ScriptedRunner,
    failures: int,
) -> None:
    await seed_fired(store.inner, hourly())
    runner.fail_inspects = [TriggerError("runner", "inspect down")] * failures
    async with open_scheduler(
        store, runner, options=opts(run_poll_interval=1), clock=sim.clock
    ) as scheduler:
        await sim.tick(scheduler, H)
        assert await store.inner.active_run("hourly") == "run-1"
        assert (await newest(store.inner))[1] == "launched"
        if failures == 1:
            return
        for pause in (1_000, 2_000, 4_000):
            await sim.advance(pause)
            await trio.testing.wait_all_tasks_blocked()
        assert len(runner.inspected) == 4
        await sim.advance(MIN)
        await trio.testing.wait_all_tasks_blocked()
        assert len(runner.inspected) == 4
        assert await store.inner.active_run("hourly") == "run-1"
        await sim.tick(scheduler)
        assert len(runner.inspected) == 5
        await sim.tick(scheduler, 2 * H)
        assert len(runner.starts) == 1
        assert (await newest(store.inner))[1] == "skipped"
        runner.stop("run-1")
        await sim.advance(1_000)
        await sim.tick(scheduler)
    assert await store.inner.active_run("hourly") is None
    assert (await ledger(store.inner))[H] == ("completed", "run-1")
    assert runner.cancelled == []


# 40
@pytest.mark.parametrize("error", [store_error("write failed"), RuntimeError("defect")])
async def test_40_lost_completion_write_recovered_next_tick(
    autojump_clock: MockClock,
    sim: Sim,
    store: RecordingStore,
    runner: ScriptedRunner,
    error: Exception,
) -> None:
    await seed_fired(store.inner, hourly())
    runner.finish_at_once = True
    failed = False

    async def fail_first_completed(result: Result) -> None:
        nonlocal failed
        if result.outcome == "completed" and not failed:
            failed = True
            raise error

    store.before["record_result"] = fail_first_completed
    async with open_scheduler(store, runner, clock=sim.clock) as scheduler:
        await sim.tick(scheduler, H)
        assert await store.inner.active_run("hourly") == "run-1"
        assert (await newest(store.inner))[1] == "launched"
        await sim.tick(scheduler)
    assert await store.inner.active_run("hourly") is None
    assert (await newest(store.inner))[1] == "completed"
    assert store.outcomes() == ["launched", "completed", "completed"]
    assert len(runner.starts) == 1


# 41
async def test_41_inspection_defects_back_off(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore, runner: ScriptedRunner
) -> None:
    await seed_fired(store.inner, hourly())

    async def start_run_2(request: Any) -> str:
        runner.active.add("run-2")
        return "run-2"

    async def defect(run_id: str) -> None:
        if run_id == "run-2":
            raise RuntimeError("inspection defect")

    runner.start_hook = start_run_2
    runner.inspect_hook = defect
    options = opts(run_poll_interval=HOUR_S)
    async with open_scheduler(store, runner, options=options, clock=sim.clock) as scheduler:
        await sim.tick(scheduler, H)
        assert runner.inspected.count("run-2") == 1
        for expected in (2, 3, 4):
            await sim.advance(59_000)
            await trio.testing.wait_all_tasks_blocked()
            assert runner.inspected.count("run-2") == expected - 1
            await sim.advance(1_000)
            await trio.testing.wait_all_tasks_blocked()
            assert runner.inspected.count("run-2") == expected
        await sim.advance(MIN)
        await trio.testing.wait_all_tasks_blocked()
        assert runner.inspected.count("run-2") == 4
    assert await store.inner.active_run("hourly") == "run-2"
    assert runner.cancelled == []


# 42
async def test_42_start_never_answers(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore, runner: ScriptedRunner
) -> None:
    await seed(store.inner, hourly(), "completed")
    hung = False

    async def hang_first(request: Any) -> None:
        nonlocal hung
        if not hung:
            hung = True
            await trio.sleep_forever()

    runner.start_hook = hang_first
    async with open_scheduler(
        store, runner, options=opts(start_timeout=60), clock=sim.clock
    ) as scheduler:
        await sim.tick(scheduler, H)
        await sim.advance(MIN)
        await trio.testing.wait_all_tasks_blocked()
        assert await store.inner.active_run("hourly") is None
        assert (await store.inner.inspect("hourly")).pending_at == H
        assert "failed" not in store.outcomes()
        await sim.tick(scheduler)
    assert runner.keys == [key("hourly", H), key("hourly", H)]
    assert await store.inner.active_run("hourly") == "run-2"
    assert (await ledger(store.inner))[H] == ("launched", "run-2")


# 43
async def test_43_inspection_never_answers(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore, runner: ScriptedRunner
) -> None:
    await seed(store.inner, hourly(), "completed")
    runner.inspect_hook = const_forever
    options = opts(run_poll_interval=1, inspect_timeout=10)
    async with open_scheduler(store, runner, options=options, clock=sim.clock) as scheduler:
        await sim.tick(scheduler, H)
        await sim.advance(MIN)
        await trio.testing.wait_all_tasks_blocked()
        assert len(runner.inspected) == 4
    assert await store.inner.active_run("hourly") == "run-1"


async def const_forever(*args: Any) -> None:
    await trio.sleep_forever()


# 44
async def test_44_cancellation_never_answers(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore, runner: ScriptedRunner
) -> None:
    await seed(store.inner, hourly("supersede"), "launched", runner)
    runner.cancel_hook = const_forever
    options = opts(cancel_timeout=10)
    async with open_scheduler(store, runner, options=options, clock=sim.clock) as scheduler:
        await sim.advance_to(H)
        started = trio.current_time()
        await scheduler.run_once()
        assert trio.current_time() - started == pytest.approx(10)
    held = await store.inner.inspect("hourly")
    assert held == Held(active_run_id="seed", pending_at=H)
    assert await store.inner.active_run("hourly") == "seed"
    assert runner.starts == []


# 45
async def test_45_cancel_failure_restores_predecessor(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore, runner: ScriptedRunner
) -> None:
    await store.inner.register(hourly("supersede", "one"))
    claim = await store.inner.claim_fire("hourly", 0, expected_revision=1)
    await store.inner.record_result(
        Result(
            trigger_id="hourly",
            occurrence=0,
            outcome="launched",
            run_id="prior-run",
            reservation_id=claim.reservation_id,
        )
    )
    runner.active.add("prior-run")
    runner.fail_cancels = [TriggerError("runner", "cannot cancel")]
    async with open_scheduler(store, runner, clock=sim.clock) as scheduler:
        await sim.tick(scheduler, H)
    assert await store.inner.active_run("hourly") == "prior-run"
    assert (await store.inner.inspect("hourly")).pending_at == H
    assert runner.starts == []


# 46
async def test_46_monitor_stays_until_superseded_is_durable(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore, runner: ScriptedRunner
) -> None:
    await seed_fired(store.inner, hourly("supersede", "one"))
    failed = False

    async def fail_first_superseded(result: Result) -> None:
        nonlocal failed
        if result.outcome == "superseded" and not failed:
            failed = True
            raise store_error("write failed")

    store.before["record_result"] = fail_first_superseded
    options = opts(run_poll_interval=HOUR_S)
    async with open_scheduler(store, runner, options=options, clock=sim.clock) as scheduler:
        await sim.tick(scheduler, H)
        await sim.tick(scheduler, 2 * H)
        assert len(runner.starts) == 1
        await sim.advance(H)
        await trio.testing.wait_all_tasks_blocked()
    assert await store.inner.active_occurrence("hourly", "run-1") is None


# 47
async def test_47_dead_supersede_claimant(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore, runner: ScriptedRunner
) -> None:
    await store.inner.register(hourly("supersede", "one"))
    claim = await store.inner.claim_fire("hourly", 0, expected_revision=1)
    await store.inner.record_result(
        Result(
            trigger_id="hourly",
            occurrence=0,
            outcome="launched",
            run_id="prior-run",
            reservation_id=claim.reservation_id,
        )
    )
    runner.active.add("prior-run")
    assert (await store.inner.claim_fire("hourly", H, expected_revision=1)).action == "supersede"
    await sim.advance(LEASE + 1)
    async with open_scheduler(store, runner, clock=sim.clock) as scheduler:
        await sim.tick(scheduler)
    assert runner.cancelled == ["prior-run"]
    assert runner.keys == ["hourly:1970-01-01T01:00:00.000Z"]


# 48
async def test_48_foreign_run_superseded(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore, runner: ScriptedRunner
) -> None:
    trigger = registered(hourly("supersede", "one"))
    store.override["list"] = const([listed(trigger)])
    store.override["active_occurrence"] = const(None)
    store.override["record_result"] = noop

    async def supersede(trigger_id: str, occurrence: int, **kwargs: Any) -> Claim:
        await trio.lowlevel.checkpoint()
        return Claim(
            claimed=True,
            action="supersede",
            reservation_id=reservation_id("hourly", occurrence, "x"),
            active_run_id="foreign-run",
        )

    store.override["claim_fire"] = supersede
    async with open_scheduler(store, runner, clock=sim.clock) as scheduler:
        await sim.tick(scheduler, H)
        await sim.tick(scheduler, 2 * H)
    assert runner.cancelled == ["foreign-run"]
    assert len(runner.starts) == 1
    assert store.outcomes() == ["launched"]


# 49
@pytest.mark.parametrize("displaced", [None, reservation_id("hourly", 0)])
async def test_49_supersede_naming_nothing_or_a_reservation(
    autojump_clock: MockClock,
    sim: Sim,
    store: RecordingStore,
    runner: ScriptedRunner,
    displaced: str | None,
) -> None:
    trigger = registered(hourly("supersede", "one"), last_fired_at=0)
    store.override["list"] = const([listed(trigger)])
    store.override["record_result"] = noop
    store.override["claim_fire"] = const(
        Claim(
            claimed=True,
            action="supersede",
            reservation_id=reservation_id("hourly", H, "x"),
            active_run_id=displaced,
        )
    )
    runner.active.add(reservation_id("hourly", 0))  # the runner "knows" that string
    async with open_scheduler(store, runner, clock=sim.clock) as scheduler:
        await sim.tick(scheduler, H)
    assert runner.cancelled == []
    assert len(runner.starts) == 1


def listed_with_pending(store: RecordingStore, overlap: str) -> None:
    trigger = registered(hourly(overlap, "none"), last_fired_at=0)
    store.override["list"] = const([listed(trigger, Held(pending_at=0))])
    store.override["record_result"] = noop
    store.override["restore_pending"] = noop
    store.override["set_pending"] = noop
    store.override["active_occurrence"] = const(None)


# 50
async def test_50_failed_pending_supersede_is_rearmed(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore, runner: ScriptedRunner
) -> None:
    listed_with_pending(store, "supersede")
    answers = [
        PendingClaim(
            occurrence=0,
            claim=Claim(
                claimed=True,
                action="supersede",
                reservation_id=reservation_id("hourly", 0, "a"),
                active_run_id="foreign-run",
            ),
        ),
        PendingClaim(
            occurrence=0,
            claim=Claim(
                claimed=True, action="fire", reservation_id=reservation_id("hourly", 0, "b")
            ),
        ),
    ]

    async def claim_pending(*args: Any, **kwargs: Any) -> PendingClaim:
        await trio.lowlevel.checkpoint()
        return answers.pop(0)

    store.override["claim_pending"] = claim_pending
    runner.fail_cancels = [TriggerError("runner", "cannot cancel")]
    async with open_scheduler(store, runner, clock=sim.clock) as scheduler:
        await sim.tick(scheduler)
        await sim.tick(scheduler)
    assert store.count("claim_pending") == 2
    assert store.count("restore_pending") == 1
    assert len(runner.starts) == 1


# 51
async def test_51_refused_then_failing_buffered_decision(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore, runner: ScriptedRunner
) -> None:
    listed_with_pending(store, "buffer-one")
    answers = [
        PendingClaim(occurrence=0, claim=Claim(claimed=False)),
        PendingClaim(occurrence=0, claim=Claim(claimed=True, action="buffer")),
    ]

    async def claim_pending(*args: Any, **kwargs: Any) -> PendingClaim:
        await trio.lowlevel.checkpoint()
        return answers.pop(0)

    store.override["claim_pending"] = claim_pending
    store.override["record_result"] = raising(store_error("write failed"))
    async with open_scheduler(store, runner, clock=sim.clock) as scheduler:
        await sim.tick(scheduler)
        await sim.tick(scheduler)
    assert store.count("claim_pending") == 2
    assert store.count("set_pending") == 1
    assert runner.starts == []


def mismatch(actual: int, expected: int) -> TriggerError:
    return TriggerError(
        "revision_mismatch", f"trigger hourly is at revision {actual}, not the claimed {expected}"
    )


# 52
async def test_52_refresh_once(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore, runner: ScriptedRunner
) -> None:
    trigger = registered(hourly(), last_fired_at=0)
    store.override["list"] = const([listed(trigger)])
    store.override["get"] = const(registered(hourly(), revision=2, last_fired_at=0))
    store.override["record_result"] = noop
    store.override["active_run"] = const(None)  # the refreshed pass has no listed held state
    store.override["claim_pending"] = const(None)

    async def claim(
        trigger_id: str, occurrence: int, *, expected_revision: int, **kw: Any
    ) -> Claim:
        await trio.lowlevel.checkpoint()
        if expected_revision != 2:
            raise mismatch(2, expected_revision)
        return Claim(
            claimed=True, action="fire", reservation_id=reservation_id("hourly", occurrence, "x")
        )

    store.override["claim_fire"] = claim
    async with open_scheduler(store, runner, clock=sim.clock) as scheduler:
        await sim.tick(scheduler, H)
    assert store.claim_revisions() == [1, 2]
    assert len(runner.starts) == 1


async def test_52b_store_failure_does_not_refresh(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore, runner: ScriptedRunner
) -> None:
    trigger = registered(hourly(), last_fired_at=0)
    store.override["list"] = const([listed(trigger)])
    store.override["get"] = const(registered(hourly(), revision=2, last_fired_at=0))
    store.override["claim_fire"] = raising(store_error())
    async with open_scheduler(store, runner, clock=sim.clock) as scheduler:
        await sim.tick(scheduler, H)
    assert store.count("claim_fire") == 1
    assert store.count("get") == 0
    assert runner.starts == []


# 53
@pytest.mark.parametrize(("fresh", "revisions"), [(None, [1]), (1, [1]), (2, [1, 2])])
async def test_53_pending_refresh(
    autojump_clock: MockClock,
    sim: Sim,
    store: RecordingStore,
    runner: ScriptedRunner,
    fresh: int | None,
    revisions: list[int],
) -> None:
    trigger = registered(hourly(), last_fired_at=H)
    store.override["list"] = const([listed(trigger, Held(pending_at=1))])
    store.override["get"] = const(
        None if fresh is None else registered(hourly(), revision=fresh, last_fired_at=H)
    )

    async def claim_pending(trigger_id: str, *, expected_revision: int) -> None:
        await trio.lowlevel.checkpoint()
        if expected_revision != 2:
            raise mismatch(2, expected_revision)

    store.override["claim_pending"] = claim_pending
    store.override["claim_fire"] = claim_fire_answering_fire
    async with open_scheduler(store, runner, clock=sim.clock) as scheduler:
        await sim.tick(scheduler, H)
    assert store.claim_revisions("claim_pending") == revisions
    assert runner.starts == []


# 54
@pytest.mark.parametrize(
    ("fresh", "revisions", "gets"),
    [(2, [1, 1, 2], 1), (1, [1, 1], 1), (None, [1, 1], 1)],
)
async def test_54_second_mismatch_stops(
    autojump_clock: MockClock,
    sim: Sim,
    store: RecordingStore,
    runner: ScriptedRunner,
    fresh: int | None,
    revisions: list[int],
    gets: int,
) -> None:
    every_minute = hourly("skip", "all", 3, cron="* * * * *")
    store.override["list"] = const([listed(registered(every_minute, last_fired_at=H - 3 * MIN))])
    store.override["get"] = const(
        None
        if fresh is None
        else registered(every_minute, revision=fresh, last_fired_at=H - 3 * MIN)
    )
    store.override["active_run"] = const(None)
    store.override["claim_pending"] = const(None)
    calls = 0

    async def claim(
        trigger_id: str, occurrence: int, *, expected_revision: int, **kw: Any
    ) -> Claim:
        nonlocal calls
        await trio.lowlevel.checkpoint()
        calls += 1
        if calls == 1:
            return Claim(claimed=False)
        raise mismatch(2, expected_revision)

    store.override["claim_fire"] = claim
    async with open_scheduler(store, runner, clock=sim.clock) as scheduler:
        await sim.tick(scheduler, H)
    # The contract's text says "claims [1]" for the second variant; the algorithm of §12.6
    # claims twice at revision 1 before the re-read (the first claim is "not claimed").
    assert store.claim_revisions() == revisions
    assert store.count("get") == gets
    assert runner.starts == []


# 55
async def test_55_recompute_from_edited_cron(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore, runner: ScriptedRunner
) -> None:
    await seed(store.inner, hourly("skip", "one", id="edited"), "completed")
    edited = False

    async def reregister(*args: Any, **kwargs: Any) -> None:
        nonlocal edited
        if not edited:
            edited = True
            await store.inner.register(hourly("skip", "one", id="edited", cron="0 12 * * *"))

    store.before["claim_fire"] = reregister
    async with open_scheduler(store, runner, clock=sim.clock) as scheduler:
        await sim.tick(scheduler, H)
        await sim.tick(scheduler, 12 * H)
    assert store.claim_revisions() == [1, 2]
    assert runner.keys == ["edited:1970-01-01T12:00:00.000Z"]


# 56
async def test_56_pruning_cadence(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore, runner: ScriptedRunner
) -> None:
    day = 24 * H
    await seed(store.inner, hourly("skip", "none"), "completed")
    options = opts(fire_retention=86400)
    async with open_scheduler(store, runner, options=options, clock=sim.clock) as scheduler:
        for at in (2 * day, 2 * day + 30 * MIN, 2 * day + H):
            await sim.tick(scheduler, at)
    assert store.args_of("prune_fires") == [(day,), (day + H,)]
    assert 0 not in await ledger(store.inner)


# 57
async def test_57_heartbeat(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore, runner: ScriptedRunner
) -> None:
    assert await store.inner.last_heartbeat() is None
    async with open_scheduler(
        store, runner, options=opts(host="box-1"), clock=sim.clock
    ) as scheduler:
        await sim.tick(scheduler)
        beat = await store.inner.last_heartbeat()
        assert beat is not None
        assert (beat.host, beat.ticked_at) == ("box-1", 0)
        await sim.tick(scheduler, H)
        beat = await store.inner.last_heartbeat()
        assert beat is not None
        assert (beat.host, beat.ticked_at) == ("box-1", H)
    async with open_scheduler(store, runner, clock=sim.clock) as scheduler:
        await sim.tick(scheduler, 2 * H)
    beat = await store.inner.last_heartbeat()
    assert beat is not None
    assert (beat.host, beat.ticked_at) == ("local", 2 * H)


# 58
async def test_58_metrics_and_spans(
    autojump_clock: MockClock,
    sim: Sim,
    store: RecordingStore,
    runner: ScriptedRunner,
    recorder: Any,
) -> None:
    await store.inner.register(hourly("skip", "one"))
    async with open_scheduler(store, runner, clock=sim.clock) as scheduler:
        for at in (H, 2 * H, 3 * H):
            await sim.tick(scheduler, at)
    assert recorder.counter_total("trio_triggers.fires", outcome="launched") == 1
    assert recorder.counter_total("trio_triggers.fires", outcome="skipped") == 1
    assert len(recorder.histogram_samples("trio_triggers.tick_duration_ms")) == 3
    assert len(recorder.histogram_samples("trio_triggers.launch_duration_ms")) == 1
    ticks = recorder.spans_named("Scheduler.run_once")
    assert len(ticks) == 3
    assert all(s.attributes == {"host": "local"} for s in ticks)
    launches = recorder.spans_named("Scheduler.launch")
    assert len(launches) >= 1
    assert launches[0].attributes == {
        "trigger_id": "hourly",
        "occurrence": "1970-01-01T02:00:00.000Z",
    }
    processed = recorder.spans_named("Scheduler.process_trigger")
    assert processed
    assert all(s.attributes == {"trigger_id": "hourly"} for s in processed)


# 60
async def test_60_settle_the_active_occurrence_not_the_cursor(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore, runner: ScriptedRunner
) -> None:
    await store.inner.register(hourly("skip", "none"))
    claim = await store.inner.claim_fire("hourly", H, expected_revision=1)
    await store.inner.record_result(
        Result(
            trigger_id="hourly",
            occurrence=H,
            outcome="launched",
            run_id="settled-run",
            reservation_id=claim.reservation_id,
        )
    )
    async with open_scheduler(store, runner, clock=sim.clock) as scheduler:
        await sim.tick(scheduler, H)
    assert (await ledger(store.inner))[H] == ("completed", "settled-run")


async def test_60b_with_a_skipped_later_claim(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore, runner: ScriptedRunner
) -> None:
    await store.inner.register(hourly("skip", "none"))
    claim = await store.inner.claim_fire("hourly", H, expected_revision=1)
    await store.inner.record_result(
        Result(
            trigger_id="hourly",
            occurrence=H,
            outcome="launched",
            run_id="settled-run",
            reservation_id=claim.reservation_id,
        )
    )
    assert (await store.inner.claim_fire("hourly", 2 * H, expected_revision=1)).action == "skip"
    async with open_scheduler(store, runner, clock=sim.clock) as scheduler:
        await sim.tick(scheduler, 2 * H)
    rows = await ledger(store.inner)
    assert rows[H][0] == "completed"
    assert rows[2 * H][0] == "skipped"


# 61
@pytest.mark.parametrize("live", [True, False])
async def test_61_cached_reservation_is_refreshed(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore, runner: ScriptedRunner, live: bool
) -> None:
    trigger = registered(hourly(), last_fired_at=0)
    store.override["list"] = const([listed(trigger, Held(active_run_id="something"))])
    answers = [reservation_id("hourly", 0)]

    async def active_run(trigger_id: str) -> str:
        await trio.lowlevel.checkpoint()
        return answers.pop(0) if answers else "committed-run"

    store.override["active_run"] = active_run
    store.override["active_occurrence"] = const(0)
    store.override["record_result"] = noop
    store.override["claim_pending"] = const(None)
    if live:
        runner.active.add("committed-run")
    async with open_scheduler(store, runner, clock=sim.clock) as scheduler:
        for _ in range(3 if live else 2):
            await sim.tick(scheduler)
    if live:
        assert runner.inspected == ["committed-run", "committed-run"]
        assert store.results == []
    else:
        assert runner.inspected == ["committed-run"]
        assert [(r.outcome, r.occurrence, r.run_id) for r in store.results] == [
            ("completed", 0, "committed-run")
        ]


# §13.5 under a scheduler
async def test_control_conflict_on_cancel_keeps_the_seed(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore
) -> None:
    from trio_triggers._scheduler import Accepted, Conflict, ControlRunner, Plan, RunInfo

    class Control:
        def __init__(self) -> None:
            self.runs: list[Any] = []

        async def plan(self, request: Any) -> Plan:
            self.runs.append(request)
            return Plan("p", "d", None)

        async def run(self, request: Any) -> Any:
            return Accepted("new-run")

        async def list_runs(self, *, run_id: str, limit: int) -> list[RunInfo]:
            return [RunInfo(run_id, "running")]

        async def cancel(self, request: Any) -> Any:
            return Conflict("not now")

    control = Control()
    await seed(store.inner, hourly("supersede", "one"), "launched")
    async with open_scheduler(store, ControlRunner(control), clock=sim.clock) as scheduler:
        await sim.tick(scheduler, H)
    assert await store.inner.inspect("hourly") == Held(active_run_id="seed", pending_at=H)
    assert control.runs == []
    assert "superseded" not in store.outcomes()


# A launch refused as stale while its own reservation still holds the trigger (the row was
# settled under it, as a PostgreSQL claim reading a stale ledger once did) gives the
# reservation back and cancels its run: the next boundary launches instead of being skipped.
async def test_refused_launch_under_its_own_reservation_releases_it(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore, runner: ScriptedRunner
) -> None:
    await seed_fired(store.inner, hourly())
    store.fail["record_result"] = [TriggerError("stale_owner", "result no longer owns trigger")]
    async with open_scheduler(store, runner, clock=sim.clock) as scheduler:
        await sim.tick(scheduler, H)
        assert runner.cancelled == ["run-1"]
        assert await store.inner.inspect("hourly") == Held()
        await sim.tick(scheduler, 2 * H)
        assert runner.keys[-1] == key("hourly", 2 * H)
        assert (await ledger(store.inner))[2 * H][0] == "launched"


async def test_a_start_raising_a_plain_exception_is_a_refused_launch(
    autojump_clock: MockClock, sim: Sim, store: RecordingStore, runner: ScriptedRunner
) -> None:
    """A runner's own bug (an exception that is not a TriggerError) settles the boundary
    ``failed`` at once, with the exception named, and frees the trigger for the next boundary;
    it used to leave the reservation holding the trigger until its lease ran out."""
    runner.fail_starts = [RuntimeError("bug in the runner")]
    await seed_fired(store.inner, hourly())
    async with open_scheduler(store, runner, clock=sim.clock) as scheduler:
        await sim.tick(scheduler, H)
        held = await store.inner.inspect("hourly")
        assert held.active_run_id is None  # not held by the reservation
        await sim.tick(scheduler, 2 * H)
    rows = await ledger(store.inner)
    assert rows[H][0] == "failed"
    (failed,) = [r for r in store.results if r.outcome == "failed"]
    assert failed.error is not None
    assert "RuntimeError: bug in the runner" in failed.error
    assert [r.occurrence for r in store.results if r.outcome == "launched"] == [2 * H]
