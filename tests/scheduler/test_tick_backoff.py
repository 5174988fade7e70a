"""A tick that fails is retried after a pause that doubles, and the outage is two log lines.

Without the pause, a store that fails at once (a full disk, a server that is down) is retried at
once, since what is due stays due: the loop spins and logs a traceback per attempt (found by the
disk-full experiment, tests/faults/test_sqlite_faults.py: about 300 failed ticks a second).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio

from trio_triggers._scheduler import SchedulerOptions, open_scheduler
from trio_triggers._scheduler._core import TICK_RETRY_FIRST_PAUSE_S, TICK_RETRY_MAX_PAUSE_S

from .harness import H, RecordingStore, ScriptedRunner, Sim, hourly

if TYPE_CHECKING:
    import pytest
    from trio.testing import MockClock


async def test_failed_ticks_back_off_then_one_line_says_the_store_is_back(
    autojump_clock: MockClock,
    sim: Sim,
    store: RecordingStore,
    runner: ScriptedRunner,
    caplog: pytest.LogCaptureFixture,
) -> None:
    await store.inner.register(hourly())
    failures = 8
    # The boundary H falls due during the outage (a failed tick leaves it due, so without the
    # pause every later failure would follow at once, at H).
    await sim.advance_to(H - 5_000)
    caplog.set_level(logging.DEBUG, logger="trio_triggers.scheduler")
    launched = trio.Event()

    async def start_hook(request: object) -> None:
        launched.set()

    runner.start_hook = start_hook
    async with (
        open_scheduler(
            store, runner, options=SchedulerOptions(poll_interval=60), clock=sim.clock
        ) as scheduler,
        trio.open_nursery() as nursery,
    ):
        await scheduler.run_once()  # first sight: from here on the trigger owes H
        store.fail["list"] = [RuntimeError("the disk is full")] * failures
        began = trio.current_time()
        await nursery.start(scheduler.serve)
        await launched.wait()
        took = trio.current_time() - began
        nursery.cancel_scope.cancel()
    pauses, pause = [], TICK_RETRY_FIRST_PAUSE_S
    for _ in range(failures):
        pauses.append(pause)
        pause = min(pause * 2, TICK_RETRY_MAX_PAUSE_S)
    assert sum(pauses) - 0.001 <= took < sum(pauses) + 0.1  # 0.1, 0.2, ... 5, 5: 16.3 s
    assert store.count("list") == failures + 2
    assert runner.keys == ["hourly:1970-01-01T01:00:00.000Z"]
    lines = [(r.levelno, r.getMessage()) for r in caplog.records if r.levelno >= logging.WARNING]
    assert [m for _, m in lines if "scheduler tick" in m] == [
        "A trigger scheduler tick failed",
        "A trigger scheduler tick succeeded again",
    ]
    began_record = next(r for r in caplog.records if r.getMessage().endswith("tick failed"))
    assert began_record.levelno == logging.ERROR
    assert began_record.error == "RuntimeError: the disk is full"  # type: ignore[attr-defined]
    ended = next(r for r in caplog.records if r.getMessage().endswith("succeeded again"))
    assert ended.failed_ticks == failures  # type: ignore[attr-defined]
    again = [r for r in caplog.records if r.getMessage().endswith("tick failed again")]
    assert len(again) == failures - 1
    assert all(r.levelno == logging.DEBUG for r in again)


async def test_a_run_inspection_failing_again_and_again_is_one_warning(
    autojump_clock: MockClock,
    sim: Sim,
    store: RecordingStore,
    runner: ScriptedRunner,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A database restart with runs in flight made every monitor log a warning with a
    traceback for every inspection attempt; the first says why, the retries are debug lines."""
    await store.inner.register(hourly())
    await sim.advance_to(H - 1_000)
    runner.fail_inspects = [RuntimeError("the server is restarting")] * 3
    caplog.set_level(logging.DEBUG, logger="trio_triggers.scheduler")
    async with open_scheduler(store, runner, clock=sim.clock) as scheduler:
        await scheduler.run_once()  # first sight
        await sim.tick(scheduler, H)
        runner.stop_all()
        await trio.sleep(600)  # the monitor retries, then sees the run completed
    failed = [r for r in caplog.records if r.getMessage() == "A trigger run inspection failed"]
    assert [r.levelno for r in failed] == [logging.WARNING, logging.DEBUG, logging.DEBUG]
    assert failed[0].exc_info is not None
    assert store.outcomes()[-1] == "completed"
