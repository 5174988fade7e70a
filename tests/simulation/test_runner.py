"""The scripted runner: §18.1 fixture behaviour, durable deduplication, scripted runs."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from trio_triggers import TriggerError
from trio_triggers.testing import RunPlan, ScriptedRunner


class Req:
    def __init__(self, key: str) -> None:
        self.flow_id = "flow"
        self.input = {"k": key}
        self.idempotency_key = key


async def test_fixture_behaviour() -> None:
    runner = ScriptedRunner()
    assert await runner.start(Req("a")) == "run-1"
    assert await runner.start(Req("b")) == "run-2"
    assert runner.active == {"run-1", "run-2"}
    assert await runner.inspect("run-1") == "active"
    await runner.cancel("run-1")
    assert runner.cancelled == ["run-1"]
    assert await runner.inspect("run-1") == "cancelled"
    assert await runner.inspect("unknown") == "completed"
    runner.set_state("run-2", "failed")
    assert await runner.inspect("run-2") == "failed"
    assert runner.inspected == ["run-1", "run-1", "unknown", "run-2"]


async def test_duplicate_start_answers_the_same_run_and_is_visible() -> None:
    runner = ScriptedRunner()
    first = await runner.start(Req("k"))
    again = await runner.start(Req("k"))
    assert first == again == "run-1"
    assert len(runner.starts) == 2
    assert runner.duplicate_starts == 1
    assert runner.run_for_key("k") == "run-1"


async def test_fail_first_starts_still_count() -> None:
    runner = ScriptedRunner(fail_starts=1, fail_with=TriggerError("store", "nope"))
    with pytest.raises(TriggerError) as info:
        await runner.start(Req("a"))
    assert info.value.code == "store"
    assert await runner.start(Req("a")) == "run-2"
    assert len(runner.starts) == 2


async def test_scripted_durations_and_outcomes(autojump_clock: trio.testing.MockClock) -> None:
    def plan(request: Req, attempt: int) -> RunPlan:
        return RunPlan(duration=60.0, outcome="failed")

    runner = ScriptedRunner(plan=plan)  # type: ignore[arg-type]
    run_id = await runner.start(Req("a"))
    assert await runner.inspect(run_id) == "active"
    await trio.sleep(59)
    assert await runner.inspect(run_id) == "active"
    await trio.sleep(1)
    assert await runner.inspect(run_id) == "failed"


async def test_hanging_and_late_starts(autojump_clock: trio.testing.MockClock) -> None:
    plans = {
        "hang": RunPlan(start="hang"),
        "late": RunPlan(start="late", start_delay=300.0, duration=None),
        "created": RunPlan(start="hang_after_create", duration=None),
        "refuse": RunPlan(start="refuse"),
    }
    runner = ScriptedRunner(plan=lambda request, attempt: plans[request.idempotency_key])
    with trio.move_on_after(240) as scope:
        await runner.start(Req("hang"))
    assert scope.cancelled_caught
    assert runner.run_for_key("hang") is None
    with trio.move_on_after(240) as scope:
        await runner.start(Req("created"))
    assert scope.cancelled_caught
    assert runner.run_for_key("created") is not None
    started = trio.current_time()
    assert await runner.start(Req("late")) == runner.run_for_key("late")
    assert trio.current_time() - started == 300.0
    with pytest.raises(TriggerError) as info:
        await runner.start(Req("refuse"))
    assert info.value.code == "runner"
    assert runner.run_for_key("refuse") is None


async def test_inspect_and_cancel_faults(autojump_clock: trio.testing.MockClock) -> None:
    runner = ScriptedRunner(inspect_fault=lambda run_id: "fail", cancel_fault=lambda run_id: "hang")
    run_id = await runner.start(Req("a"))
    with pytest.raises(TriggerError):
        await runner.inspect(run_id)
    with trio.move_on_after(30) as scope:
        await runner.cancel(run_id)
    assert scope.cancelled_caught
    assert runner.state_of(run_id) == "active"


async def test_stop_all_and_limit_remaining(autojump_clock: trio.testing.MockClock) -> None:
    runner = ScriptedRunner(plan=lambda request, attempt: RunPlan(duration=None))
    a = await runner.start(Req("a"))
    b = await runner.start(Req("b"))
    runner.limit_remaining(10.0)
    await trio.sleep(10)
    assert runner.state_of(a) == runner.state_of(b) == "completed"
    c = await runner.start(Req("c"))
    runner.stop_all("failed")
    assert runner.state_of(c) == "failed"
