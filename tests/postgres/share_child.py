"""One scheduler process of the shared-database test (``test_shared_schedulers.py``).

``python -m tests.postgres.share_child DB HOST RUNNER SECONDS`` serves a scheduler on the trigger
store of ``DB`` (a ``postgresql://`` DSN or a SQLite file) with ``RUNNER`` = ``noop`` (a
:class:`~trio_triggers.NoopRunner`: run id = idempotency key, inspection answers completed) or
``local`` (a :class:`~trio_triggers.LocalRunner` on the same database whose one flow returns at
once), for ``SECONDS`` of real time, then stops by itself. It prints one JSON line on stdout when
it is serving (``{"ready": now_ms}``) and one when it has stopped (``{"stopped": now_ms,
"launches": n}``).
"""

from __future__ import annotations

import json
import sys
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import trio

import trio_triggers as tt
from trio_triggers._ownership import open_sqlite_run_store
from trio_triggers._sqlite import SqliteDatabase
from trio_triggers._store import SqliteTriggerStore
from trio_triggers.postgres import (
    is_postgres_dsn,
    open_postgres_stores,
    open_postgres_trigger_store,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

OPTIONS = {"poll_interval": 0.5, "run_poll_interval": 0.1, "concurrency": 8, "start_timeout": 10}


async def flow(value: Any, run: tt.RunContext) -> dict[str, Any]:
    await trio.lowlevel.checkpoint()
    return {"input": value}


@asynccontextmanager
async def open_runner(
    db: str, kind: str, clock: tt.WallClock, counter: list[int]
) -> AsyncIterator[tuple[tt.TriggerStore, tt.Runner]]:
    if kind == "noop":

        async def start(request: tt.StartRequest) -> str:
            counter[0] += 1
            await trio.lowlevel.checkpoint()
            return request.idempotency_key

        runner = tt.NoopRunner(start=start)
        if is_postgres_dsn(db):
            async with open_postgres_trigger_store(db, clock=clock) as store:
                yield store, runner
        else:
            async with tt.open_sqlite_trigger_store(db, clock=clock) as lite:
                yield lite, runner
        return

    @asynccontextmanager
    async def stores() -> AsyncIterator[tuple[tt.TriggerStore, Any]]:
        if is_postgres_dsn(db):
            async with open_postgres_stores(db, clock=clock) as pair:
                yield pair.trigger_store, pair.run_store
            return
        database = await SqliteDatabase.open(db)
        try:
            triggers = await SqliteTriggerStore.open(database, clock=clock)
            async with open_sqlite_run_store(database, clock=clock) as runs:
                yield triggers, runs
        finally:
            await database.aclose()

    async with (
        stores() as (triggers, runs),
        tt.open_local_runner(runs, {"flow": flow}, clock=clock, poll_interval=0.1) as local,
    ):

        class Counting:
            async def start(self, request: tt.StartRequest) -> str:
                counter[0] += 1
                return await local.start(request)

            async def inspect(self, run_id: str) -> tt.RunState:
                return await local.inspect(run_id)

            async def cancel(self, run_id: str) -> None:
                await local.cancel(run_id)

        yield triggers, Counting()


async def main(db: str, host: str, kind: str, seconds: float) -> None:
    clock = tt.SystemWallClock()
    counter = [0]
    options = tt.SchedulerOptions(host=host, **OPTIONS)  # type: ignore[arg-type]
    async with (
        open_runner(db, kind, clock, counter) as (store, runner),
        tt.open_scheduler(store, runner, options=options, clock=clock) as scheduler,
        trio.open_nursery() as nursery,
    ):
        await nursery.start(scheduler.serve)
        print(json.dumps({"ready": clock.now_ms()}), flush=True)
        await trio.sleep(seconds)
        nursery.cancel_scope.cancel()
    print(json.dumps({"stopped": clock.now_ms(), "launches": counter[0]}), flush=True)


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]))
