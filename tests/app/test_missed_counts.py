"""Occurrences that do not run, counted by reason by serving schedulers (issue 16, item 6).

Under a mock clock: an every-second ``skip`` trigger whose run is held counts each boundary it
skips; a trigger whose scheduler was down counts the boundaries its catch-up policy (or the
policy's bound) gives up, as docs/operations.md says; a resume from now counts what fell due
while paused; two schedulers on one database count each occurrence once. The counter of the
metrics seam follows the stored counts.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import pytest
import trio
import trio.testing

import trio_triggers
from trio_triggers import MissedCounts, RunContext, SchedulerOptions, TrioWallClock, _instrument

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator
    from pathlib import Path

EPOCH = 1_800_000_000_000  # a whole minute
S = 1000


@pytest.fixture
def recorder() -> Iterator[_instrument.Recorder]:
    installed = _instrument.install_recorder()
    yield installed
    _instrument.reset()


async def serving(app: trio_triggers.Triggers, seconds: float) -> None:
    async with trio.open_nursery() as nursery:
        await nursery.start(app.serve)
        await trio.sleep(seconds)
        nursery.cancel_scope.cancel()


async def missed(app: trio_triggers.Triggers, trigger_id: str = "t") -> MissedCounts:
    (row,) = [row for row in await app.store.list() if row.trigger_id == trigger_id]
    return row.missed


async def outcomes(app: trio_triggers.Triggers, trigger_id: str = "t") -> dict[int, Any]:
    page = await app.history(trigger_id=trigger_id, limit=500)
    return {(item.occurrence - EPOCH) // S: item.outcome for item in page.items}


def metric(recorder: _instrument.Recorder, reason: str) -> int:
    return recorder.counter_total(_instrument.MISSED, reason=reason, trigger_id="t")


@contextlib.asynccontextmanager
async def open_app(
    database: str = ":memory:",
    release: trio.Event | None = None,
    clock: TrioWallClock | None = None,
    listing: bool = False,
    **declared: Any,
) -> AsyncIterator[trio_triggers.Triggers]:
    wall = clock if clock is not None else TrioWallClock(EPOCH)
    options = SchedulerOptions(listing=listing)
    async with trio_triggers.open_triggers(database, clock=wall, options=options) as app:

        @app.flow
        async def work(input: Any, run: RunContext) -> None:
            if release is not None:
                await release.wait()

        await app.schedule("t", work, **{"cron": "*/10 * * * * *", **declared})
        yield app


async def test_a_held_run_counts_each_boundary_it_makes_a_skip_trigger_skip(
    autojump_clock: trio.testing.MockClock, recorder: _instrument.Recorder
) -> None:
    release = trio.Event()
    async with open_app(release=release, cron="* * * * * *", overlap="skip") as app:
        await serving(app, 10.5)  # +1 s starts and holds; +2 ... +10 are skipped
        counts = await missed(app)
        skipped = [o for o, outcome in (await outcomes(app)).items() if outcome == "skipped"]
        assert len(skipped) == 9
        assert counts == MissedCounts(overlap=9)
        assert metric(recorder, "overlap") == 9
        release.set()
        await serving(app, 3)  # the held run ends: the next boundaries run, nothing skipped
        assert await missed(app) == counts


async def test_buffer_one_counts_the_boundaries_the_slot_gives_up(
    autojump_clock: trio.testing.MockClock,
) -> None:
    release = trio.Event()
    async with open_app(release=release, cron="* * * * * *", overlap="buffer-one") as app:
        await serving(app, 5.5)  # +1 runs and holds; +2 ... +5 buffer, each pushing out the last
        assert await missed(app) == MissedCounts(overlap=3)  # +2, +3, +4: +5 is still owed
        release.set()
        await serving(app, 1)
        assert (await outcomes(app))[5] == "completed"
        assert await missed(app) == MissedCounts(overlap=3)


async def completed(app: trio_triggers.Triggers) -> list[int]:
    return sorted(o for o, outcome in (await outcomes(app)).items() if outcome == "completed")


# Served to +25 s (10 and 20 run), down for a minute (30 ... 80 fall due), then a new process
# sees the trigger for the first time at +85 s: 80 is owed whatever the policy (§6.1), and the
# backlog 30 ... 70 is the policy's. On first sight "one" keeps the current boundary (80).
# Under "all" the whole backlog is claimed in one tick: 30 runs, and holds the trigger while
# 40 ... 80 are claimed, so the skip overlap policy skips them (counted as overlap).
@pytest.mark.parametrize(
    ("catch_up", "max_catch_up", "ran", "counts"),
    [
        ("none", 0, [80], MissedCounts(catch_up=5)),
        ("one", 3, [80], MissedCounts(catch_up=5)),
        ("all", 10, [30], MissedCounts(overlap=5)),
        ("all", 3, [80], MissedCounts(catch_up_bound=5)),  # all five over the bound
    ],
)
async def test_a_trigger_that_was_down_counts_what_its_catch_up_gives_up(
    autojump_clock: trio.testing.MockClock,
    recorder: _instrument.Recorder,
    tmp_path: Path,
    catch_up: str,
    max_catch_up: int,
    ran: list[int],
    counts: MissedCounts,
) -> None:
    database = str(tmp_path / "t.db")
    clock = TrioWallClock(EPOCH)
    declared: dict[str, Any] = {"catch_up": catch_up, "max_catch_up": max_catch_up}
    async with open_app(database, clock=clock, **declared) as app:
        await serving(app, 25)
    await trio.sleep(60)  # down
    async with open_app(database, clock=clock, **declared) as app:
        await serving(app, 5.5)  # to +90.5 s: 90 runs too
        assert await completed(app) == [10, 20, *ran, 90]
        assert await missed(app) == counts
    assert metric(recorder, "catch_up") == counts.catch_up
    assert metric(recorder, "catch_up_bound") == counts.catch_up_bound


# The same outage seen by the scheduler that was serving before it (its watermark is 20):
# "one" keeps the latest of the backlog (70, which holds the trigger when 80 is claimed in the
# same tick: 80 is skipped), and a bound of 0 refuses even that.
@pytest.mark.parametrize(
    ("catch_up", "max_catch_up", "ran", "counts"),
    [
        ("none", 0, [80], MissedCounts(catch_up=5)),
        ("one", 3, [70], MissedCounts(catch_up=4, overlap=1)),
        ("one", 0, [80], MissedCounts(catch_up=4, catch_up_bound=1)),
        ("all", 10, [30], MissedCounts(overlap=5)),
        ("all", 4, [80], MissedCounts(catch_up_bound=5)),
    ],
)
async def test_a_scheduler_that_stopped_serving_counts_from_its_watermark(
    autojump_clock: trio.testing.MockClock,
    catch_up: str,
    max_catch_up: int,
    ran: list[int],
    counts: MissedCounts,
) -> None:
    async with open_app(catch_up=catch_up, max_catch_up=max_catch_up) as app:
        await serving(app, 25)
        await trio.sleep(60)
        await serving(app, 5.5)
        assert await completed(app) == [10, 20, *ran, 90]
        assert await missed(app) == counts


async def test_a_resume_from_now_counts_what_fell_due_while_paused(
    autojump_clock: trio.testing.MockClock, recorder: _instrument.Recorder
) -> None:
    async with open_app(catch_up="all", max_catch_up=100) as app:
        await serving(app, 25)
        await app.pause("t")
        await serving(app, 60)  # 30 ... 80 fall due while paused
        resumed = await app.resume("t", point="now")
        assert resumed.skipped == 6
        await serving(app, 30)  # nothing of the paused minute is a catch-up drop as well
        assert await missed(app) == MissedCounts(paused=6)
        assert metric(recorder, "paused") == 6


# Indexed schedulers take disjoint due rows; listing ones (SchedulerOptions.listing) both see
# the trigger on every tick, both compute the same catch-up drops and both claim +12 with them:
# only the granted claim counts.
@pytest.mark.parametrize("listing", [False, True], ids=["indexed", "listing"])
async def test_two_schedulers_on_one_database_count_each_occurrence_once(
    autojump_clock: trio.testing.MockClock,
    recorder: _instrument.Recorder,
    tmp_path: Path,
    listing: bool,
) -> None:
    database = str(tmp_path / "t.db")
    clock = TrioWallClock(EPOCH)
    release = trio.Event()
    declared: dict[str, Any] = {"cron": "* * * * * *", "overlap": "skip", "catch_up": "none"}
    async with open_app(database, clock=clock, **declared) as app:
        await serving(app, 2.5)  # +1 and +2 run and end
    await trio.sleep(10)  # down: +3 ... +12 fall due; +12 is owed, +3 ... +11 given up
    async with (
        open_app(database, release=release, clock=clock, listing=listing, **declared) as one,
        open_app(database, release=release, clock=clock, listing=listing, **declared) as two,
    ):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serving, one, 10)
            nursery.start_soon(serving, two, 10)
        # +12 runs and holds (one of the two launched it); +13 ... +22 are each skipped once.
        found = await outcomes(one)
        skipped = sorted(o for o, outcome in found.items() if outcome == "skipped")
        assert skipped == list(range(13, 23))
        counts = await missed(one)
        assert counts == MissedCounts(overlap=10, catch_up=9)
        assert metric(recorder, "overlap") == 10
        assert metric(recorder, "catch_up") == 9
        release.set()
