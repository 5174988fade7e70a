"""A failed or ambiguous write never strands a run, a reservation or the ledger.

One store failure at a time is injected into the run path, on every backend: a write that
fails before its transaction (nothing written) and one that fails after its commit (the write
landed, the answer was lost). The rule under test (docs/local-runner.md, "When a write fails";
docs/scheduler.md, "A failed compensation is retried"): every write on the run path is retried
with backoff, and whether it landed is read from the row, never concluded from the exception.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import pytest
import trio
import trio.testing

from tests.pg_support import fresh_schema, postgres_marks
from trio_triggers import (
    MemoryRunStore,
    MemoryTriggerStore,
    SchedulerOptions,
    ThreadExecutor,
    Trigger,
    TriggerError,
    TrioWallClock,
    open_scheduler,
    open_sqlite_run_store,
    open_sqlite_trigger_store,
)
from trio_triggers._local_runner import LocalRunner, RunContext, open_local_runner
from trio_triggers._scheduler import RunState, StartRequest
from trio_triggers.testing import AutojumpGuardExecutor, FaultyRunStore, FaultyTriggerStore

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

    from trio_triggers._ownership import RunStore
    from trio_triggers._store import TriggerStore

EPOCH = 1_800_000_000_000  # 2027-01-15T08:00:00Z: a whole ten seconds
SECOND = 1000


class Stores:
    def __init__(self, runs: RunStore, triggers: TriggerStore, clock: TrioWallClock) -> None:
        self.runs = runs
        self.triggers = triggers
        self.clock = clock


@contextlib.asynccontextmanager
async def open_backend(
    name: str, tmp_path: Path, mock: trio.testing.MockClock
) -> AsyncIterator[Stores]:
    clock = TrioWallClock(EPOCH)
    if name == "memory":
        yield Stores(MemoryRunStore(clock=clock), MemoryTriggerStore(clock=clock), clock)
    elif name == "sqlite":
        path = str(tmp_path / "tt.sqlite")
        async with (
            open_sqlite_run_store(path, clock=clock) as runs,
            open_sqlite_trigger_store(path, clock=clock) as triggers,
        ):
            yield Stores(runs, triggers, clock)
    else:
        from trio_triggers.postgres import open_postgres_run_store, open_postgres_trigger_store

        guard = AutojumpGuardExecutor(ThreadExecutor(4), mock)
        with fresh_schema() as dsn:
            async with (
                open_postgres_run_store(dsn, clock=clock, executor=guard) as runs,
                open_postgres_trigger_store(dsn, clock=clock, executor=guard) as triggers,
            ):
                yield Stores(runs, triggers, clock)


BACKENDS = [
    pytest.param("memory"),
    pytest.param("sqlite"),
    pytest.param("postgres", marks=postgres_marks()),
]


@pytest.fixture(params=BACKENDS)
async def stores(
    request: pytest.FixtureRequest, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> AsyncIterator[Stores]:
    async with open_backend(request.param, tmp_path, autojump_clock) as opened:
        yield opened


def every_ten_seconds(trigger_id: str = "t") -> Trigger:
    return Trigger.make(
        {"id": trigger_id, "flow_id": "f", "input": {}, "cron": "*/10 * * * * *", "overlap": "skip"}
    )


OPTIONS = SchedulerOptions(poll_interval=1, run_poll_interval=0.5)


# --- 1: the outcome of a run is written, however often its write fails -------------------


@pytest.mark.parametrize("after_commit", [False, True], ids=["before-commit", "answer-lost"])
async def test_a_failed_final_write_is_retried_until_the_run_is_settled(
    stores: Stores, autojump_clock: trio.testing.MockClock, after_commit: bool
) -> None:
    """The final ``transition_owned`` and the first retry both fail: the run still ends
    ``completed`` (it used to stay ``running`` under its live owner forever) and its flow ran
    once."""
    runs = FaultyRunStore(stores.runs)
    executed: list[str] = []

    async def flow(value: Any, run: RunContext) -> str:
        executed.append(run.run_id)
        await trio.sleep(1)
        runs.fail_next("transition_owned", 2, after_commit=after_commit)
        return "done"

    async with open_local_runner(runs, {"f": flow}, clock=stores.clock) as runner:
        run_id = await runner.start(StartRequest("f", None, "k1"))
        with trio.fail_after(60):
            while await runner.inspect(run_id) == "active":  # noqa: ASYNC110 - a store read
                await trio.sleep(0.5)
            await runner.running_count.wait_value(0)
    row = await stores.runs.get(run_id)
    assert (row.status, row.result_json, row.owner) == ("completed", '"done"', None)
    assert executed == [run_id]


async def test_a_run_left_running_by_its_live_owner_is_settled_by_it(
    stores: Stores, autojump_clock: trio.testing.MockClock
) -> None:
    """Every run-store write fails for 40 s after the flow ended: the worker loses its lease
    (its heartbeats fail too) and cannot hand the run back. The run stays ``running`` under
    this process, whose own dispatcher (nobody else may: the owner's pid is alive) writes the
    outcome the flow reached once the store is back, without executing the flow again."""
    outage: dict[str, float] = {}

    def decide(caller: str, method: str, args: tuple[Any, ...]) -> Any:
        from trio_triggers.testing import Fault

        start = outage.get("start")
        writes = method not in ("get", "find_claimable", "list_runs")
        if start is not None and writes and trio.current_time() < start + 40:
            return Fault(kind="fail_before")
        return None

    runs = FaultyRunStore(stores.runs, decide=decide)
    executed: list[str] = []

    async def flow(value: Any, run: RunContext) -> str:
        executed.append(run.run_id)
        await trio.sleep(1)
        outage["start"] = trio.current_time()
        return "done"

    async with open_local_runner(runs, {"f": flow}, clock=stores.clock) as runner:
        run_id = await runner.start(StartRequest("f", None, "k1"))
        with trio.fail_after(300):
            while await runner.inspect(run_id) == "active":  # noqa: ASYNC110 - a store read
                await trio.sleep(1)
    row = await stores.runs.get(run_id)
    assert (row.status, row.result_json) == ("completed", '"done"')
    assert executed == [run_id]


# --- 2 and 3: the launch path ------------------------------------------------------------


async def serve_for(
    triggers: TriggerStore, runner: Any, clock: TrioWallClock, seconds: float
) -> None:
    async with (
        open_scheduler(triggers, runner, options=OPTIONS, clock=clock) as scheduler,
        trio.open_nursery() as nursery,
    ):
        await nursery.start(scheduler.serve)
        await trio.sleep(seconds)
        nursery.cancel_scope.cancel()


async def outcomes(triggers: TriggerStore) -> list[tuple[int, str | None, str | None]]:
    page = await triggers.history()
    return sorted(
        ((row.occurrence - EPOCH) // SECOND, row.outcome, row.run_id) for row in page.items
    )


async def test_a_create_whose_answer_was_lost_finds_its_run(
    stores: Stores, autojump_clock: trio.testing.MockClock
) -> None:
    """``create`` commits, then the caller sees a failure: the launch retries it, finds the run
    by its idempotency key, and the ledger and the run agree (the boundary used to be recorded
    ``failed`` with the reservation as run id while its run was executed and completed)."""
    runs = FaultyRunStore(stores.runs)
    runs.fail_next("create", after_commit=True)
    executed: list[str | None] = []  # each run executed once

    async def flow(value: Any, run: RunContext) -> None:
        executed.append(run.idempotency_key)

    await stores.triggers.register(every_ten_seconds())
    async with open_local_runner(runs, {"f": flow}, clock=stores.clock) as runner:
        await serve_for(stores.triggers, runner, stores.clock, 35)
        await trio.sleep(2)
    ledger = await outcomes(stores.triggers)
    assert [(at, outcome) for at, outcome, _ in ledger] == [
        (10, "completed"),
        (20, "completed"),
        (30, "completed"),
    ]
    by_key = {row.idempotency_key: row for row in await stores.runs.list_runs()}  # type: ignore[attr-defined]
    assert len(by_key) == 3
    for at, _, run_id in ledger:
        key = f"t:{trio_iso(EPOCH + at * SECOND)}"
        assert by_key[key].run_id == run_id
        assert by_key[key].status == "completed"
    assert sorted(str(key) for key in executed) == sorted(str(key) for key in by_key)


def trio_iso(instant_ms: int) -> str:
    from trio_triggers._identities import iso

    return iso(instant_ms)


class RefusesOnce:
    """A runner whose first start is refused before any run exists; then one run per key."""

    def __init__(self) -> None:
        self.refused = False
        self.started: list[str] = []

    async def start(self, request: StartRequest) -> str:
        await trio.lowlevel.checkpoint()
        if not self.refused:
            self.refused = True
            raise TriggerError("runner", "no capacity")
        self.started.append(request.idempotency_key)
        return f"run-{len(self.started)}"

    async def inspect(self, run_id: str) -> RunState:
        await trio.lowlevel.checkpoint()
        return "completed"

    async def cancel(self, run_id: str) -> None:
        await trio.lowlevel.checkpoint()


@pytest.mark.parametrize("after_commit", [False, True], ids=["before-commit", "answer-lost"])
async def test_a_failed_record_of_a_refused_launch_never_hides_later_boundaries(
    stores: Stores, autojump_clock: trio.testing.MockClock, after_commit: bool
) -> None:
    """The runner refuses the first boundary's start and recording that ``failed`` fails too:
    the record is retried (or found landed), the reservation is given back, and every later
    boundary launches (they used to be ``skipped`` for the reservation's 5-minute lease)."""
    triggers = FaultyTriggerStore(stores.triggers)
    original = triggers.record_result

    async def record_result(result: Any) -> None:
        if result.outcome == "failed" and not getattr(triggers, "failed_once", False):
            triggers.failed_once = True  # type: ignore[attr-defined]
            triggers.fail_next("record_result", after_commit=after_commit)
        await original(result)

    triggers.record_result = record_result  # type: ignore[method-assign]
    await stores.triggers.register(every_ten_seconds())
    runner = RefusesOnce()
    await serve_for(triggers, runner, stores.clock, 45)
    ledger = await outcomes(stores.triggers)
    assert [(at, outcome) for at, outcome, _ in ledger] == [
        (10, "failed"),
        (20, "completed"),
        (30, "completed"),
        (40, "completed"),
    ]
    assert (await stores.triggers.inspect("t")).active_run_id is None


# --- 4: a claim that commits while the runner stops --------------------------------------


class SlowAnswer:
    """A run store whose ``method`` (``claim_and_own`` unless told) commits and then takes a
    while to answer, as a cancelled call into a worker thread does: the caller sees its
    cancellation only after the transaction has committed."""

    def __init__(self, inner: RunStore, method: str = "claim_and_own") -> None:
        self.inner = inner
        self.method = method
        self.claiming = trio.Event()  # set once ``method`` is called

    def __getattr__(self, name: str) -> Any:
        found = getattr(self.inner, name)
        if name != self.method:
            return found

        async def committed_then_late(*args: Any, **kwargs: Any) -> Any:
            self.claiming.set()
            answer = await found(*args, **kwargs)
            with trio.CancelScope(shield=True):
                await trio.sleep(0.2)  # the thread returning
            await trio.lowlevel.checkpoint()  # then Cancelled is delivered
            return answer

        return committed_then_late


async def test_a_claim_that_commits_during_a_stop_is_handed_back(
    stores: Stores, autojump_clock: trio.testing.MockClock
) -> None:
    """The runner stops while its claim is in flight and the claim commits: the run is handed
    back ``suspended`` at once (it used to stay ``running`` under the exiting owner, so the
    next process waited out the lease), and its flow never started."""
    store = SlowAnswer(stores.runs)
    ran: list[str] = []

    async def flow(value: Any, run: RunContext) -> None:
        ran.append(run.run_id)

    runner = LocalRunner(store, {"f": flow}, clock=stores.clock)
    # Created ``pending`` (as by a runner without room), so this runner's dispatcher claims it.
    created = await stores.runs.create("run-k1", "null", flow_id="f", idempotency_key="k1")
    run_id = created.row.run_id
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        await store.claiming.wait()
        nursery.cancel_scope.cancel()
    row = await stores.runs.get(run_id)
    assert (row.status, row.owner, ran) == ("suspended", None, [])

    # The next runner starts it at once (no lease to wait out).
    async with open_local_runner(stores.runs, {"f": flow}, clock=stores.clock) as second:
        with trio.fail_after(5):
            while await second.inspect(run_id) == "active":  # noqa: ASYNC110 - a store read
                await trio.sleep(0.1)
    assert ran == [run_id]


async def test_an_owned_create_whose_start_was_cancelled_is_executed_once(
    stores: Stores, autojump_clock: trio.testing.MockClock
) -> None:
    """A start creates its run already running under the runner, and the caller gives up on
    the start (its deadline) after the create committed: the runner reads the row and executes
    the run (it used to wait, running under its live owner with no worker, for its lease)."""
    store = SlowAnswer(stores.runs, "create_owned")
    ran: list[str | None] = []

    async def flow(value: Any, run: RunContext) -> None:
        ran.append(run.idempotency_key)

    runner = LocalRunner(store, {"f": flow}, clock=stores.clock)
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        with trio.move_on_after(0.1) as scope:
            await runner.start(StartRequest("f", None, "k1"))
        assert scope.cancelled_caught
        with trio.fail_after(5):
            while ran == []:  # noqa: ASYNC110 - the flow's own record
                await trio.sleep(0.1)
        await trio.sleep(1)
        nursery.cancel_scope.cancel()
    (row,) = await stores.runs.list_runs()  # type: ignore[attr-defined]
    assert (row.status, row.attempts, ran) == ("completed", 1, ["k1"])
