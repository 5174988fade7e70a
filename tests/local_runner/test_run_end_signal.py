"""A LocalRunner tells a scheduler in its process when a run ends (``RunEndSignal``).

Without it a scheduler learns that a run finished only at its next inspection, up to
``run_poll_interval`` (15 s by default) later, and under ``skip`` every boundary in between
meets a trigger that still looks held.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import trio
import trio.testing

from trio_triggers import (
    ControlRunner,
    LocalRunner,
    MemoryRunStore,
    MemoryTriggerStore,
    NoopRunner,
    RunContext,
    RunEndSignal,
    Trigger,
    TrioWallClock,
    open_scheduler,
)
from trio_triggers._store import HistoryQuery

if TYPE_CHECKING:
    from trio.testing import MockClock

EPOCH = 1_800_000_000_000


def test_who_can_tell() -> None:
    assert issubclass(LocalRunner, RunEndSignal)
    assert not isinstance(NoopRunner(), RunEndSignal)
    assert not issubclass(ControlRunner, RunEndSignal)  # settles by polling, as before


async def test_a_local_completion_settles_its_boundary_at_once(autojump_clock: MockClock) -> None:
    clock = TrioWallClock(EPOCH)
    triggers = MemoryTriggerStore(clock=clock)
    runs = MemoryRunStore(clock=clock)
    inspected: list[tuple[float, str]] = []

    async def work(input: Any, run: RunContext) -> str:
        await trio.sleep(1.0)
        return "done"

    runner = LocalRunner(runs, {"work": work}, clock=clock)
    original = runner.inspect

    async def inspect(run_id: str) -> Any:
        state = await original(run_id)
        inspected.append((trio.current_time(), state))
        return state

    runner.inspect = inspect  # type: ignore[method-assign]
    await triggers.register(
        Trigger(id="t", flow_id="work", input=None, cron="* * * * *", timezone="UTC")
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        async with open_scheduler(triggers, runner, clock=clock) as scheduler:  # 15 s polls
            nursery.start_soon(scheduler.serve)
            await trio.sleep(60 + 2.5)  # the first boundary, its 1 s run, and a little more
            page = await triggers.history(HistoryQuery(trigger_id="t"))
            nursery.cancel_scope.cancel()
    assert [item.outcome for item in page.items] == ["completed"]
    # No inspection at all: a run the scheduler has just started is active, so the monitor
    # waits on the runner first; the end is the runner's own committed write, which
    # wait_ended answers, so the monitor records it without inspecting and without waiting
    # out the 15 s poll interval.
    assert inspected == []


async def test_a_waiter_after_the_end_returns_at_once(autojump_clock: MockClock) -> None:
    clock = TrioWallClock(EPOCH)
    runs = MemoryRunStore(clock=clock)

    async def quick(input: Any, run: RunContext) -> None:
        return None

    from trio_triggers import StartRequest

    runner = LocalRunner(runs, {"quick": quick}, clock=clock)
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        run_id = await runner.start(StartRequest("quick", None, "k"))
        with trio.fail_after(5):
            assert await runner.wait_ended(run_id) == "completed"  # the state it wrote
        assert await runner.inspect(run_id) == "completed"
        before = trio.current_time()
        assert await runner.wait_ended(run_id) == "completed"  # already ended: no wait
        assert trio.current_time() == before
        with trio.move_on_after(30) as never:
            await runner.wait_ended("run-that-never-runs-here")
        assert never.cancelled_caught
        nursery.cancel_scope.cancel()
