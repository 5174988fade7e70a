"""Pause and resume through a serving application, under a mock clock (issue 16).

Every-ten-seconds triggers, served for a simulated minute at a time: nothing fires while paused,
a resume from ``"now"`` fires only what falls due after it, one under the policy catches up.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import pytest
import trio
import trio.testing

import trio_triggers
from trio_triggers import RunContext, TriggerError, TrioWallClock

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

EPOCH = 1_800_000_000_000  # a whole minute
S = 1000


async def occurrences(app: trio_triggers.Triggers, trigger_id: str) -> list[int]:
    page = await app.history(trigger_id=trigger_id)
    return sorted((item.occurrence - EPOCH) // S for item in page.items)


async def serving(app: trio_triggers.Triggers, seconds: float) -> None:
    async with trio.open_nursery() as nursery:
        await nursery.start(app.serve)
        await trio.sleep(seconds)
        nursery.cancel_scope.cancel()


@contextlib.asynccontextmanager
async def open_app(catch_up: str = "none") -> AsyncIterator[trio_triggers.Triggers]:
    async with trio_triggers.open_triggers(":memory:", clock=TrioWallClock(EPOCH)) as app:

        @app.flow
        async def tick(input: Any, run: RunContext) -> None:
            return None

        await app.schedule(
            "t",
            tick,
            cron="*/10 * * * * *",
            catch_up=catch_up,  # type: ignore[arg-type]
            max_catch_up=100,
        )
        yield app


async def test_nothing_fires_while_paused_and_now_skips_what_fell_due(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # catch_up="all": a resume from now must skip what the policy alone would owe.
    async with open_app(catch_up="all") as app:
        await serving(app, 25)  # fires 10 and 20
        paused = await app.pause("t", note="maintenance", by="ops")
        assert paused.paused is not None
        assert paused.paused.note == "maintenance"
        await serving(app, 60)  # 30 ... 80 fall due while paused: none fires
        assert await occurrences(app, "t") == [10, 20]
        resumed = await app.resume("t", point="now")  # at +85 s
        assert resumed.skipped == 6  # 30, 40, 50, 60, 70, 80
        await serving(app, 30)  # 90, 100, 110 fire; nothing of the paused minute
        assert await occurrences(app, "t") == [10, 20, 90, 100, 110]


async def test_resume_under_the_policy_catches_up(autojump_clock: trio.testing.MockClock) -> None:
    async with open_app(catch_up="all") as app:
        await serving(app, 25)
        await app.pause("t")
        await serving(app, 40)  # 30 ... 60 fall due while paused
        assert await occurrences(app, "t") == [10, 20]
        resumed = await app.resume("t", point="policy")  # at +65 s
        assert resumed.skipped == 0
        await serving(app, 10)  # the backlog, then 70
        assert await occurrences(app, "t") == [10, 20, 30, 40, 50, 60, 70]


async def test_a_pause_survives_scheduling_the_trigger_again(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_app() as app:
        await app.pause("t", note="hold")
        again = await app.schedule("t", "tick", cron="*/10 * * * * *", input={"v": 2})
        assert again.paused is not None
        assert again.paused.note == "hold"
        await serving(app, 30)
        assert await occurrences(app, "t") == []


async def test_pause_of_an_unknown_trigger_is_refused(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_app() as app:
        with pytest.raises(TriggerError) as caught:
            await app.pause("nope")
        assert caught.value.code == "unknown_trigger"
        with pytest.raises(TriggerError) as caught:
            await app.resume("nope", point="now")
        assert caught.value.code == "unknown_trigger"


@pytest.mark.parametrize(
    ("point", "catch_up", "after_resume"),
    [
        # Paused at +1.5 h for 3 h (boundaries 2 h, 3 h, 4 h fall due), resumed at +4.5 h.
        ("now", "all", [5]),  # skipped, whatever the policy
        ("policy", "all", [2, 3, 4, 5]),  # owed, each of them
        # The boundary at or before the resume (4 h) is always owed, as after downtime (§6.1);
        # the policy governs the backlog before it.
        ("policy", "one", [3, 4, 5]),  # the latest of the backlog
        ("policy", "none", [4, 5]),  # none of the backlog
    ],
)
async def test_an_hourly_trigger_paused_for_three_hours(
    autojump_clock: trio.testing.MockClock, point: str, catch_up: str, after_resume: list[int]
) -> None:
    async with trio_triggers.open_triggers(":memory:", clock=TrioWallClock(EPOCH)) as app:

        @app.flow
        async def hourly(input: Any, run: RunContext) -> None:
            return None

        await app.schedule(
            "h",
            hourly,
            cron="0 * * * *",
            timezone="UTC",
            catch_up=catch_up,  # type: ignore[arg-type]
            max_catch_up=10,
        )
        hour = 3600
        await serving(app, 1.5 * hour)  # +1 h fires
        await app.pause("h")
        await serving(app, 3 * hour)
        resumed = await app.resume("h", point=point)  # type: ignore[arg-type]
        assert resumed.skipped == (3 if point == "now" else 0)
        await serving(app, 1 * hour)  # to +5.5 h
        page = await app.history(trigger_id="h")
        fired = sorted((item.occurrence - EPOCH) // (hour * S) for item in page.items)
    assert fired == [1, *after_resume]
