"""Foreign or broken databases are refused by name, and left exactly as they were.

A garbage file given as the SQLite path, a database whose ``tt_triggers`` another program made,
one whose tables were altered by hand, and one written by a newer version: each open raises a
typed error whose message names the problem, and a byte-for-byte (SQLite) or catalogue-and-rows
(PostgreSQL) comparison shows nothing was created, switched or altered (docs/faults.md,
"Foreign or broken databases").
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING

import pytest

from tests.pg_support import admin_connection, postgres_marks
from trio_triggers import TriggerError, TrioWallClock, open_triggers

if TYPE_CHECKING:
    from pathlib import Path

FOREIGN = (
    "could not run trigger migrations: table tt_triggers exists but no trio-triggers migration"
    " that creates it is recorded (it belongs to another program or was made by hand)"
)


def _files(directory: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(directory.iterdir())}


async def _refused(database: str) -> TriggerError:
    with pytest.raises(TriggerError) as caught:
        async with open_triggers(database, clock=TrioWallClock(1_700_000_000_000)):
            pass  # pragma: no cover
    assert caught.value.code == "store"
    return caught.value


@pytest.mark.parametrize("content", [b"x", b"not a database\n" * 300], ids=["1-byte", "4-KiB"])
async def test_a_file_that_is_not_sqlite_is_refused_untouched(
    tmp_path: Path, content: bytes
) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes(content)
    error = await _refused(str(path))
    assert error.message.startswith(f"could not open the SQLite database {path}: ")
    assert "file is not a database" in error.message
    assert _files(tmp_path) == {"notes.txt": content}


def _foreign_sqlite(path: Path) -> None:
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE tt_triggers (id INTEGER PRIMARY KEY, label TEXT)")
        connection.execute("INSERT INTO tt_triggers (label) VALUES ('theirs')")
    connection.close()


async def test_another_programs_tt_triggers_on_sqlite_is_refused_untouched(
    tmp_path: Path,
) -> None:
    path = tmp_path / "app.sqlite"
    _foreign_sqlite(path)
    before = _files(tmp_path)
    error = await _refused(str(path))
    assert error.message == FOREIGN
    # Not switched to WAL, no tt_migrations, no -wal or -shm file: the same bytes.
    assert _files(tmp_path) == before


async def _migrated_sqlite(path: Path) -> None:
    async with open_triggers(str(path), clock=TrioWallClock(1_700_000_000_000)):
        pass


async def test_a_hand_altered_table_on_sqlite_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "app.sqlite"
    await _migrated_sqlite(path)
    with sqlite3.connect(path) as connection:
        connection.execute("ALTER TABLE tt_triggers ADD COLUMN note TEXT")
    connection.close()
    before = _files(tmp_path)
    error = await _refused(str(path))
    assert error.message == (
        "could not run trigger migrations: table tt_triggers has another shape"
        " (unexpected columns note)"
    )
    assert _files(tmp_path) == before


async def test_a_newer_schema_on_sqlite_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "app.sqlite"
    await _migrated_sqlite(path)
    with sqlite3.connect(path) as connection:
        connection.execute("INSERT INTO tt_migrations (name) VALUES ('0099_from_the_future')")
    connection.close()
    before = _files(tmp_path)
    error = await _refused(str(path))
    assert error.message == (
        "could not run trigger migrations: the database was written by a newer version"
        " (unknown migrations: 0099_from_the_future)"
    )
    assert _files(tmp_path) == before


async def test_a_foreign_tt_runs_on_sqlite_is_refused_by_the_run_store(tmp_path: Path) -> None:
    path = tmp_path / "app.sqlite"
    with sqlite3.connect(path) as connection:
        # A database of ours from which the run store's tables and records were taken away,
        # and another program's tt_runs put in their place.
        connection.execute("CREATE TABLE tt_migrations (name TEXT PRIMARY KEY NOT NULL)")
        connection.execute("CREATE TABLE tt_runs (job TEXT)")
    connection.close()
    with pytest.raises(Exception, match="table tt_runs exists but no trio-triggers migration"):
        async with open_triggers(str(path), clock=TrioWallClock(1_700_000_000_000)):
            pass  # pragma: no cover


# PostgreSQL: the same refusals, and a catalogue-and-rows comparison for "nothing modified".


def _pg_state(dsn: str) -> object:
    with admin_connection(dsn) as conn:
        columns = conn.execute(
            "SELECT table_name, column_name, data_type FROM information_schema.columns"
            " WHERE table_schema = current_schema() ORDER BY 1, 2"
        ).fetchall()
        tables = [
            row[0]
            for row in conn.execute(
                "SELECT table_name FROM information_schema.tables"
                " WHERE table_schema = current_schema() ORDER BY 1"
            ).fetchall()
        ]
        rows = {
            table: sorted(map(repr, conn.execute(f'SELECT * FROM "{table}"').fetchall()))
            for table in tables
        }
    return columns, rows


class TestPostgres:
    pytestmark = postgres_marks()

    async def test_another_programs_tt_triggers_is_refused_untouched(
        self, postgres_dsn: str
    ) -> None:
        with admin_connection(postgres_dsn) as conn:
            conn.execute("CREATE TABLE tt_triggers (id SERIAL PRIMARY KEY, label TEXT)")
            conn.execute("INSERT INTO tt_triggers (label) VALUES ('theirs')")
        before = _pg_state(postgres_dsn)
        error = await _refused(postgres_dsn)
        assert error.message == FOREIGN
        assert _pg_state(postgres_dsn) == before

    async def test_a_hand_altered_table_is_refused_untouched(self, postgres_dsn: str) -> None:
        async with open_triggers(postgres_dsn, clock=TrioWallClock(1_700_000_000_000)):
            pass
        with admin_connection(postgres_dsn) as conn:
            conn.execute("ALTER TABLE tt_triggers DROP COLUMN pause_note")
        before = _pg_state(postgres_dsn)
        error = await _refused(postgres_dsn)
        assert error.message == (
            "could not run trigger migrations: table tt_triggers has another shape"
            " (missing columns pause_note)"
        )
        assert _pg_state(postgres_dsn) == before

    async def test_a_newer_schema_is_refused_untouched(self, postgres_dsn: str) -> None:
        async with open_triggers(postgres_dsn, clock=TrioWallClock(1_700_000_000_000)):
            pass
        with admin_connection(postgres_dsn) as conn:
            conn.execute("INSERT INTO tt_migrations (name) VALUES ('0099_from_the_future')")
        before = _pg_state(postgres_dsn)
        error = await _refused(postgres_dsn)
        assert error.message == (
            "could not run trigger migrations: the database was written by a newer version"
            " (unknown migrations: 0099_from_the_future)"
        )
        assert _pg_state(postgres_dsn) == before
