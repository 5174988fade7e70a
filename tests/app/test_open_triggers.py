"""``open_triggers``: the whole durable stack of one database for a Trio application."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
import trio
import trio.testing

import trio_triggers
from trio_triggers import RunContext, SchedulerOptions, TriggerError, TrioWallClock

if TYPE_CHECKING:
    from pathlib import Path

EPOCH = 1_800_000_000_000  # a whole minute, so "*/2 * * * * *" boundaries are even seconds


async def test_every_two_seconds_under_a_mock_clock(autojump_clock: trio.testing.MockClock) -> None:
    calls: list[Any] = []
    async with trio_triggers.open_triggers(":memory:", clock=TrioWallClock(EPOCH)) as app:

        @app.flow
        async def tick(input: Any, run: RunContext) -> dict[str, int]:
            calls.append(input)
            return {"n": len(calls)}

        declared = await app.schedule("every-2s", tick, cron="*/2 * * * * *", input={"x": 1})
        assert declared.flow_id == "tick"
        async with trio.open_nursery() as nursery:
            await nursery.start(app.serve)
            await trio.sleep(11.5)
            nursery.cancel_scope.cancel()
        page = await app.history(trigger_id="every-2s")
    outcomes = sorted((item.occurrence, item.outcome) for item in page.items)
    # Boundaries at +2 s ... +10 s fire; all but the newest are settled by then.
    assert [occurrence - EPOCH for occurrence, _ in outcomes] == [2000, 4000, 6000, 8000, 10000]
    assert {outcome for _, outcome in outcomes[:-1]} == {"completed"}
    assert calls == [{"x": 1}] * 5


async def test_a_failed_runs_error_is_in_its_report(autojump_clock: trio.testing.MockClock) -> None:
    async with trio_triggers.open_triggers(":memory:", clock=TrioWallClock(EPOCH)) as app:

        @app.flow("broken")
        async def broken(input: Any, run: RunContext) -> None:
            raise ValueError("the input was bad")

        await app.schedule("b", "broken", cron="* * * * * *")
        async with trio.open_nursery() as nursery:
            await nursery.start(app.serve)
            await trio.sleep(3.5)
            nursery.cancel_scope.cancel()
        failed = (await app.history(outcome="failed")).items
        assert failed
        assert failed[0].run_id is not None
        report = await app.run(failed[0].run_id)
        assert await app.run("run-unknown") is None
    assert report is not None
    assert report.status == "failed"
    assert report.error is not None
    assert "the input was bad" in report.error
    assert report.trigger_id == "b"
    assert report.occurrence == failed[0].occurrence
    assert report.flow_id == "broken"
    assert report.finished_at is not None


async def test_real_time_on_a_sqlite_file(tmp_path: Path) -> None:
    """The application path in real time: a boundary every second settles as completed."""
    database = tmp_path / "app.sqlite"
    async with trio_triggers.open_triggers(database) as app:

        @app.flow()
        async def quick(input: Any, run: RunContext) -> str:
            return "done"

        await app.schedule("quick", quick, cron="*/2 * * * * *")
        async with trio.open_nursery() as nursery:
            await nursery.start(app.serve)
            # Boundaries every 2 s: two of them fall due and settle well within 6.5 s.
            await trio.sleep(6.5)
            nursery.cancel_scope.cancel()
        items = (await app.history()).items
    assert sum(item.outcome == "completed" for item in items) >= 2
    assert not [item for item in items if item.outcome == "skipped"]
    assert database.exists()


@pytest.mark.parametrize(
    ("kwargs", "path"),
    [
        ({"options": SchedulerOptions(poll_interval=-1)}, "poll_interval"),
        ({"concurrency": 0}, "concurrency"),
        ({"concurrency": True}, "concurrency"),
    ],
)
async def test_bad_options_are_refused_before_the_database_is_written(
    tmp_path: Path, kwargs: dict[str, Any], path: str
) -> None:
    database = tmp_path / "never.sqlite"
    with pytest.raises(TriggerError) as caught:
        async with trio_triggers.open_triggers(database, **kwargs):
            pass  # pragma: no cover - never reached
    assert caught.value.code == "invalid_options"
    assert caught.value.path == path
    assert not database.exists()


async def test_a_database_that_cannot_be_opened_is_a_store_error(tmp_path: Path) -> None:
    with pytest.raises(TriggerError) as caught:
        async with trio_triggers.open_triggers(tmp_path):  # a directory, not a file
            pass  # pragma: no cover - never reached
    assert caught.value.code == "store"


async def test_flows_register_under_their_names_and_bad_ones_are_refused() -> None:
    async with trio_triggers.open_triggers(":memory:") as app:

        @app.flow
        async def first(input: Any, run: RunContext) -> None: ...

        async def second(input: Any, run: RunContext) -> None: ...

        app.flow("renamed")(second)
        assert list(app.runner.flows) == ["first", "renamed"]
        registered = await app.schedule("t", second, cron="0 * * * *")
        assert registered.flow_id == "renamed"

        def not_async(input: Any, run: RunContext) -> None: ...

        with pytest.raises(TriggerError) as caught:
            app.flow(not_async)  # type: ignore[type-var]
        assert caught.value.path == "flow"

        async def unregistered(input: Any, run: RunContext) -> None: ...

        with pytest.raises(TriggerError) as refused:
            await app.schedule("u", unregistered, cron="0 * * * *")
        assert refused.value.path == "flow_id"
        with pytest.raises(TriggerError) as bad_cron:
            await app.schedule("v", "first", cron="61 * * * *")
        assert bad_cron.value.code == "invalid_cron"
        assert [t.id for t in await app.store.list_enabled()] == ["t"]
