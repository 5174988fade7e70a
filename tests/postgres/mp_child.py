"""One scheduler process of the multi-process soak test (``test_multiprocess.py``).

``python -m tests.postgres.mp_child DB HOST STALE_AFTER_MS`` opens the trigger store and the run
store of ``DB`` (a ``postgresql://`` DSN or a SQLite file), serves a ``LocalRunner`` whose one
flow (``"flow"``) sleeps briefly and completes, and serves a scheduler on top of it, until it is
killed. It prints ``ready`` on stdout once both are serving. Everything uses the system clock:
this is a real-time test of real processes.
"""

from __future__ import annotations

import sys
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import trio

from trio_triggers import SystemWallClock, WallClock
from trio_triggers._local_runner import RunContext, open_local_runner
from trio_triggers._ownership import RunStoreBase, open_sqlite_run_store
from trio_triggers._scheduler import SchedulerOptions, open_scheduler
from trio_triggers._sqlite import SqliteDatabase
from trio_triggers._store import SqliteTriggerStore, TriggerStore
from trio_triggers.postgres import is_postgres_dsn, open_postgres_stores

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

FLOW_SECONDS = 0.1


async def flow(value: Any, run: RunContext) -> dict[str, Any]:
    await trio.sleep(FLOW_SECONDS)
    return {"input": value}


@asynccontextmanager
async def open_both(
    db: str, clock: WallClock, stale_after_ms: int
) -> AsyncIterator[tuple[TriggerStore, RunStoreBase]]:
    if is_postgres_dsn(db):
        async with open_postgres_stores(db, clock=clock, stale_after_ms=stale_after_ms) as pair:
            yield pair.trigger_store, pair.run_store
        return
    database = await SqliteDatabase.open(db)
    try:
        triggers = await SqliteTriggerStore.open(database, clock=clock)
        async with open_sqlite_run_store(
            database, clock=clock, stale_after_ms=stale_after_ms
        ) as runs:
            yield triggers, runs
    finally:
        await database.aclose()


async def main(db: str, host: str, stale_after_ms: int) -> None:
    clock = SystemWallClock()
    options = SchedulerOptions(
        host=host, poll_interval=0.5, run_poll_interval=0.25, concurrency=8, start_timeout=10
    )
    async with (
        open_both(db, clock, stale_after_ms) as (triggers, runs),
        open_local_runner(
            runs, {"flow": flow}, clock=clock, concurrency=16, poll_interval=0.2
        ) as runner,
        open_scheduler(triggers, runner, options=options, clock=clock) as scheduler,
        trio.open_nursery() as nursery,
    ):
        await nursery.start(scheduler.serve)
        print("ready", flush=True)
        await trio.sleep_forever()


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2], int(sys.argv[3]))
