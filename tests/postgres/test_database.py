"""The shared PostgreSQL layer: pool, thread seam, transactions, server-side bounds, migrations."""

from __future__ import annotations

import psycopg
import psycopg.errors
import pytest
import trio

from tests.pg_support import admin_connection
from trio_triggers import ThreadExecutor
from trio_triggers._migrations import MigrationError
from trio_triggers.postgres._database import (
    Connection,
    PostgresDatabase,
    TimeoutSettings,
    build_conninfo,
    is_postgres_dsn,
)

pytestmark = pytest.mark.postgres

MIGRATIONS = [
    ("0001_a", ["CREATE TABLE a (x BIGINT NOT NULL)"]),
    ("0002_b", ["ALTER TABLE a ADD COLUMN y BIGINT"]),
]

FAST = TimeoutSettings(statement_timeout=5.0, lock_timeout=2.0)


def owns(name: str) -> bool:
    return name[:4].isdigit()


async def open_db(dsn: str, *, timeouts: TimeoutSettings = FAST, size: int = 2) -> PostgresDatabase:
    return await PostgresDatabase.open(dsn, timeouts=timeouts, pool_size=size)


def count_a(conn: Connection) -> int:
    row = conn.execute("SELECT count(*) FROM a").fetchone()
    assert row is not None
    return int(row[0])


async def test_migrations_apply_once_and_keep_data(postgres_dsn: str) -> None:
    db = await open_db(postgres_dsn)
    assert await db.migrate(MIGRATIONS, owns=owns) == ["0001_a", "0002_b"]
    await db.transaction(lambda c: c.execute("INSERT INTO a (x, y) VALUES (1, 2)"))
    await db.aclose()
    db = await open_db(postgres_dsn)
    try:
        assert await db.migrate(MIGRATIONS, owns=owns) == []
        rows = await db.transaction(lambda c: c.execute("SELECT x, y FROM a").fetchall())
        assert rows == [(1, 2)]
        names = await db.transaction(
            lambda c: c.execute("SELECT name FROM tt_migrations ORDER BY name").fetchall()
        )
        assert names == [("0001_a",), ("0002_b",)]
    finally:
        await db.aclose()


async def test_concurrent_opens_migrate_once(postgres_dsn: str) -> None:
    """Several pools opening one fresh schema at the same moment: each name applied once."""
    slow = [("0001_a", ["SELECT pg_sleep(0.2)", "CREATE TABLE a (x BIGINT NOT NULL)"])]
    results: list[list[str]] = []

    async def one() -> None:
        db = await open_db(postgres_dsn, size=1)
        try:
            results.append(await db.migrate(slow, owns=owns))
        finally:
            await db.aclose()

    async with trio.open_nursery() as nursery:
        for _ in range(4):
            nursery.start_soon(one)
    assert sorted(results) == [[], [], [], ["0001_a"]]
    with admin_connection(postgres_dsn) as conn:
        assert conn.execute("SELECT name FROM tt_migrations").fetchall() == [("0001_a",)]


async def test_newer_database_is_refused_before_applying(postgres_dsn: str) -> None:
    db = await open_db(postgres_dsn)
    try:
        await db.migrate([*MIGRATIONS, ("0003_c", ["CREATE TABLE c (z BIGINT)"])], owns=owns)
        with pytest.raises(MigrationError, match="newer version"):
            await db.migrate(MIGRATIONS, owns=owns)
        # Another component's names are not "newer": they are simply not ours.
        assert await db.migrate([*MIGRATIONS, ("0003_c", [])], owns=lambda n: n == "zzz") == []
    finally:
        await db.aclose()


async def test_plain_ddl_that_cannot_apply_fails_and_leaves_nothing(postgres_dsn: str) -> None:
    db = await open_db(postgres_dsn)
    try:
        await db.transaction(lambda c: c.execute("CREATE TABLE b (x BIGINT)"))
        migrations = [("0001_a", ["CREATE TABLE a (x BIGINT)", "CREATE TABLE b (x BIGINT)"])]
        with pytest.raises(MigrationError, match="0001_a") as info:
            await db.migrate(migrations, owns=owns)
        assert isinstance(info.value.__cause__, psycopg.errors.DuplicateTable)
        # DDL is transactional: table a was rolled back with the failed migration.
        tables = await db.transaction(
            lambda c: c.execute(
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_schema = current_schema() ORDER BY 1"
            ).fetchall()
        )
        assert tables == [("b",), ("tt_migrations",)]
        names = await db.transaction(
            lambda c: c.execute("SELECT name FROM tt_migrations").fetchall()
        )
        assert names == []
    finally:
        await db.aclose()


async def test_failed_transaction_rolls_back(postgres_dsn: str) -> None:
    db = await open_db(postgres_dsn)
    try:
        await db.migrate(MIGRATIONS, owns=owns)

        def boom(conn: Connection) -> None:
            conn.execute("INSERT INTO a (x) VALUES (1)")
            raise RuntimeError("boom")

        with pytest.raises(RuntimeError, match="boom"):
            await db.transaction(boom)
        with pytest.raises(psycopg.errors.NotNullViolation):
            await db.transaction(lambda c: c.execute("INSERT INTO a (y) VALUES (1)"))
        assert await db.transaction(count_a) == 0
    finally:
        await db.aclose()


async def test_cancelled_call_waits_for_its_thread_and_commits_whole(postgres_dsn: str) -> None:
    """A cancelled call never abandons its thread: the transaction finishes before we return."""
    db = await open_db(postgres_dsn)
    try:
        await db.migrate(MIGRATIONS, owns=owns)

        def slow_write(conn: Connection) -> None:
            conn.execute("INSERT INTO a (x) VALUES (1)")
            conn.execute("SELECT pg_sleep(0.3)")
            conn.execute("INSERT INTO a (x) VALUES (2)")

        with trio.move_on_after(0.05) as scope:
            await db.transaction(slow_write)
        assert scope.cancelled_caught
        # Visible immediately: the thread had committed both rows before the call returned.
        assert await db.transaction(count_a) == 2
    finally:
        await db.aclose()


async def test_statement_timeout_bounds_work_server_side(postgres_dsn: str) -> None:
    timeouts = TimeoutSettings(statement_timeout=0.2, lock_timeout=0.1)
    db = await open_db(postgres_dsn, timeouts=timeouts)
    try:
        with pytest.raises(psycopg.errors.QueryCanceled):
            await db.transaction(lambda c: c.execute("SELECT pg_sleep(5)"))
        # The connection is usable again afterwards.
        assert await db.transaction(lambda c: c.execute("SELECT 1").fetchone()) == (1,)
    finally:
        await db.aclose()


async def test_lock_timeout_bounds_row_lock_waits(postgres_dsn: str) -> None:
    timeouts = TimeoutSettings(statement_timeout=5.0, lock_timeout=0.1)
    db = await open_db(postgres_dsn, timeouts=timeouts)
    try:
        await db.migrate(MIGRATIONS, owns=owns)
        await db.transaction(lambda c: c.execute("INSERT INTO a (x) VALUES (1)"))
        with admin_connection(postgres_dsn) as admin, admin.transaction():
            admin.execute("SELECT x FROM a FOR UPDATE")
            with pytest.raises(psycopg.errors.LockNotAvailable):
                await db.transaction(lambda c: c.execute("SELECT x FROM a FOR UPDATE"))
    finally:
        await db.aclose()


async def test_terminated_connection_fails_one_call_then_recovers(postgres_dsn: str) -> None:
    db = await open_db(postgres_dsn, size=1)
    try:
        pid = await db.transaction(lambda c: c.execute("SELECT pg_backend_pid()").fetchone())
        assert pid is not None
        with admin_connection(postgres_dsn) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid[0],))
        with pytest.raises(psycopg.OperationalError):
            await db.transaction(lambda c: c.execute("SELECT 1").fetchone())
        assert await db.transaction(lambda c: c.execute("SELECT 1").fetchone()) == (1,)
    finally:
        await db.aclose()


async def test_an_outage_is_logged_once_and_its_end_once(
    postgres_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A lost connection is one ``unreachable`` line, and one ``answers again`` line at the
    first call that works; a statement that fails on a working connection (a timeout) is no
    outage (docs/faults.md, "PostgreSQL restarts"; the fault test there holds a whole server
    restart to one line each)."""
    timeouts = TimeoutSettings(statement_timeout=0.2, lock_timeout=0.1)
    db = await PostgresDatabase.open(
        postgres_dsn, timeouts=timeouts, pool_size=1, application_name="tt-outage-test"
    )
    try:
        with caplog.at_level("WARNING", logger="trio_triggers.postgres"):
            with pytest.raises(psycopg.errors.QueryCanceled):
                await db.transaction(lambda c: c.execute("SELECT pg_sleep(5)"))
            assert [r for r in caplog.records if r.name == "trio_triggers.postgres"] == []
            for _ in range(3):
                pid = await db.transaction(
                    lambda c: c.execute("SELECT pg_backend_pid()").fetchone()
                )
                assert pid is not None
                with admin_connection(postgres_dsn) as admin:
                    admin.execute("SELECT pg_terminate_backend(%s)", (pid[0],))
                with pytest.raises(psycopg.OperationalError):
                    await db.transaction(lambda c: c.execute("SELECT 1").fetchone())
            assert await db.transaction(lambda c: c.execute("SELECT 1").fetchone()) == (1,)
        messages = [r.getMessage() for r in caplog.records if r.name == "trio_triggers.postgres"]
        assert len(messages) == 6, messages
        for lost, back in zip(messages[::2], messages[1::2], strict=True):
            assert lost.startswith("PostgreSQL is unreachable (pool tt-outage-test): ")
            assert "AdminShutdown" in lost or "OperationalError" in lost
            assert back.startswith("PostgreSQL answers again (pool tt-outage-test) after ")
    finally:
        await db.aclose()


async def test_settings_reach_the_session_and_dsn_options_win(postgres_dsn: str) -> None:
    timeouts = TimeoutSettings(statement_timeout=1.5, lock_timeout=0.25)
    db = await open_db(postgres_dsn, timeouts=timeouts)
    try:
        row = await db.transaction(
            lambda c: c.execute(
                "SELECT current_setting('statement_timeout'), current_setting('lock_timeout'), "
                "current_setting('application_name'), current_schema()"
            ).fetchone()
        )
        assert row is not None
        assert row[:3] == ("1500ms", "250ms", "trio-triggers")
        assert str(row[3]).startswith("tt_t_")  # the fixture's search_path survived
    finally:
        await db.aclose()
    info = build_conninfo(
        "postgresql://h/db?options=-c%20lock_timeout%3D7", timeouts, application_name="x"
    )
    params = psycopg.conninfo.conninfo_to_dict(info)
    assert str(params["options"]).endswith("-c lock_timeout=7")


async def test_calls_run_in_threads_limited_to_the_pool(postgres_dsn: str) -> None:
    db = await open_db(postgres_dsn, size=3)
    try:
        executor = db.executor
        assert isinstance(executor, ThreadExecutor)
        assert executor.limiter.total_tokens == 3
        pids: set[int] = set()

        def pid(conn: Connection) -> None:
            conn.execute("SELECT pg_sleep(0.05)")
            row = conn.execute("SELECT pg_backend_pid()").fetchone()
            assert row is not None
            pids.add(int(row[0]))

        async with trio.open_nursery() as nursery:
            for _ in range(6):
                nursery.start_soon(db.transaction, pid)
        assert 1 <= len(pids) <= 3
    finally:
        await db.aclose()


async def test_closed_database_refuses_calls(postgres_dsn: str) -> None:
    db = await open_db(postgres_dsn)
    await db.aclose()
    await db.aclose()  # idempotent
    with pytest.raises(psycopg.OperationalError):
        await db.transaction(lambda c: c.execute("SELECT 1"))


async def test_unreachable_server_fails_to_open() -> None:
    timeouts = TimeoutSettings(
        statement_timeout=1.0, lock_timeout=1.0, connect_timeout=1.0, pool_timeout=0.5
    )
    with pytest.raises(psycopg.OperationalError):
        await PostgresDatabase.open("postgresql://tt:tt@127.0.0.1:1/x", timeouts=timeouts)


def test_option_validation() -> None:
    for bad in (0, -1, float("nan"), float("inf"), True):
        with pytest.raises(ValueError, match="statement_timeout"):
            TimeoutSettings(statement_timeout=bad, lock_timeout=1.0)
    assert is_postgres_dsn("postgresql://x/y")
    assert is_postgres_dsn("postgres://x")
    assert not is_postgres_dsn("trio-triggers.sqlite")
