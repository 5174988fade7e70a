"""``Triggers.cancel``: a run is cancelled through the run store and its boundary settles."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
import trio
import trio.testing

import trio_triggers
from trio_triggers import RunContext, RunStoreError, StartRequest, TrioWallClock
from trio_triggers._app import cancel_run

if TYPE_CHECKING:
    from trio_triggers import FireRecord, Triggers

EPOCH = 1_800_000_000_000  # a whole minute: "* * * * *" fires at EPOCH + 60 s


class Held:
    """A flow that runs until it is cancelled, noting that it started and how it stopped."""

    def __init__(self) -> None:
        self.started = trio.Event()
        self.run_id: str | None = None
        self.stopped_by_cancel = False
        self.saw_request = False

    async def __call__(self, input: Any, run: RunContext) -> None:
        self.run_id = run.run_id
        self.started.set()
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            self.stopped_by_cancel = True
            self.saw_request = run.cancel_requested
            raise


async def _settled(app: Triggers, run_id: str) -> FireRecord:
    """The ledger row of ``run_id`` once it has an outcome other than ``launched``."""
    while True:
        page = await app.history(run_id=run_id)
        if page.items and page.items[0].outcome not in (None, "launched"):
            return page.items[0]
        await trio.sleep(0.1)


async def test_cancel_a_running_flow_and_the_ledger_settles(
    autojump_clock: trio.testing.MockClock,
) -> None:
    held = Held()
    async with trio_triggers.open_triggers(":memory:", clock=TrioWallClock(EPOCH)) as app:
        app.flow("held")(held)
        await app.schedule("h", "held", cron="* * * * *")
        async with trio.open_nursery() as nursery:
            await nursery.start(app.serve)
            await held.started.wait()
            assert held.run_id is not None
            run_id = held.run_id

            report = await app.cancel(run_id)
            assert report.run_id == run_id
            assert report.status == "running"  # as the request found it
            assert report.cancel_requested_at == EPOCH + 60_000

            record = await _settled(app, run_id)
            after = await app.run(run_id)
            again = await app.cancel(run_id)  # an ended run: nothing changes
            nursery.cancel_scope.cancel()
    assert held.stopped_by_cancel
    assert held.saw_request
    assert after is not None
    assert after.status == "cancelled"
    assert after.finished_at == EPOCH + 60_000  # this runner owns it: stopped at once
    # triggers.md §12.4: a cancelled run settles its boundary as failed, with this message.
    assert record.trigger_id == "h"
    assert record.occurrence == EPOCH + 60_000
    assert record.outcome == "failed"
    assert record.error == f"Run {run_id} was cancelled"
    assert again == after


async def test_a_request_from_elsewhere_is_seen_within_a_heartbeat(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """What ``trio-triggers cancel`` does: only the row changes; the worker notices it."""
    held = Held()
    clock = TrioWallClock(EPOCH)
    async with trio_triggers.open_triggers(":memory:", clock=clock) as app:
        app.flow("held")(held)
        await app.schedule("h", "held", cron="* * * * *")
        async with trio.open_nursery() as nursery:
            await nursery.start(app.serve)
            await held.started.wait()
            assert held.run_id is not None
            requested = await cancel_run(app.runs, held.run_id, clock)  # no runner told
            assert requested.status == "running"
            assert requested.cancel_requested_at == clock.now_ms()
            await trio.sleep(1.5)  # one heartbeat interval (1 s), and some
            report = await app.run(held.run_id)
            record = await _settled(app, held.run_id)
            nursery.cancel_scope.cancel()
    assert report is not None
    assert report.status == "cancelled"
    assert held.stopped_by_cancel
    assert record.outcome == "failed"


async def test_a_pending_run_is_cancelled_without_running(
    autojump_clock: trio.testing.MockClock,
) -> None:
    calls: list[Any] = []
    async with trio_triggers.open_triggers(":memory:", clock=TrioWallClock(EPOCH)) as app:

        @app.flow
        async def never(input: Any, run: RunContext) -> None:
            calls.append(input)

        run_id = await app.runner.start(StartRequest("never", {"n": 1}, "by-hand-1"))
        report = await app.cancel(run_id)  # nobody serves: the run is still pending
        assert report.status == "pending"
        assert report.cancel_requested_at == EPOCH
        first = report.cancel_requested_at
        await trio.sleep(5)
        repeated = await app.cancel(run_id)
        assert repeated.status == "pending"
        assert repeated.cancel_requested_at == first  # the first request's instant is kept
        async with trio.open_nursery() as nursery:
            await nursery.start(app.serve)
            await trio.sleep(2)
            nursery.cancel_scope.cancel()
        after = await app.run(run_id)
    assert after is not None
    assert after.status == "cancelled"
    assert after.error == "cancel requested before the run"
    assert calls == []


async def test_an_ended_run_is_left_as_it_is(autojump_clock: trio.testing.MockClock) -> None:
    async with trio_triggers.open_triggers(":memory:", clock=TrioWallClock(EPOCH)) as app:

        @app.flow
        async def quick(input: Any, run: RunContext) -> str:
            return "done"

        run_id = await app.runner.start(StartRequest("quick", None, "by-hand-2"))
        async with trio.open_nursery() as nursery:
            await nursery.start(app.serve)
            await trio.sleep(2)
            nursery.cancel_scope.cancel()
        before = await app.run(run_id)
        report = await app.cancel(run_id)
        after = await app.run(run_id)
    assert before is not None
    assert before.status == "completed"
    assert report == before == after
    assert report.cancel_requested_at is None
    assert report.result == "done"


@pytest.mark.parametrize("run_id", ["run-nobody", ""])
async def test_an_unknown_run_is_a_typed_error_and_writes_nothing(
    autojump_clock: trio.testing.MockClock, run_id: str
) -> None:
    async with trio_triggers.open_triggers(":memory:", clock=TrioWallClock(EPOCH)) as app:
        with pytest.raises(RunStoreError) as caught:
            await app.cancel(run_id)
        assert await app.list_runs() == []
    assert caught.value.code == ("not_found_row" if run_id else "invalid_run")
