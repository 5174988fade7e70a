"""Backfill through a serving application, under a mock clock (issue 16).

An hourly trigger fires ten boundaries, its process is down for 38 hours (catch-up ``none``: the
schedule gives those boundaries up), then a backfill of the 48 boundaries ``[0H, 47H]`` runs
exactly the 38 that never ran, each once, with its scheduled idempotency key, although the
process serving it stops halfway and a new one (a second ``open_triggers`` on the same SQLite
file) carries it on from the durable progress.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from typing import TYPE_CHECKING, Any

import pytest
import trio
import trio.testing

import trio_triggers
from trio_triggers import RunContext, TriggerError, TrioWallClock, idempotency_key

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

EPOCH = 1_800_000_000_000  # a whole hour
H = 3_600_000
MINUTE = 60


async def serving(app: trio_triggers.Triggers, seconds: float) -> None:
    async with trio.open_nursery() as nursery:
        await nursery.start(app.serve)
        await trio.sleep(seconds)
        nursery.cancel_scope.cancel()


@contextlib.asynccontextmanager
async def session(
    path: Path, clock: TrioWallClock, started: list[str], **policy: Any
) -> AsyncIterator[trio_triggers.Triggers]:
    """``open_triggers`` on ``path`` with the ``work`` flow (30 s a run) and ``hourly``."""
    async with trio_triggers.open_triggers(str(path), clock=clock) as app:

        @app.flow
        async def work(input: Any, run: RunContext) -> None:
            assert run.idempotency_key is not None
            started.append(run.idempotency_key)
            await trio.sleep(30)

        await app.schedule("hourly", work, cron="0 * * * *", timezone="UTC", **policy)
        yield app


async def ledger(app: trio_triggers.Triggers) -> dict[int, tuple[str | None, str | None]]:
    page = await app.history(trigger_id="hourly")
    return {(item.occurrence - EPOCH) // H: (item.outcome, item.run_id) for item in page.items}


async def test_a_backfill_of_48_boundaries_runs_the_38_missing_once_each_across_a_restart(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    path = tmp_path / "triggers.db"
    clock = TrioWallClock(EPOCH + 1_000)
    started: list[str] = []
    async with session(path, clock, started) as app:
        await serving(app, 10 * H / 1000 + 20 * MINUTE)  # fires 1H ... 10H
        fired = await ledger(app)
        assert sorted(fired) == list(range(1, 11))
    await trio.sleep(38 * H / 1000)  # the process is down; catch-up "none" gives 11H-47H up
    async with session(path, clock, started) as app:
        await serving(app, 15 * MINUTE)  # at 48H: the schedule fires its current boundary
        assert sorted(await ledger(app)) == [*range(1, 11), 48]
        before = await ledger(app)
        with pytest.raises(TriggerError) as caught:  # the bound: 48 boundaries need --max 48
            await app.backfill("hourly", start=EPOCH, end=EPOCH + 47 * H, max_boundaries=47)
        assert caught.value.path == "max_boundaries"
        started_backfill = await app.backfill(
            "hourly", start=EPOCH, end=EPOCH + 47 * H, overlap="buffer-one", by="ops"
        )
        backfill = started_backfill.backfill
        assert backfill is not None
        assert (backfill.total, backfill.next, backfill.by) == (48, EPOCH, "ops")
        await serving(app, 10 * MINUTE)  # part of it, then this process stops
        halfway = await app.store.get("hourly")
        assert halfway is not None
        assert halfway.backfill is not None
        assert halfway.backfill.running
        assert 10 < halfway.backfill.done < 40  # a real restart in the middle
    async with session(path, clock, started) as app:
        await serving(app, 14 * MINUTE)  # the next process carries it on from its progress
        finished = await app.store.get("hourly")
        assert finished is not None
        assert finished.backfill is not None
        assert (finished.backfill.state, finished.backfill.done) == ("done", 48)
        after = await ledger(app)
        runs = await app.list_runs(limit=1000)
    missing = [0, *range(11, 48)]
    assert len(missing) == 38
    assert sorted(after) == list(range(49))
    for boundary in range(1, 11):
        assert after[boundary] == before[boundary]  # the ten fired ones were not run again
    for boundary in missing:
        assert after[boundary][0] == "completed", boundary
    # Exactly one run per key, each with its scheduled idempotency key (a run interrupted by
    # the restart is resumed by the next process: the same run, a second attempt).
    keys = Counter(run.idempotency_key for run in runs)
    expected = {idempotency_key("hourly", EPOCH + boundary * H) for boundary in range(49)}
    assert set(keys) == expected
    assert all(count == 1 for count in keys.values())
    assert set(started) == expected
    assert len(started) - len(set(started)) <= 1


async def test_a_backfill_before_the_registration_does_not_become_the_schedules_backlog(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    # Registered at 5H with catch-up "all": the schedule owes what falls due after 5H. The
    # backfill's results move the fire cursor to 4H; a scheduler that meets the row for the
    # first time (a new process) counts its backlog from the cursor, so without the floor the
    # backfill would make it owe 5H, a boundary from before the registration.
    path = tmp_path / "triggers.db"
    clock = TrioWallClock(EPOCH + 5 * H + 1_000)
    started: list[str] = []
    policy = {"catch_up": "all", "max_catch_up": 100}
    async with session(path, clock, started, **policy) as app:
        registered = await app.backfill(
            "hourly", start=EPOCH, end=EPOCH + 4 * H, overlap="buffer-one"
        )
        assert registered.resume_after == EPOCH + 5 * H
        await serving(app, 10 * MINUTE)
        assert sorted(await ledger(app)) == [0, 1, 2, 3, 4]
    async with session(path, clock, started, **policy) as app:
        await serving(app, 50 * MINUTE + 10)  # past 6H
        assert sorted(await ledger(app)) == [0, 1, 2, 3, 4, 6]


async def test_a_listing_scheduler_takes_backfill_steps_at_once(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    # A scheduler without the attention index (options.listing) sleeps until the next boundary
    # or its poll interval (60 s); a running backfill makes its next tick come at once, as the
    # index would. Here every boundary is already in the ledger: no run ends to wake it.
    clock = TrioWallClock(EPOCH + 1_000)
    options = trio_triggers.SchedulerOptions(listing=True)
    async with trio_triggers.open_triggers(":memory:", clock=clock, options=options) as app:

        @app.flow
        async def work(input: Any, run: RunContext) -> None:
            return None

        await app.schedule("hourly", work, cron="0 * * * *", timezone="UTC")
        await serving(app, 5 * H / 1000 + 60)  # fires 1H ... 5H
        assert sorted(await ledger(app)) == [1, 2, 3, 4, 5]
        await app.backfill("hourly", start=EPOCH + H, end=EPOCH + 5 * H)
        await serving(app, 5)
        after = await app.store.get("hourly")
        assert after is not None
        assert after.backfill is not None
        assert (after.backfill.state, after.backfill.done) == ("done", 5)
        assert sorted(await ledger(app)) == [1, 2, 3, 4, 5]


async def test_a_paused_trigger_backfills_nothing_until_resumed(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    path = tmp_path / "triggers.db"
    clock = TrioWallClock(EPOCH + 5 * H + 1_000)
    started: list[str] = []
    async with session(path, clock, started) as app:
        await app.pause("hourly")
        await app.backfill("hourly", start=EPOCH, end=EPOCH + 2 * H, overlap="buffer-one")
        await serving(app, 5 * MINUTE)
        assert await ledger(app) == {}
        await app.resume("hourly", point="now")
        await serving(app, 5 * MINUTE)
        assert sorted(await ledger(app)) == [0, 1, 2]
