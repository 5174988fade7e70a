"""The PostgreSQL DDL: types, collations and constraints the spec fixes for PostgreSQL."""

from __future__ import annotations

import psycopg.errors
import pytest

from tests.pg_support import admin_connection
from trio_triggers._migrations import MigrationError
from trio_triggers.postgres._database import PostgresDatabase, TimeoutSettings
from trio_triggers.postgres._schema import (
    RUN_MIGRATIONS,
    RUN_SHAPES,
    TRIGGER_MIGRATIONS,
    TRIGGER_SHAPES,
    owns_run_migration,
    owns_trigger_migration,
)

pytestmark = pytest.mark.postgres


async def migrate_both(dsn: str) -> None:
    db = await PostgresDatabase.open(
        dsn, timeouts=TimeoutSettings(statement_timeout=5, lock_timeout=2), pool_size=1
    )
    try:
        assert await db.migrate(TRIGGER_MIGRATIONS, owns=owns_trigger_migration) == [
            "0001_triggers",
            "0002_reservation_lease",
            "0003_heartbeat",
            "0004_fire_run_index",
            "0005_attention",
            "0006_operator_state",
            "0007_missed_counts",
            "0008_backfills",
            "0009_manual_fires",
            "0010_trigger_failure_fields",
        ]
        assert await db.migrate(RUN_MIGRATIONS, owns=owns_run_migration) == [
            "runs_0001_tt_runs",
            "runs_0002_attempts",
            "runs_0003_output",
            "runs_0004_retries",
        ]
        # The two stores share tt_migrations without mistaking each other's names for "newer".
        assert await db.migrate(TRIGGER_MIGRATIONS, owns=owns_trigger_migration) == []
        assert await db.migrate(RUN_MIGRATIONS, owns=owns_run_migration) == []
    finally:
        await db.aclose()


async def test_column_types_and_collations(postgres_dsn: str) -> None:
    await migrate_both(postgres_dsn)
    with admin_connection(postgres_dsn) as conn:
        rows = conn.execute(
            "SELECT c.table_name, c.column_name, c.data_type, c.collation_name "
            "FROM information_schema.columns c WHERE c.table_schema = current_schema()"
        ).fetchall()
    columns = {(str(t), str(c)): (str(d), k) for t, c, d, k in rows}
    bigints = [
        ("tt_triggers", "max_catch_up"),
        ("tt_triggers", "revision"),
        ("tt_triggers", "last_fired_at_ms"),
        ("tt_triggers", "pending_at_ms"),
        ("tt_triggers", "active_claimed_at_ms"),
        ("tt_triggers", "registered_at_ms"),
        ("tt_triggers", "attention_at_ms"),
        ("tt_trigger_fires", "occurrence_at_ms"),
        ("tt_scheduler_heartbeats", "ticked_at_ms"),
        ("tt_runs", "created_at_ms"),
        ("tt_runs", "owner_pid"),
        ("tt_runs", "claim_pid"),
        ("tt_runs", "claimed_at_ms"),
    ]
    for key in bigints:
        assert columns[key][0] == "bigint", key
    assert columns[("tt_triggers", "enabled")][0] == "integer"
    for key in [
        ("tt_triggers", "trigger_id"),
        ("tt_trigger_fires", "trigger_id"),
        ("tt_scheduler_heartbeats", "host"),
    ]:
        assert columns[key] == ("text", "C"), key
    assert columns[("tt_runs", "state_json")][0] == "text"  # never jsonb: byte-for-byte text


async def test_ledger_and_run_constraints(postgres_dsn: str) -> None:
    await migrate_both(postgres_dsn)
    with admin_connection(postgres_dsn) as conn:
        with pytest.raises(psycopg.errors.ForeignKeyViolation):
            conn.execute(
                "INSERT INTO tt_trigger_fires (trigger_id, occurrence_at_ms) VALUES ('x', 1)"
            )
        with pytest.raises(psycopg.errors.CheckViolation):
            conn.execute(
                "INSERT INTO tt_runs (run_id, status, created_at_ms, state_json) "
                "VALUES ('r', 'running', 0, '{}')"
            )
        conn.execute(
            "INSERT INTO tt_runs (run_id, status, created_at_ms, state_json, idempotency_key) "
            "VALUES ('a', 'pending', 0, '{}', NULL), ('b', 'pending', 0, '{}', NULL), "
            "('c', 'pending', 0, '{}', 'k')"
        )
        with pytest.raises(psycopg.errors.UniqueViolation):
            conn.execute(
                "INSERT INTO tt_runs (run_id, status, created_at_ms, state_json, idempotency_key) "
                "VALUES ('d', 'pending', 0, '{}', 'k')"
            )


async def test_existing_table_makes_trigger_migration_fail(postgres_dsn: str) -> None:
    with admin_connection(postgres_dsn) as conn:
        conn.execute("CREATE TABLE tt_triggers (trigger_id TEXT, active_claimed_at_ms BIGINT)")
    db = await PostgresDatabase.open(
        postgres_dsn, timeouts=TimeoutSettings(statement_timeout=5, lock_timeout=2), pool_size=1
    )
    try:
        with pytest.raises(MigrationError, match="0001_triggers"):
            await db.migrate(TRIGGER_MIGRATIONS, owns=owns_trigger_migration)
    finally:
        await db.aclose()


async def test_every_migration_prefix_makes_the_sqlite_replays_shape(postgres_dsn: str) -> None:
    """The shape check compares a PostgreSQL schema with the SQLite migrations' replay: the two
    dialects must make the same tables and column names after every migration."""
    db = await PostgresDatabase.open(
        postgres_dsn, timeouts=TimeoutSettings(statement_timeout=5, lock_timeout=2), pool_size=1
    )
    try:
        for migrations, shapes, owns in (
            (TRIGGER_MIGRATIONS, TRIGGER_SHAPES, owns_trigger_migration),
            (RUN_MIGRATIONS, RUN_SHAPES, owns_run_migration),
        ):
            assert len(shapes) == len(migrations) + 1
            for k in range(1, len(migrations) + 1):
                await db.migrate(migrations[:k], owns=owns, shapes=shapes[: k + 1])
                with admin_connection(postgres_dsn) as conn:
                    rows = conn.execute(
                        "SELECT table_name, column_name FROM information_schema.columns"
                        " WHERE table_schema = current_schema()"
                    ).fetchall()
                found: dict[str, set[str]] = {}
                for table, column in rows:
                    if table in shapes[-1]:
                        found.setdefault(table, set()).add(column)
                assert found == {t: set(c) for t, c in shapes[k].items()}, migrations[k - 1][0]
    finally:
        await db.aclose()


def test_migration_ownership() -> None:
    assert owns_trigger_migration("0001_triggers")
    assert owns_trigger_migration("0009_future")
    assert not owns_trigger_migration("runs_0001_tt_runs")
    assert owns_run_migration("runs_0002_extra")
    assert not owns_run_migration("0004_fire_run_index")
