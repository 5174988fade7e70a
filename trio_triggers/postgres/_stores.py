"""Both stores of one PostgreSQL database, for the CLI and for applications that want both."""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, NamedTuple

from .._ownership._backend import HEARTBEAT_STALE_AFTER_MS
from ._database import DEFAULT_POOL_SIZE
from ._run_store import PostgresRunStore, open_postgres_run_store
from ._trigger_store import PostgresTriggerStore, open_postgres_trigger_store

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from .._clock import WallClock

__all__ = ["PostgresStores", "open_postgres_stores"]


class PostgresStores(NamedTuple):
    """The trigger store and the run store of one database (unpacks as a pair)."""

    trigger_store: PostgresTriggerStore
    run_store: PostgresRunStore


@asynccontextmanager
async def open_postgres_stores(
    dsn: str,
    *,
    clock: WallClock | None = None,
    pool_size: int = DEFAULT_POOL_SIZE,
    run_pool_size: int = DEFAULT_POOL_SIZE,
    stale_after_ms: int = HEARTBEAT_STALE_AFTER_MS,
) -> AsyncIterator[PostgresStores]:
    """Open (migrating) both stores on ``dsn``: ``async with ... as (triggers, runs):``.

    Each store has its own pool, because their server-side bounds differ: the run store keeps
    every round trip well under the heartbeat interval, the trigger store allows longer
    statements (a large ``list`` or ``history``). Both use the same ``clock``.
    """
    async with (
        open_postgres_trigger_store(dsn, clock=clock, pool_size=pool_size) as trigger_store,
        open_postgres_run_store(
            dsn, clock=clock, pool_size=run_pool_size, stale_after_ms=stale_after_ms
        ) as run_store,
    ):
        yield PostgresStores(trigger_store, run_store)
