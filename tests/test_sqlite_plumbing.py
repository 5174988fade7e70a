"""The shared SQLite layer: transactions, Trio-time busy retries, migrations."""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING

import pytest
import trio
import trio.testing

from trio_triggers import ThreadExecutor
from trio_triggers._migrations import MigrationError
from trio_triggers._sqlite import SqliteDatabase, is_busy_error

if TYPE_CHECKING:
    from pathlib import Path

MIGRATIONS = [
    ("0001_a", ["CREATE TABLE a (x INTEGER NOT NULL)"]),
    ("0002_b", ["ALTER TABLE a ADD COLUMN y INTEGER"]),
]


def owns(name: str) -> bool:
    return name[:4].isdigit()


async def test_migrations_apply_once_and_keep_data(tmp_path: Path) -> None:
    path = str(tmp_path / "db.sqlite")
    db = await SqliteDatabase.open(path)
    assert await db.migrate(MIGRATIONS, owns=owns) == ["0001_a", "0002_b"]
    await db.transaction(lambda c: c.execute("INSERT INTO a (x, y) VALUES (1, 2)"))
    await db.aclose()
    db = await SqliteDatabase.open(path)
    assert await db.migrate(MIGRATIONS, owns=owns) == []
    rows = await db.transaction(lambda c: c.execute("SELECT x, y FROM a").fetchall(), write=False)
    assert rows == [(1, 2)]
    mode = await db.transaction(lambda c: c.execute("PRAGMA journal_mode").fetchone())
    assert mode == ("wal",)
    await db.aclose()


async def test_newer_database_is_refused_before_applying(tmp_path: Path) -> None:
    path = str(tmp_path / "db.sqlite")
    db = await SqliteDatabase.open(path)
    await db.migrate([*MIGRATIONS, ("0003_c", ["CREATE TABLE c (z INTEGER)"])], owns=owns)
    await db.aclose()
    db = await SqliteDatabase.open(path)
    with pytest.raises(MigrationError, match="newer version"):
        await db.migrate(MIGRATIONS, owns=owns)
    # Another component's names are not "newer": they are simply not ours.
    assert await db.migrate([*MIGRATIONS, ("0003_c", [])], owns=lambda n: n == "zzz") == []
    await db.aclose()


async def test_plain_ddl_that_cannot_apply_fails(tmp_path: Path) -> None:
    db = await SqliteDatabase.open(str(tmp_path / "db.sqlite"))
    await db.transaction(lambda c: c.execute("CREATE TABLE a (x INTEGER)"))
    with pytest.raises(MigrationError, match="0001_a") as info:
        await db.migrate(MIGRATIONS, owns=owns)
    assert isinstance(info.value.__cause__, sqlite3.OperationalError)
    names = await db.transaction(lambda c: c.execute("SELECT name FROM tt_migrations").fetchall())
    assert names == []
    await db.aclose()


async def test_failed_transaction_rolls_back(tmp_path: Path) -> None:
    db = await SqliteDatabase.open(str(tmp_path / "db.sqlite"))
    await db.migrate(MIGRATIONS, owns=owns)

    def boom(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO a (x) VALUES (1)")
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        await db.transaction(boom)
    assert await db.transaction(lambda c: c.execute("SELECT count(*) FROM a").fetchone()) == (0,)
    await db.aclose()


async def test_busy_database_waits_in_trio_time(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    path = str(tmp_path / "db.sqlite")
    db = await SqliteDatabase.open(path)
    await db.migrate(MIGRATIONS, owns=owns)
    blocker = sqlite3.connect(path, isolation_level=None, timeout=0)
    blocker.execute("BEGIN IMMEDIATE")
    finished_at: list[float] = []

    async def writer() -> None:
        await db.transaction(lambda c: c.execute("INSERT INTO a (x) VALUES (7)"))
        finished_at.append(trio.current_time())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(writer)
        await trio.sleep(2)
        assert finished_at == []  # still waiting, in Trio time, not inside SQLite
        blocker.execute("COMMIT")
    blocker.close()
    assert finished_at
    assert finished_at[0] >= 2
    assert await db.transaction(lambda c: c.execute("SELECT x FROM a").fetchall()) == [(7,)]
    await db.aclose()


async def test_busy_beyond_the_bound_raises(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    path = str(tmp_path / "db.sqlite")
    db = await SqliteDatabase.open(path, busy_wait=1.0)
    await db.migrate(MIGRATIONS, owns=owns)
    blocker = sqlite3.connect(path, isolation_level=None, timeout=0)
    blocker.execute("BEGIN IMMEDIATE")
    with pytest.raises(sqlite3.OperationalError) as info:
        await db.transaction(lambda c: c.execute("INSERT INTO a (x) VALUES (1)"))
    assert is_busy_error(info.value)
    blocker.execute("ROLLBACK")
    blocker.close()
    await db.aclose()


async def test_thread_executor_and_memory_database() -> None:
    db = await SqliteDatabase.open(":memory:", executor=ThreadExecutor(1))
    await db.migrate(MIGRATIONS, owns=owns)
    await db.transaction(lambda c: c.execute("INSERT INTO a (x) VALUES (3)"))
    assert await db.transaction(lambda c: c.execute("SELECT x FROM a").fetchall()) == [(3,)]
    await db.aclose()
    await db.aclose()  # idempotent
    with pytest.raises(sqlite3.ProgrammingError):
        await db.transaction(lambda c: c.execute("SELECT 1"))


def _exclusive_blocker(path: str) -> sqlite3.Connection:
    """A connection holding an exclusive lock on a rollback-journal database at ``path``."""
    blocker = sqlite3.connect(path, isolation_level=None, timeout=0)
    blocker.execute("CREATE TABLE IF NOT EXISTS held (x INTEGER)")
    blocker.execute("BEGIN EXCLUSIVE")
    blocker.execute("INSERT INTO held (x) VALUES (1)")
    return blocker


async def test_open_waits_in_trio_time_for_an_exclusive_lock(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    path = str(tmp_path / "db.sqlite")
    blocker = _exclusive_blocker(path)
    opened: list[SqliteDatabase] = []
    opened_at: list[float] = []

    async def opener() -> None:
        opened.append(await SqliteDatabase.open(path, synchronous="FULL"))
        opened_at.append(trio.current_time())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(opener)
        await trio.sleep(2)
        assert opened == []  # the connect-time pragmas are busy and retried in Trio time
        blocker.execute("COMMIT")
    blocker.close()
    assert opened_at
    assert opened_at[0] >= 2
    db = opened[0]
    assert await db.transaction(lambda c: c.execute("PRAGMA journal_mode").fetchone()) == ("wal",)
    assert await db.transaction(lambda c: c.execute("PRAGMA synchronous").fetchone()) == (2,)
    assert await db.transaction(lambda c: c.execute("PRAGMA foreign_keys").fetchone()) == (1,)
    assert await db.transaction(lambda c: c.execute("SELECT x FROM held").fetchall()) == [(1,)]
    await db.aclose()


async def test_open_busy_beyond_the_bound_raises(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    path = str(tmp_path / "db.sqlite")
    blocker = _exclusive_blocker(path)
    start = trio.current_time()
    with pytest.raises(sqlite3.OperationalError) as info:
        await SqliteDatabase.open(path, busy_wait=1.0)
    assert is_busy_error(info.value)
    assert trio.current_time() - start >= 1.0
    blocker.execute("ROLLBACK")
    blocker.close()


async def test_inline_calls_queue_behind_a_busy_call_in_order(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    # A call that waits out a busy database holds the lock: calls arriving meanwhile run after
    # it, in arrival order, even though inline calls normally skip the lock.
    path = str(tmp_path / "db.sqlite")
    db = await SqliteDatabase.open(path)
    await db.migrate(MIGRATIONS, owns=owns)
    blocker = sqlite3.connect(path, isolation_level=None, timeout=0)
    blocker.execute("BEGIN IMMEDIATE")

    async def insert(x: int) -> None:
        await db.transaction(lambda c: c.execute("INSERT INTO a (x) VALUES (?)", (x,)))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(insert, 1)
        await trio.sleep(0.5)
        nursery.start_soon(insert, 2)
        await trio.sleep(0.5)
        nursery.start_soon(insert, 3)
        await trio.sleep(1)
        blocker.execute("COMMIT")
    blocker.close()
    rows = await db.transaction(lambda c: c.execute("SELECT x FROM a ORDER BY rowid").fetchall())
    assert rows == [(1,), (2,), (3,)]
    await db.aclose()


async def test_cancelled_inline_call_does_nothing(tmp_path: Path) -> None:
    db = await SqliteDatabase.open(str(tmp_path / "db.sqlite"))
    await db.migrate(MIGRATIONS, owns=owns)
    with trio.CancelScope() as scope:
        scope.cancel()
        await db.transaction(lambda c: c.execute("INSERT INTO a (x) VALUES (1)"))
    assert scope.cancelled_caught
    assert await db.transaction(lambda c: c.execute("SELECT count(*) FROM a").fetchone()) == (0,)
    await db.aclose()


async def test_a_long_lock_is_one_line_when_it_begins_and_one_when_it_ends(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    path = str(tmp_path / "db.sqlite")
    db = await SqliteDatabase.open(path)
    await db.transaction(lambda c: c.execute("CREATE TABLE a (x INTEGER)"))
    blocker = sqlite3.connect(path, isolation_level=None, timeout=0)
    blocker.execute("BEGIN EXCLUSIVE")  # another program's long write

    async def release_after(seconds: float) -> None:
        await trio.sleep(seconds)
        blocker.execute("ROLLBACK")

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(release_after, 3.0)
            began = trio.current_time()
            await db.transaction(lambda c: c.execute("INSERT INTO a (x) VALUES (1)"))
            waited = trio.current_time() - began
    finally:
        blocker.close()
        await db.aclose()
    assert 3.0 <= waited < 3.1
    lines = [r.getMessage() for r in caplog.records if r.name == "trio_triggers.sqlite"]
    assert lines == [
        f"SQLite database {path} is locked by another connection (database is locked);"
        " retrying for up to 29 s more",
        f"SQLite database {path} is free again after {waited:.1f} s",
    ]


async def test_a_lock_past_busy_wait_is_logged_and_raised(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    path = str(tmp_path / "db.sqlite")
    db = await SqliteDatabase.open(path, busy_wait=2.0)
    blocker = sqlite3.connect(path, isolation_level=None, timeout=0)
    blocker.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            await db.transaction(lambda c: c.execute("CREATE TABLE a (x INTEGER)"))
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
        await db.aclose()
    lines = [r.getMessage() for r in caplog.records if r.name == "trio_triggers.sqlite"]
    assert len(lines) == 2
    assert lines[1].startswith(f"SQLite database {path} still locked after 2.0")
