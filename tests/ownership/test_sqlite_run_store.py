"""What is specific to the SQLite run store: schema, migrations, sharing, failures, processes."""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING

import pytest
import trio

from trio_triggers import RunStoreError, ThreadExecutor
from trio_triggers._ownership import (
    Activated,
    HeartbeatFresh,
    OwnerId,
    RunRow,
    RunStoreBase,
    SnapshotChanged,
    Updated,
)
from trio_triggers._ownership._sqlite_store import (
    RUN_MIGRATIONS,
    _driver_error,
    open_sqlite_run_store,
    owns_run_migration,
)
from trio_triggers._sqlite import SqliteDatabase

from .backends import ManualClock
from .helpers import A, B, C, created, running

if TYPE_CHECKING:
    from pathlib import Path


def raw(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(str(path), isolation_level=None)


async def test_migrations_are_named_runs_and_apply_once(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    assert [name for name, _ in RUN_MIGRATIONS] == [
        "runs_0001_tt_runs",
        "runs_0002_attempts",
        "runs_0003_output",
        "runs_0004_retries",
    ]
    assert owns_run_migration("runs_0001_tt_runs")
    assert not owns_run_migration("0001_triggers")
    async with open_sqlite_run_store(str(path)) as store:
        assert await store.migrate() == []
    conn = raw(path)
    assert conn.execute("SELECT name FROM tt_migrations ORDER BY name").fetchall() == [
        ("runs_0001_tt_runs",),
        ("runs_0002_attempts",),
        ("runs_0003_output",),
        ("runs_0004_retries",),
    ]
    conn.execute("INSERT INTO tt_migrations (name) VALUES ('runs_0099_future')")
    conn.execute("INSERT INTO tt_migrations (name) VALUES ('0042_someone_else')")
    conn.close()
    with pytest.raises(RunStoreError) as info:
        async with open_sqlite_run_store(str(path)):
            pass
    assert info.value.code == "persistence_failed"
    assert "newer version" in info.value.message


async def test_a_database_from_before_attempts_is_upgraded(tmp_path: Path) -> None:
    # A file made by a release without the attempts column: the first migration only, one run.
    path = tmp_path / "old.sqlite"
    conn = raw(path)
    conn.execute("CREATE TABLE tt_migrations (name TEXT PRIMARY KEY)")
    for statement in RUN_MIGRATIONS[0][1]:
        conn.execute(statement)
    conn.execute("INSERT INTO tt_migrations (name) VALUES ('runs_0001_tt_runs')")
    conn.execute(
        "INSERT INTO tt_runs (run_id, status, created_at_ms, state_json) "
        "VALUES ('old', 'pending', 5, '{}')"
    )
    conn.close()
    clock = ManualClock(10)
    async with open_sqlite_run_store(str(path), clock=clock) as store:
        assert (await store.get("old")).attempts == 0
        row = await store.get("old")
        assert await store.claim_and_own("old", row.snapshot, A, 10) == Activated()
        assert (await store.get("old")).attempts == 1
    conn = raw(path)
    with pytest.raises(sqlite3.IntegrityError):
        conn.execute("UPDATE tt_runs SET attempts = -1 WHERE run_id = 'old'")
    conn.close()


async def test_opened_on_a_shared_database(tmp_path: Path) -> None:
    db = await SqliteDatabase.open(str(tmp_path / "shared.sqlite"))
    await db.migrate(
        [("0001_triggers", ["CREATE TABLE t (x INTEGER)"])], owns=lambda n: n[0] == "0"
    )
    clock = ManualClock(0)
    async with open_sqlite_run_store(db, clock=clock) as store:
        await running(store, clock)
        assert store.database is db
    assert not db.closed  # the run store never closes a database it was given
    names = await db.transaction(
        lambda c: c.execute("SELECT name FROM tt_migrations ORDER BY name").fetchall()
    )
    assert names == [
        ("0001_triggers",),
        ("runs_0001_tt_runs",),
        ("runs_0002_attempts",),
        ("runs_0003_output",),
        ("runs_0004_retries",),
    ]
    async with open_sqlite_run_store(db, clock=clock) as again:
        assert (await again.get("r")).owner == A
    await db.aclose()


async def test_schema_checks_reject_what_the_store_never_writes(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    async with open_sqlite_run_store(str(path)):
        pass
    conn = raw(path)
    with pytest.raises(sqlite3.IntegrityError):
        conn.execute(
            "INSERT INTO tt_runs (run_id, status, created_at_ms, state_json) "
            "VALUES ('x', 'running', 0, '{}')"
        )
    with pytest.raises(sqlite3.IntegrityError):
        conn.execute(
            "INSERT INTO tt_runs (run_id, status, created_at_ms, state_json) "
            "VALUES ('x', 'pending', 0, 'not json')"
        )
    conn.close()


@pytest.mark.parametrize(
    "corruption",
    [
        "UPDATE tt_runs SET owner_host_id = NULL",
        "UPDATE tt_runs SET status = 'paused'",
        "UPDATE tt_runs SET heartbeat_at_ms = 1.5",
        "UPDATE tt_runs SET claim_host_id = 'h'",
        "UPDATE tt_runs SET result_json = '1'",
        "UPDATE tt_runs SET cancel_acknowledgement_json = '{}'",
        "UPDATE tt_runs SET state_json = 'not json'",
        "UPDATE tt_runs SET owner_pid = -4",
    ],
)
async def test_a_corrupt_row_is_decode_failed(tmp_path: Path, corruption: str) -> None:
    path = tmp_path / "db.sqlite"
    clock = ManualClock(0)
    async with open_sqlite_run_store(str(path), clock=clock) as store:
        await running(store, clock)
        conn = raw(path)
        conn.execute("PRAGMA ignore_check_constraints = ON")
        conn.execute(corruption)
        conn.close()
        for call in (store.get("r"), store.heartbeat("r", A, 0)):
            with pytest.raises(RunStoreError) as info:
                await call
            assert info.value.code == "decode_failed"
            assert "host-a" not in str(info.value)


async def test_closed_database_is_persistence_failed(tmp_path: Path) -> None:
    clock = ManualClock(0)
    async with open_sqlite_run_store(str(tmp_path / "db.sqlite"), clock=clock) as store:
        await running(store, clock)
    with pytest.raises(RunStoreError) as info:
        await store.heartbeat("r", A, 0)
    assert (info.value.code, info.value.method) == ("persistence_failed", "heartbeat")
    assert isinstance(info.value.__cause__, sqlite3.Error)


async def test_busy_database_gives_up_as_persistence_failed(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    clock = ManualClock(0)
    async with open_sqlite_run_store(str(path), clock=clock, busy_wait=0.05) as store:
        await running(store, clock)
        blocker = raw(path)
        blocker.execute("BEGIN IMMEDIATE")
        try:
            with pytest.raises(RunStoreError) as info:
                await store.heartbeat("r", A, 5)
            assert info.value.code == "persistence_failed"
            # a cancelled call returns promptly (lock waits are Trio sleeps) and writes nothing
            with trio.move_on_after(0.01) as scope:
                await store.heartbeat("r", A, 6)
            assert scope.cancelled_caught
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        assert (await store.get("r")).heartbeat_at_ms == 0
        assert await store.heartbeat("r", A, 7) == Updated()


def test_driver_errors_are_classified_through_the_chain() -> None:
    inner = sqlite3.IntegrityError("UNIQUE constraint failed")
    try:
        try:
            raise inner
        except sqlite3.IntegrityError as exc:
            raise RuntimeError("wrapped") from exc
    except RuntimeError as wrapped:
        assert _driver_error("create", wrapped).code == "constraint"
    assert _driver_error("get", sqlite3.OperationalError("disk I/O error")).code == (
        "persistence_failed"
    )


async def test_two_connections_one_file_exactly_one_activation(tmp_path: Path) -> None:
    """Two store objects (two writer connections, worker threads) race on one snapshot."""
    path = str(tmp_path / "db.sqlite")
    clock = ManualClock(0)
    async with (
        open_sqlite_run_store(path, clock=clock, executor=ThreadExecutor()) as one,
        open_sqlite_run_store(path, clock=clock, executor=ThreadExecutor()) as two,
    ):
        for round_ in range(10):
            row = await created(one, f"r{round_}")
            results: list[object] = []

            async def contend(
                store: RunStoreBase, owner: OwnerId, row: RunRow = row, out: list[object] = results
            ) -> None:
                out.append(await store.claim_and_own(row.run_id, row, owner, 0))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(contend, one, B)
                nursery.start_soon(contend, two, C)
            assert results.count(Activated()) == 1
            assert all(r in (Activated(), HeartbeatFresh(), SnapshotChanged()) for r in results)
