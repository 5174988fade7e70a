"""PostgreSQL stores for trio-triggers (extra ``trio-triggers[postgres]``).

Both stores use the same schema, rules and pure decision code as the SQLite stores; they differ
only in how they read a snapshot (``SELECT … FOR UPDATE`` on the row a method may write) and
apply writes, on a pool of psycopg 3 connections driven from worker threads. See
``docs/postgres.md``.
"""

from __future__ import annotations

from ._database import DEFAULT_POOL_SIZE, PostgresDatabase, TimeoutSettings, is_postgres_dsn
from ._run_store import PostgresRunStore, open_postgres_run_store
from ._stores import PostgresStores, open_postgres_stores
from ._trigger_store import PostgresTriggerStore, open_postgres_trigger_store

__all__ = [
    "DEFAULT_POOL_SIZE",
    "PostgresDatabase",
    "PostgresRunStore",
    "PostgresStores",
    "PostgresTriggerStore",
    "TimeoutSettings",
    "is_postgres_dsn",
    "open_postgres_run_store",
    "open_postgres_stores",
    "open_postgres_trigger_store",
]
