"""Run states and ledger outcomes of failing, non-zero-exit and cancelled flows (real time).

A scheduler serves every-second triggers through a LocalRunner; command flows are real
processes, so these tests use Trio's real clock with short intervals.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
import trio

from trio_triggers import SystemWallClock, Trigger
from trio_triggers._local_runner import FlowFn, LocalRunner, RunContext, open_local_runner
from trio_triggers._ownership import MemoryRunStore
from trio_triggers._scheduler import SchedulerOptions, StartRequest, open_scheduler
from trio_triggers._store import FireRecord, HistoryQuery, MemoryTriggerStore
from trio_triggers.cli._flows import CommandFlow

pytestmark = pytest.mark.skipif(os.name != "posix", reason="sh commands")

OPTIONS = SchedulerOptions(poll_interval=0.1, run_poll_interval=0.1)


async def boom(input: Any, run: RunContext) -> None:
    raise ValueError("bad input")


async def forever(input: Any, run: RunContext) -> None:
    await trio.sleep_forever()


def trigger(trigger_id: str, flow_id: str) -> Trigger:
    return Trigger.make(
        {
            "id": trigger_id,
            "flow_id": flow_id,
            "input": {},
            "cron": "* * * * * *",
            "timezone": "UTC",
        }
    )


async def first_settled(store: MemoryTriggerStore, trigger_id: str) -> FireRecord:
    with trio.fail_after(10):
        while True:
            page = await store.history(HistoryQuery(trigger_id=trigger_id))
            for record in reversed(page.items):
                if record.outcome not in (None, "launched", "buffered"):
                    return record
            await trio.sleep(0.05)


async def test_raise_nonzero_exit_and_cancel_end_with_the_right_state_and_outcome() -> None:
    clock = SystemWallClock()
    triggers = MemoryTriggerStore(clock=clock)
    runs = MemoryRunStore(clock=clock)
    flows: dict[str, FlowFn] = {
        "boom": boom,
        "exit3": CommandFlow(["sh", "-c", "echo 'disk is full' >&2; exit 3"]),
        "forever": forever,
    }
    for t in (trigger("raises", "boom"), trigger("exits", "exit3"), trigger("hangs", "forever")):
        await triggers.register(t)
    async with (
        open_local_runner(runs, flows, clock=clock) as runner,
        open_scheduler(triggers, runner, options=OPTIONS, clock=clock) as scheduler,
        trio.open_nursery() as nursery,
    ):
        await nursery.start(scheduler.serve)
        raised = await first_settled(triggers, "raises")
        exited = await first_settled(triggers, "exits")
        with trio.fail_after(10):
            while not (hung := await triggers.active_run("hangs")) or hung.startswith(  # noqa: ASYNC110
                "trigger-reservation:"
            ):
                await trio.sleep(0.05)
        await runner.cancel(hung)
        cancelled = await first_settled(triggers, "hangs")
        nursery.cancel_scope.cancel()

    assert raised.outcome == "failed"
    assert raised.error == f"Run {raised.run_id} failed"
    assert raised.run_id is not None
    row = await runs.get(raised.run_id)
    assert (row.status, row.error) == ("failed", "ValueError: bad input")

    assert exited.outcome == "failed"
    assert exited.run_id is not None
    row = await runs.get(exited.run_id)
    assert row.status == "failed"
    assert row.error == "CommandFailed: command sh exited with status 3: disk is full"

    assert cancelled.outcome == "failed"
    assert cancelled.run_id == hung
    assert cancelled.error == f"Run {hung} was cancelled"
    row = await runs.get(hung)
    assert (row.status, row.error) == ("cancelled", "cancel requested")


async def test_command_flow_passes_input_and_key_and_parses_json_result() -> None:
    clock = SystemWallClock()
    runs = MemoryRunStore(clock=clock)
    script = 'printf \'{"key": "%s", "got": %s}\' "$TT_IDEMPOTENCY_KEY" "$(cat)"'
    flows = {"echo": CommandFlow(["sh", "-c", script]), "text": CommandFlow(["echo", "plain"])}
    async with open_local_runner(runs, flows, clock=clock) as runner:
        json_run = await runner.start(StartRequest("echo", {"n": 1}, "k-json"))
        text_run = await runner.start(StartRequest("text", None, "k-text"))
        await _wait_completed(runner, json_run)
        await _wait_completed(runner, text_run)
    assert (await runs.get(json_run)).result_json == '{"key":"k-json","got":{"n":1}}'
    assert (await runs.get(text_run)).result_json == '"plain"'


async def test_command_timeout_fails_the_run_and_kills_the_process() -> None:
    clock = SystemWallClock()
    runs = MemoryRunStore(clock=clock)
    flows = {"slow": CommandFlow(["sleep", "30"], timeout=0.2)}
    async with open_local_runner(runs, flows, clock=clock) as runner:
        run_id = await runner.start(StartRequest("slow", None, "k"))
        with trio.fail_after(10):
            while await runner.inspect(run_id) == "active":  # noqa: ASYNC110 - polling the store
                await trio.sleep(0.05)
    row = await runs.get(run_id)
    assert row.status == "failed"
    assert row.error == "CommandFailed: command sleep timed out after 0.2 s"


async def _wait_completed(runner: LocalRunner, run_id: str) -> None:
    with trio.fail_after(10):
        while (state := await runner.inspect(run_id)) == "active":  # noqa: ASYNC110
            await trio.sleep(0.05)
    assert state == "completed"
