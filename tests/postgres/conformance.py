"""The PostgreSQL entries of the two conformance suites' backend lists.

``tests/store/backends.py`` lists ``Backend("postgres", open_postgres_trigger_backend, ...)``
and ``tests/ownership/backends.py`` maps ``"postgres"`` to :func:`postgres_run_backend`. Each
test gets a fresh schema (``tests.pg_support.fresh_schema``), so the suites run unchanged and
independently; without a server they skip (or fail under ``TT_REQUIRE_POSTGRES=1``).

The trigger-store backdoor writes rows "by hand" through the store's own pool. PostgreSQL's
static types cannot hold the corrupt values SQLite's dynamic typing accepts (``revision =
'one'``), so :meth:`PostgresBackdoor.set_columns` first turns such a column into ``TEXT`` (and
drops its ``CHECK``s): the row then reads back exactly as corrupt as on SQLite, which is what the
decoding examples are about.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from tests.pg_support import fresh_schema
from trio_triggers.postgres._run_store import open_postgres_run_store
from trio_triggers.postgres._trigger_store import PostgresTriggerStore, open_postgres_trigger_store

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

    from tests.store.backends import Dump, Opened
    from trio_triggers import WallClock
    from trio_triggers._ownership import RunStoreBase
    from trio_triggers._store import TriggerStore
    from trio_triggers.postgres._database import Connection

__all__ = ["PostgresBackdoor", "open_postgres_trigger_backend", "postgres_run_backend"]

_TRIGGER_COLUMNS = (
    "trigger_id, flow_id, input_json, cron, timezone, overlap, catch_up, max_catch_up, "
    "enabled, revision, last_fired_at_ms, pending_at_ms, active_run_id, active_claimed_at_ms, "
    "paused_at_ms, pause_note, paused_by, resume_after_ms, removed_at_ms, "
    "missed_overlap, missed_catch_up, missed_catch_up_bound, missed_paused, "
    "backfill_start_ms, backfill_end_ms, backfill_next_ms, backfill_total, backfill_done, "
    "backfill_bound, backfill_overlap, backfill_state, backfill_created_at_ms, backfill_by"
)
_INTEGER_COLUMNS = frozenset(
    {
        "max_catch_up",
        "enabled",
        "revision",
        "last_fired_at_ms",
        "pending_at_ms",
        "active_claimed_at_ms",
    }
)


def _loosen(conn: Connection, column: str) -> None:
    """Make ``tt_triggers.<column>`` a TEXT column without CHECKs (to hold corrupt values)."""
    checks = conn.execute(
        "SELECT c.conname FROM pg_constraint c JOIN pg_attribute a "
        "ON a.attrelid = c.conrelid AND a.attnum = ANY (c.conkey) "
        "WHERE c.conrelid = 'tt_triggers'::regclass AND c.contype = 'c' AND a.attname = %s",
        (column,),
    ).fetchall()
    for (name,) in checks:
        conn.execute(f'ALTER TABLE tt_triggers DROP CONSTRAINT "{name}"'.encode())
    conn.execute(
        f"ALTER TABLE tt_triggers ALTER COLUMN {column} TYPE TEXT USING {column}::text".encode()
    )


class PostgresBackdoor:
    """The conformance suite's ``Backdoor`` for the PostgreSQL trigger store."""

    def __init__(self, store: PostgresTriggerStore) -> None:
        self._db = store.database

    async def _execute(self, sql: str, params: tuple[object, ...] = ()) -> None:
        await self._db.transaction(lambda c: c.execute(sql, params))

    async def set_columns(self, trigger_id: str, **values: object) -> None:
        def write(conn: Connection) -> None:
            for name, value in values.items():
                if name in _INTEGER_COLUMNS and value is not None and not isinstance(value, int):
                    _loosen(conn, name)
            assignments = ", ".join(f"{name} = %s" for name in values)
            conn.execute(
                f"UPDATE tt_triggers SET {assignments} WHERE trigger_id = %s",
                (*values.values(), trigger_id),
            )

        await self._db.transaction(write)

    async def put_fire(
        self,
        trigger_id: str,
        occurrence: int,
        outcome: str | None,
        run_id: str | None = None,
        error: str | None = None,
    ) -> None:
        await self._execute(
            "INSERT INTO tt_trigger_fires (trigger_id, occurrence_at_ms, outcome, run_id, error) "
            "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (trigger_id, occurrence_at_ms) DO UPDATE "
            "SET outcome = excluded.outcome, run_id = excluded.run_id, error = excluded.error",
            (trigger_id, occurrence, outcome, run_id, error),
        )

    async def fail_pending_writes(self, on: bool) -> None:
        def install(conn: Connection) -> None:
            conn.execute(
                "CREATE OR REPLACE FUNCTION tt_test_fail_pending() RETURNS trigger "
                "LANGUAGE plpgsql AS $$ BEGIN "
                "RAISE EXCEPTION 'injected fault: pending_at_ms'; END $$"
            )
            conn.execute(
                "CREATE TRIGGER tt_test_fail_pending BEFORE UPDATE OF pending_at_ms "
                "ON tt_triggers FOR EACH ROW WHEN (NEW.pending_at_ms IS NOT NULL) "
                "EXECUTE FUNCTION tt_test_fail_pending()"
            )

        if on:
            await self._db.transaction(install)
        else:
            await self._execute("DROP TRIGGER IF EXISTS tt_test_fail_pending ON tt_triggers")

    async def break_tables(self) -> None:
        await self._execute("DROP TABLE tt_trigger_fires, tt_triggers, tt_scheduler_heartbeats")

    async def dump(self) -> Dump:
        def read(c: Connection) -> Dump:
            return {
                "tt_triggers": c.execute(
                    f"SELECT {_TRIGGER_COLUMNS} FROM tt_triggers ORDER BY trigger_id"
                ).fetchall(),
                "tt_trigger_fires": c.execute(
                    "SELECT trigger_id, occurrence_at_ms, outcome, run_id, error "
                    "FROM tt_trigger_fires ORDER BY trigger_id, occurrence_at_ms"
                ).fetchall(),
                "tt_scheduler_heartbeats": c.execute(
                    "SELECT host, ticked_at_ms FROM tt_scheduler_heartbeats ORDER BY host"
                ).fetchall(),
            }

        return await self._db.transaction(read)


@contextlib.asynccontextmanager
async def open_postgres_trigger_backend(clock: WallClock, tmp_path: Path) -> AsyncIterator[Opened]:
    """``Backend.open`` for the trigger-store suite: a fresh schema, a store and a peer."""
    from tests.store.backends import Opened  # lazy: tests.store.backends imports this module

    del tmp_path
    with fresh_schema() as dsn:
        async with open_postgres_trigger_store(dsn, clock=clock, pool_size=2) as store:

            @contextlib.asynccontextmanager
            async def peer() -> AsyncIterator[TriggerStore]:
                async with open_postgres_trigger_store(dsn, clock=clock, pool_size=2) as other:
                    yield other

            yield Opened(store=store, backdoor=PostgresBackdoor(store), peer=peer)


@contextlib.asynccontextmanager
async def postgres_run_backend(
    clock: WallClock, tmp_path: Path, stale_after_ms: int
) -> AsyncIterator[RunStoreBase]:
    """The run-store suite's factory: a fresh schema and a run store on it."""
    del tmp_path
    with fresh_schema() as dsn:
        async with open_postgres_run_store(
            dsn, clock=clock, pool_size=2, stale_after_ms=stale_after_ms
        ) as store:
            yield store
