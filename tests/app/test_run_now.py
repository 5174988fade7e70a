"""Run now through a serving application (``Triggers.fire``), under a mock clock (issue 16).

The flow runs with the fire's input, the history marks the row as manual, a retried request with
the same key runs nothing, and the schedule's own boundaries are untouched.
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


@contextlib.asynccontextmanager
async def serving_app(seen: list[Any]) -> AsyncIterator[trio_triggers.Triggers]:
    async with trio_triggers.open_triggers(":memory:", clock=TrioWallClock(EPOCH)) as app:

        @app.flow
        async def report(input: Any, run: RunContext) -> None:
            seen.append(input)

        await app.schedule("t", report, cron="0 * * * * *", input={"from": "schedule"})
        async with trio.open_nursery() as nursery:
            await nursery.start(app.serve)
            yield app
            nursery.cancel_scope.cancel()


async def test_a_manual_fire_runs_its_input_once_and_is_marked_in_history(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[Any] = []
    async with serving_app(seen) as app:
        await trio.sleep(30)
        fired = await app.fire("t", input={"from": "operator"}, key="deploy-42", by="ops")
        assert fired.action == "fire"
        assert fired.outcome == "launched"
        assert fired.run_id is not None
        assert fired.occurrence == EPOCH + 30 * S - 1
        await trio.sleep(1)
        assert seen == [{"from": "operator"}]
        again = await app.fire("t", input={"from": "retry"}, key="deploy-42")
        assert again.repeated
        assert again.run_id == fired.run_id
        await trio.sleep(40)  # the boundary at +60 s fires as scheduled
        assert seen == [{"from": "operator"}, {"from": "schedule"}]
        page = await app.history(trigger_id="t")
        assert [(r.occurrence - EPOCH, r.outcome, r.manual_key) for r in page.items] == [
            (60 * S, "completed", None),
            (30 * S - 1, "completed", "deploy-42"),
        ]
        report = await app.run(fired.run_id)
        assert report is not None
        assert report.trigger_id == "t"
        assert report.status == "completed"
        current = await app.store.get("t")
        assert current is not None
        assert current.last_fired_at == EPOCH + 60 * S


async def test_refusals_are_typed(autojump_clock: trio.testing.MockClock) -> None:
    async with serving_app([]) as app:
        await app.schedule("other", "report", cron="0 * * * * *")
        await app.fire("other", key="k")
        with pytest.raises(TriggerError) as caught:
            await app.fire("t", key="k")
        assert (caught.value.code, caught.value.path) == ("key_conflict", "key")
        with pytest.raises(TriggerError) as caught:
            await app.fire("missing")
        assert caught.value.code == "unknown_trigger"
        await app.pause("t")
        with pytest.raises(TriggerError) as caught:
            await app.fire("t")
        assert caught.value.code == "trigger_paused"
        page = await app.history(trigger_id="t")
        assert page.items == []
