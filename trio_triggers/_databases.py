"""Opening both stores of one database: a SQLite file or a PostgreSQL DSN.

One database holds the trigger store and the run store, so a run and the ledger row that
launched it live and die together (one file to back up, one server to fail over). Used by
:func:`trio_triggers.open_triggers` and by the command line.
"""

from __future__ import annotations

import sqlite3
import urllib.parse
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from ._errors import TriggerError
from ._ownership import HEARTBEAT_STALE_AFTER_MS, RunStore, open_sqlite_run_store
from ._sqlite import SqliteDatabase
from ._store import SqliteTriggerStore, TriggerStore

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from ._clock import WallClock

__all__ = ["is_dsn", "open_stores", "shown_db"]


def is_dsn(db: str) -> bool:
    """Whether ``db`` names a PostgreSQL database rather than a SQLite file."""
    return db.startswith(("postgresql://", "postgres://"))


def shown_db(db: str) -> str:
    """``db`` as the CLI prints it: a DSN's password (in the user info or the query) masked."""
    if not is_dsn(db):
        return db
    parts = urllib.parse.urlsplit(db)
    netloc = parts.netloc
    userinfo, at, hosts = netloc.rpartition("@")
    if at and ":" in userinfo:
        netloc = f"{userinfo.split(':', 1)[0]}:***@{hosts}"
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    if any(key == "password" for key, _ in query):
        masked = [(key, "***" if key == "password" else value) for key, value in query]
        encoded = urllib.parse.urlencode(masked, safe="*")
    else:
        encoded = parts.query
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc, query=encoded))


@asynccontextmanager
async def open_stores(
    db: str,
    *,
    clock: WallClock,
    stale_after_ms: int = HEARTBEAT_STALE_AFTER_MS,
) -> AsyncIterator[tuple[TriggerStore, RunStore]]:
    """Open the trigger store and the run store of ``db`` (one SQLite connection for both)."""
    if is_dsn(db):
        async with _open_postgres(db, clock=clock, stale_after_ms=stale_after_ms) as stores:
            yield stores
        return
    try:
        database = await SqliteDatabase.open(db)
    except sqlite3.Error as exc:
        raise TriggerError("store", f"could not open the SQLite database {db}: {exc}") from exc
    try:
        trigger_store = await SqliteTriggerStore.open(database, clock=clock)
        async with open_sqlite_run_store(
            database, clock=clock, stale_after_ms=stale_after_ms
        ) as run_store:
            yield trigger_store, run_store
    finally:
        await database.aclose()


@asynccontextmanager
async def _open_postgres(
    dsn: str, *, clock: WallClock, stale_after_ms: int
) -> AsyncIterator[tuple[TriggerStore, RunStore]]:
    try:
        from .postgres import open_postgres_stores
    except ImportError as exc:  # pragma: no cover - psycopg missing
        raise TriggerError(
            "store", "PostgreSQL needs the extra: pip install 'trio-triggers[postgres]'"
        ) from exc
    async with open_postgres_stores(dsn, clock=clock, stale_after_ms=stale_after_ms) as stores:
        yield stores.trigger_store, stores.run_store
