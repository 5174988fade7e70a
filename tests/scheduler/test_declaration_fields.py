"""Jitter, windows and pausing after failures, served under a mock clock on every store.

(``docs/declarations.md``, "Jitter, windows and pausing after failures".) Each scenario runs a
serving scheduler over the memory, SQLite and PostgreSQL stores with ``autojump_clock``; the
runner is the scripted one, so what a run ends as is set by the test.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import msgspec
import pytest
import trio
import trio.testing

from tests.pg_support import fresh_schema, postgres_marks
from trio_triggers import ThreadExecutor, TriggerError, TrioWallClock
from trio_triggers._cron import Cron
from trio_triggers._declarations import RegisteredTrigger, Trigger
from trio_triggers._identities import idempotency_key
from trio_triggers._policies import due_occurrences, jitter_delay, launch_at
from trio_triggers._scheduler import SchedulerOptions, StartRequest, open_scheduler
from trio_triggers._store import MemoryTriggerStore, open_sqlite_trigger_store
from trio_triggers._store._models import HistoryQuery, Result
from trio_triggers.testing import AutojumpGuardExecutor

from .harness import ScriptedRunner

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

    from trio_triggers._store._protocol import TriggerStore

EPOCH = 1_800_000_000_000  # a whole minute
S = 1000
EVERY_10_S = "*/10 * * * * *"


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=postgres_marks())])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@contextlib.asynccontextmanager
async def open_store(
    kind: str, wall: TrioWallClock, clock: trio.testing.MockClock, tmp_path: Path
) -> AsyncIterator[TriggerStore]:
    if kind == "memory":
        yield MemoryTriggerStore(clock=wall)
    elif kind == "sqlite":
        async with open_sqlite_trigger_store(str(tmp_path / "t.db"), clock=wall) as store:
            yield store
    else:
        from trio_triggers.postgres import open_postgres_trigger_store

        guard = AutojumpGuardExecutor(ThreadExecutor(4), clock)
        with fresh_schema() as dsn:
            async with open_postgres_trigger_store(dsn, clock=wall, executor=guard) as store:
                yield store


def declared(trigger_id: str = "t", **fields: Any) -> Trigger:
    return Trigger.make(
        {"id": trigger_id, "flow_id": "flow", "input": {}, "cron": EVERY_10_S, **fields}
    )


class TimedRunner(ScriptedRunner):
    """The scripted runner, remembering the wall instant of each start."""

    def __init__(self, wall: TrioWallClock) -> None:
        super().__init__()
        self.wall = wall
        self.started_at: dict[str, int] = {}
        self.finish_at_once = True

    async def start(self, request: StartRequest) -> str:
        self.started_at[request.idempotency_key] = self.wall.now_ms()
        return await super().start(request)


async def serve(
    store: TriggerStore,
    runner: ScriptedRunner,
    wall: TrioWallClock,
    s: float,
    *,
    listing: bool = False,
) -> None:
    options = SchedulerOptions(run_poll_interval=1, host="sched-a", listing=listing)
    async with (
        open_scheduler(store, runner, options=options, clock=wall) as scheduler,
        trio.open_nursery() as nursery,
    ):
        await nursery.start(scheduler.serve)
        await trio.sleep(s)
        nursery.cancel_scope.cancel()


async def current(store: TriggerStore, trigger_id: str = "t") -> RegisteredTrigger:
    found = await store.get(trigger_id)
    assert found is not None
    return found


# --- jitter ------------------------------------------------------------------------------------


def test_the_jitter_delay_is_deterministic_in_range_and_capped_before_the_next_boundary() -> None:
    delays = [jitter_delay("t", EPOCH + n * 10 * S, 5000, None) for n in range(200)]
    assert all(0 <= d < 5000 for d in delays)
    assert len(set(delays)) > 100  # spread, not one constant
    assert delays == [jitter_delay("t", EPOCH + n * 10 * S, 5000, None) for n in range(200)]
    # A spread wider than the schedule's gap never reaches the next boundary.
    capped = [
        jitter_delay("t", EPOCH + n * 10 * S, 60_000, EPOCH + (n + 1) * 10 * S) for n in range(50)
    ]
    assert all(d <= 10 * S - 1 for d in capped)
    assert jitter_delay("t", EPOCH, 0, None) == 0


@pytest.mark.parametrize("listing", [False, True], ids=["indexed", "listing"])
async def test_jitter_delays_each_launch_by_its_own_delay_and_keeps_the_identity(
    kind: str, listing: bool, autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    wall = TrioWallClock(EPOCH)
    runner = TimedRunner(wall)
    async with open_store(kind, wall, autojump_clock, tmp_path) as store:
        await store.register(declared(jitter=8))
        # The listing tick has no index: its wake-on-deadline must sleep to each launch.
        await serve(store, runner, wall, 65, listing=listing)
        cron = Cron.parse(EVERY_10_S, None, now=EPOCH)
        boundaries = [EPOCH + n * 10 * S for n in range(1, 6)]
        # The keys are the boundaries' own: the occurrence is unchanged.
        assert runner.keys[:5] == [idempotency_key("t", b) for b in boundaries]
        delays = []
        for boundary in boundaries:
            due = launch_at("t", 8000, cron, boundary)
            started = runner.started_at[idempotency_key("t", boundary)]
            assert due <= started < due + S, (boundary, due, started)  # never early
            delays.append(due - boundary)
        assert any(delay > 0 for delay in delays)
        history = await store.history(HistoryQuery(trigger_id="t"))
        assert sorted(item.occurrence for item in history.items)[:5] == boundaries


async def test_the_attention_index_is_due_at_the_jittered_instant(
    kind: str, autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    wall = TrioWallClock(EPOCH)
    async with open_store(kind, wall, autojump_clock, tmp_path) as store:
        await store.register(declared(jitter=8))
        cron = Cron.parse(EVERY_10_S, None, now=EPOCH)
        expected = launch_at("t", 8000, cron, EPOCH + 10 * S)
        assert expected > EPOCH + 10 * S  # this boundary's delay is not 0
        assert await store.next_attention() == expected  # type: ignore[attr-defined]
        # Not due just before its launch instant, due at it.
        assert await store.due(expected - 1, limit=10) == []  # type: ignore[attr-defined]
        due = await store.due(expected, limit=10)  # type: ignore[attr-defined]
        assert [row.row.trigger_id for row in due] == ["t"]


# --- windows -----------------------------------------------------------------------------------


async def test_only_the_boundaries_of_the_window_run_both_ends_included(
    kind: str, autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    wall = TrioWallClock(EPOCH)
    runner = TimedRunner(wall)
    async with open_store(kind, wall, autojump_clock, tmp_path) as store:
        await store.register(declared(start_at=EPOCH + 30 * S, end_at=EPOCH + 50 * S))
        await serve(store, runner, wall, 95)
        assert runner.keys == [idempotency_key("t", EPOCH + n * S) for n in (30, 40, 50)]
        (row,) = await store.list()
        assert row.missed.total == 0
        # After the end the trigger needs no attention at all.
        assert await store.next_attention() is None  # type: ignore[attr-defined]


def test_catch_up_owes_only_the_window_and_counts_nothing_outside_it() -> None:
    base = RegisteredTrigger.of(
        declared(catch_up="all", max_catch_up=100), revision=1, last_fired_at=EPOCH
    )
    now = EPOCH + 65 * S
    whole = due_occurrences(base, now, None)
    assert whole.occurrences == [EPOCH + n * S for n in (10, 20, 30, 40, 50, 60)]
    windowed = msgspec.structs.replace(base, start_at=EPOCH + 30 * S, end_at=EPOCH + 45 * S)
    due = due_occurrences(windowed, now, None)
    assert due.occurrences == [EPOCH + 30 * S, EPOCH + 40 * S]
    assert (due.catch_up_missed, due.bound_missed) == (0, 0)
    # Under "none" the boundaries before the window are not counted as given up.
    none = msgspec.structs.replace(windowed, catch_up="none", end_at=None)
    dropped = due_occurrences(none, now, EPOCH)
    assert dropped.occurrences == [EPOCH + 60 * S]
    assert dropped.catch_up_missed == 3  # 30, 40 and 50; not 10 and 20
    assert dropped.dropped_after == EPOCH + 30 * S - 1


async def test_resume_from_now_counts_only_the_windows_boundaries_as_skipped(
    kind: str, autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    wall = TrioWallClock(EPOCH)
    async with open_store(kind, wall, autojump_clock, tmp_path) as store:
        await store.register(declared(start_at=EPOCH + 20 * S, end_at=EPOCH + 40 * S))
        await store.pause("t")  # type: ignore[attr-defined]
        await trio.sleep(65)  # 10 ... 60 pass; of them only 20, 30 and 40 were ever owed
        resumed = await store.resume("t", point="now")  # type: ignore[attr-defined]
        assert resumed.skipped == 3
        (row,) = await store.list()
        assert row.missed.paused == 3


# --- pause after failures ----------------------------------------------------------------------


async def test_n_failed_runs_in_a_row_pause_the_trigger_exactly_at_n(
    kind: str, autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    wall = TrioWallClock(EPOCH)
    runner = TimedRunner(wall)
    runner.default_state = "failed"
    runner.states["run-3"] = "completed"  # ends the first run of failures at two
    async with open_store(kind, wall, autojump_clock, tmp_path) as store:
        await store.register(declared(pause_after_failures=3))
        await serve(store, runner, wall, 125)
        # run-1, run-2 fail; run-3 completes; run-4, run-5, run-6 fail: paused at the third.
        assert len(runner.starts) == 6
        trigger = await current(store)
        assert trigger.paused is not None
        assert trigger.paused.note == "paused after 3 consecutive failed runs"
        assert trigger.paused.by == "scheduler sched-a"
        assert trigger.consecutive_failures == 3
        assert EPOCH + 60 * S <= trigger.paused.at <= EPOCH + 62 * S  # when the 6th failed
        # A resume clears the count; the next failures count from 0 again.
        resumed = await store.resume("t", point="now")  # type: ignore[attr-defined]
        assert resumed.trigger.consecutive_failures == 0
        assert resumed.trigger.paused is None


async def test_a_failure_recorded_by_the_store_pauses_in_the_same_write(
    kind: str, autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    wall = TrioWallClock(EPOCH)
    async with open_store(kind, wall, autojump_clock, tmp_path) as store:
        registered = await store.register(declared(pause_after_failures=2))
        revision = registered.revision
        for n, occurrence in enumerate((EPOCH + 10 * S, EPOCH + 20 * S), start=1):
            claim = await store.claim_fire("t", occurrence, expected_revision=revision)
            assert claim.claimed
            await store.record_result(
                Result(
                    trigger_id="t",
                    occurrence=occurrence,
                    outcome="failed",
                    reservation_id=claim.reservation_id,
                    by="tester",
                )
            )
            trigger = await current(store)
            assert trigger.consecutive_failures == n
            if n == 1:
                assert trigger.paused is None
                assert trigger.revision == revision
            else:
                assert trigger.paused is not None
                assert trigger.paused.by == "tester"
                assert trigger.paused.note == "paused after 2 consecutive failed runs"
                assert trigger.revision == revision + 1  # fences claims decided before it
            revision = trigger.revision
        # A repeat of the same result counts nothing more.
        await store.record_result(
            Result(trigger_id="t", occurrence=EPOCH + 20 * S, outcome="failed")
        )
        assert (await current(store)).consecutive_failures == 2


async def test_an_operators_pause_is_kept_when_failures_reach_n(
    kind: str, autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    wall = TrioWallClock(EPOCH)
    async with open_store(kind, wall, autojump_clock, tmp_path) as store:
        registered = await store.register(declared(pause_after_failures=1))
        claim = await store.claim_fire("t", EPOCH + 10 * S, expected_revision=registered.revision)
        await store.pause("t", note="by hand", by="ops")  # type: ignore[attr-defined]
        await store.record_result(
            Result(
                trigger_id="t",
                occurrence=EPOCH + 10 * S,
                outcome="failed",
                reservation_id=claim.reservation_id,
            )
        )
        trigger = await current(store)
        assert trigger.paused is not None
        assert (trigger.paused.note, trigger.paused.by) == ("by hand", "ops")
        assert trigger.consecutive_failures == 1


async def test_triggers_without_the_fields_never_pause_on_failures(
    kind: str, autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    wall = TrioWallClock(EPOCH)
    runner = TimedRunner(wall)
    runner.default_state = "failed"
    async with open_store(kind, wall, autojump_clock, tmp_path) as store:
        await store.register(declared())
        await serve(store, runner, wall, 55)
        assert len(runner.starts) == 5
        trigger = await current(store)
        assert trigger.paused is None
        assert trigger.consecutive_failures == 5


async def test_a_runner_that_refuses_to_start_counts_as_failed_runs(
    kind: str, autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    wall = TrioWallClock(EPOCH)
    runner = TimedRunner(wall)
    runner.fail_starts = [TriggerError("runner", "runner down") for _ in range(10)]
    async with open_store(kind, wall, autojump_clock, tmp_path) as store:
        await store.register(declared(pause_after_failures=2))
        await serve(store, runner, wall, 45)
        trigger = await current(store)
        assert trigger.paused is not None
        assert trigger.paused.note == "paused after 2 consecutive failed runs"
        assert len(runner.starts) == 2  # +10 and +20 refused; nothing tried after the pause


async def test_a_manual_fire_of_a_jittered_trigger_starts_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    wall = TrioWallClock(EPOCH + 3 * S)
    runner = TimedRunner(wall)
    store = MemoryTriggerStore(clock=wall)
    await store.register(declared(cron="0 0 * * *", jitter=3600))
    async with open_scheduler(store, runner, clock=wall) as scheduler:
        fired = await scheduler.fire("t", key="now-please")
    assert fired.action == "fire"
    assert list(runner.started_at.values()) == [EPOCH + 3 * S]
