"""A scheduler on PostgreSQL survives losing its database connections.

The scheduler runs under ``MockClock``; the store's thread executor is wrapped in
``AutojumpGuardExecutor`` so simulated time cannot jump while a database call is in flight.
"""

from __future__ import annotations

import logging
import time
import uuid
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import pendulum
import psycopg
import psycopg.conninfo
import pytest
import trio
import trio.testing

from tests.pg_support import admin_connection
from trio_triggers import ThreadExecutor, TrioWallClock
from trio_triggers._declarations import Trigger
from trio_triggers._identities import idempotency_key
from trio_triggers._scheduler import (
    RunState,
    Scheduler,
    SchedulerOptions,
    StartRequest,
    open_scheduler,
)
from trio_triggers.postgres import PostgresTriggerStore, open_postgres_trigger_store
from trio_triggers.testing import AutojumpGuardExecutor

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

pytestmark = pytest.mark.postgres

EPOCH = int(pendulum.datetime(2026, 1, 1, 0, 0, 30).timestamp() * 1000)  # 00:00:30Z
MINUTE = 60_000
BOUNDARY = EPOCH - 30_000  # 00:00:00Z
APP = f"tt-recovery-{uuid.uuid4().hex[:8]}"


class DedupRunner:
    """Records every start; one run per idempotency key; every run is completed at once."""

    def __init__(self) -> None:
        self.starts: list[str] = []
        self.runs: dict[str, str] = {}

    async def start(self, request: StartRequest) -> str:
        await trio.lowlevel.checkpoint()
        self.starts.append(request.idempotency_key)
        return self.runs.setdefault(request.idempotency_key, f"run-{len(self.runs) + 1}")

    async def inspect(self, run_id: str) -> RunState:
        await trio.lowlevel.checkpoint()
        return "completed" if run_id in self.runs.values() else "missing"

    async def cancel(self, run_id: str) -> None:
        await trio.lowlevel.checkpoint()


def every_minute(trigger_id: str) -> Trigger:
    return Trigger.make(
        {
            "id": trigger_id,
            "flow_id": "flow",
            "input": {},
            "cron": "* * * * *",
            "timezone": "UTC",
            "overlap": "skip",
        }
    )


@asynccontextmanager
async def guarded_store(
    dsn: str, clock: trio.testing.MockClock
) -> AsyncIterator[tuple[PostgresTriggerStore, TrioWallClock, AutojumpGuardExecutor]]:
    guard = AutojumpGuardExecutor(ThreadExecutor(4), clock)
    wall = TrioWallClock(EPOCH)
    # Our own session name, so the sabotage below touches this test's connections only.
    named = psycopg.conninfo.make_conninfo(dsn, application_name=APP)
    async with open_postgres_trigger_store(named, clock=wall, executor=guard) as store:
        yield store, wall, guard


async def tick(scheduler: Scheduler) -> None:
    """One tick, then let its launch tasks reach the runner (they run after the tick returns)."""
    await scheduler.run_once()
    await trio.testing.wait_all_tasks_blocked()


def wait_for(predicate: Callable[[], int | None], what: str) -> int:
    """Poll the server (in a worker thread) until ``predicate`` answers a pid."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        found = predicate()
        if found is not None:
            return found
        time.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


async def test_cutting_the_connection_mid_tick_loses_no_occurrence(
    postgres_dsn: str, autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    runner = DedupRunner()
    # The listing tick: its claim of b waits on b's row lock, which is what this test cuts.
    # (The indexed tick's due read skips a locked row, SKIP LOCKED, and serves it next tick.)
    options = SchedulerOptions(host="cut", run_poll_interval=5, listing=True)
    async with guarded_store(postgres_dsn, autojump_clock) as (store, wall, guard):
        for trigger_id in ("a", "b", "c"):
            await store.register(every_minute(trigger_id))
        async with open_scheduler(store, runner, options=options, clock=wall) as scheduler:
            await tick(scheduler)  # 00:00:30, first sight: nothing owed yet
            await trio.sleep(31)
            await tick(scheduler)  # 00:01:01: each trigger fires 00:01
            assert sorted(runner.starts) == sorted(
                idempotency_key(t, BOUNDARY + MINUTE) for t in "abc"
            )
            await trio.sleep(60)  # 00:02:01; the monitors have settled the 00:01 runs

            # Hold trigger b's row lock from outside, start a tick, wait until the tick's
            # transaction is blocked on that lock, then kill the tick's connection.
            admin = psycopg.connect(postgres_dsn, autocommit=False)
            try:
                admin.execute("SELECT 1 FROM tt_triggers WHERE trigger_id = 'b' FOR UPDATE")

                def blocked_backend() -> int | None:
                    with admin_connection(postgres_dsn) as conn:
                        row = conn.execute(
                            "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                            "AND application_name = %s",
                            (APP,),
                        ).fetchone()
                    return None if row is None else int(row[0])

                caplog.set_level(logging.ERROR, logger="trio_triggers.scheduler")
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(scheduler.run_once)
                    pid = await guard.run(wait_for, blocked_backend, "the blocked tick")
                    with admin_connection(postgres_dsn) as conn:
                        conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
                    admin.rollback()
            finally:
                admin.close()
            # The tick survived and logged b's failure. Whether a and c fired in this tick
            # depends on whether their claims shared b's group transaction (then they failed
            # with it, as a store error, and are owed to the next tick like b).
            failures = [r for r in caplog.records if r.levelno >= logging.ERROR]
            assert any(getattr(r, "trigger_id", None) == "b" for r in failures)
            second = BOUNDARY + 2 * MINUTE
            assert idempotency_key("b", second) not in runner.starts

            await trio.sleep(5)
            await tick(scheduler)  # 00:02:06: the next tick owes b's 00:02 again
            assert runner.starts.count(idempotency_key("b", second)) == 1
            await trio.sleep(60)
            await tick(scheduler)  # 00:03:06: and life goes on

        history = await store.history()
        occurrences = sorted((item.trigger_id, item.occurrence) for item in history.items)
        expected = sorted((t, BOUNDARY + k * MINUTE) for t in "abc" for k in (1, 2, 3))
        assert occurrences == expected
        assert sorted(runner.starts) == sorted(idempotency_key(t, o) for t, o in expected)


async def test_all_connections_killed_between_ticks_recover(
    postgres_dsn: str, autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A server restart or failover: every pooled connection is broken at once."""
    runner = DedupRunner()
    options = SchedulerOptions(host="restart", run_poll_interval=5)
    async with guarded_store(postgres_dsn, autojump_clock) as (store, wall, _):
        for trigger_id in ("a", "b"):
            await store.register(every_minute(trigger_id))
        async with open_scheduler(store, runner, options=options, clock=wall) as scheduler:
            await tick(scheduler)
            await trio.sleep(31)
            await tick(scheduler)  # 00:01 fired for both
            await trio.sleep(60)  # 00:02:01
            with admin_connection(postgres_dsn) as conn:
                killed = conn.execute(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE application_name = %s",
                    (APP,),
                ).fetchone()
            assert killed is not None
            assert int(killed[0]) >= 1
            # Ticks fail (or partly fail) until the pool has replaced its broken connections.
            # (The first call to meet a broken connection may be the heartbeat, a warning.)
            caplog.set_level(logging.WARNING, logger="trio_triggers.scheduler")
            failed_ticks = 0
            for _ in range(6):
                try:
                    await tick(scheduler)
                except Exception:
                    failed_ticks += 1
                await trio.sleep(1)
            logged = [r for r in caplog.records if r.levelno >= logging.WARNING]
            assert failed_ticks + len(logged) >= 1  # the cut was felt ...
            await trio.sleep(60)
            await tick(scheduler)  # 00:03:0x
        keys = sorted(set(runner.starts))
        expected = sorted(
            idempotency_key(t, BOUNDARY + k * MINUTE) for t in "ab" for k in (1, 2, 3)
        )
        assert keys == expected
        # ... and nothing was lost or re-launched.
        assert len(runner.starts) == len(expected)
