"""Shared PostgreSQL plumbing for the trigger store and the run store.

One :class:`PostgresDatabase` owns one :class:`psycopg_pool.ConnectionPool` of *synchronous*
psycopg 3 connections (psycopg has no Trio support) and runs every store method as one
transaction on one pooled connection:

* the work goes through the executor seam: a :class:`~trio_triggers.ThreadExecutor` whose
  :class:`trio.CapacityLimiter` is exactly the pool size, so a worker thread never queues inside
  the pool behind another thread (Trio does the queueing, where cancellation and ``MockClock``
  can see it);
* a worker thread holding a transaction is never abandoned: cancelling the Trio caller waits for
  the thread, which either commits the whole transaction or rolls it back. What bounds that wait
  is the *server*: every connection is opened with ``statement_timeout``, ``lock_timeout`` and
  ``idle_in_transaction_session_timeout``, and taking a connection from the pool is bounded by
  ``pool_timeout``;
* a connection that breaks (server restart, ``pg_terminate_backend``, network loss) makes the
  call that was using it fail with the driver's ``OperationalError``; the pool discards the
  broken connection and the next call gets a fresh one. Nothing is retried behind the caller's
  back: the stores turn the failure into their typed persistence error, and their callers (the
  scheduler's next tick, the heartbeat loop's next pulse) already know how to recover.

Migrations are run by :mod:`trio_triggers._migrations`, the same runner, table and rules as
SQLite's. Each is applied in its own transaction together with the row recording it, and every
migration transaction first takes a transaction-scoped advisory lock (``pg_advisory_xact_lock``)
keyed on the current schema, so two processes opening one database at the same moment apply each
migration exactly once: the second waits for the first, then sees the name recorded and skips
it. PostgreSQL DDL is transactional, so a migration that fails leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING, TypeVar, final

import psycopg
import psycopg.conninfo
import psycopg_pool
import trio
from psycopg.rows import TupleRow

from .._executor import Executor, ExecutorResource, ThreadExecutor
from .._migrations import Migration, MigrationDialect, Shape, apply_migrations

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

__all__ = [
    "DEFAULT_POOL_SIZE",
    "Connection",
    "PostgresDatabase",
    "TimeoutSettings",
    "is_postgres_dsn",
]

T = TypeVar("T")

log = logging.getLogger("trio_triggers.postgres")

Connection = psycopg.Connection[TupleRow]
"""A pooled connection as the stores see it (rows are tuples)."""

DEFAULT_POOL_SIZE = 4
"""Connections per store; matches the scheduler's default ``concurrency`` of 4."""

_MIGRATION_LOCK_SQL = (
    "SELECT pg_advisory_xact_lock(hashtextextended('trio_triggers.migrations:' "
    "|| current_schema(), 0))"
)


def is_postgres_dsn(target: str) -> bool:
    """Whether a ``--db`` style target names a PostgreSQL database (a libpq URI)."""
    return target.startswith(("postgresql://", "postgres://"))


def _positive_seconds(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a positive number of seconds")
    if not value > 0 or value == float("inf"):
        raise ValueError(f"{name} must be a positive finite number of seconds")
    return float(value)


@final
class TimeoutSettings:
    """Server-side bounds set on every pooled connection (seconds).

    * ``statement_timeout``: the longest one statement may run;
    * ``lock_timeout``: the longest one statement may wait for a row or table lock;
    * ``idle_in_transaction_timeout``: a session that sits inside a transaction doing nothing
      this long is ended by the server (a safety net: the stores never leave a transaction idle);
    * ``connect_timeout``: opening one connection (libpq rounds it up to whole seconds, min 2);
    * ``pool_timeout``: the longest a call waits for a pooled connection.
    """

    __slots__ = (
        "connect_timeout",
        "idle_in_transaction_timeout",
        "lock_timeout",
        "pool_timeout",
        "statement_timeout",
    )

    def __init__(
        self,
        *,
        statement_timeout: float,
        lock_timeout: float,
        idle_in_transaction_timeout: float = 10.0,
        connect_timeout: float = 5.0,
        pool_timeout: float = 5.0,
    ) -> None:
        self.statement_timeout: float = _positive_seconds("statement_timeout", statement_timeout)
        self.lock_timeout: float = _positive_seconds("lock_timeout", lock_timeout)
        self.idle_in_transaction_timeout: float = _positive_seconds(
            "idle_in_transaction_timeout", idle_in_transaction_timeout
        )
        self.connect_timeout: float = _positive_seconds("connect_timeout", connect_timeout)
        self.pool_timeout: float = _positive_seconds("pool_timeout", pool_timeout)

    def server_options(self) -> str:
        """The ``-c name=value`` settings sent in the startup packet (no extra round trip)."""

        def ms(value: float) -> int:
            return max(1, round(value * 1000))

        return (
            f"-c statement_timeout={ms(self.statement_timeout)}"
            f" -c lock_timeout={ms(self.lock_timeout)}"
            f" -c idle_in_transaction_session_timeout={ms(self.idle_in_transaction_timeout)}"
        )

    def __repr__(self) -> str:
        return (
            f"TimeoutSettings(statement_timeout={self.statement_timeout}, "
            f"lock_timeout={self.lock_timeout}, "
            f"idle_in_transaction_timeout={self.idle_in_transaction_timeout}, "
            f"connect_timeout={self.connect_timeout}, pool_timeout={self.pool_timeout})"
        )


def build_conninfo(dsn: str, timeouts: TimeoutSettings, *, application_name: str) -> str:
    """The DSN with our session settings added.

    Options already in the DSN come *after* ours, so a DSN that sets ``statement_timeout`` (or a
    ``search_path``) wins. Raises :class:`psycopg.ProgrammingError` for a malformed DSN.
    """
    params = psycopg.conninfo.conninfo_to_dict(dsn)
    user_options = str(params.get("options") or "")
    options = f"{timeouts.server_options()} {user_options}".strip()
    extra: dict[str, str | int | None] = {"options": options}
    if "application_name" not in params:
        extra["application_name"] = application_name
    if "connect_timeout" not in params:
        extra["connect_timeout"] = max(2, round(timeouts.connect_timeout))
    return psycopg.conninfo.make_conninfo(dsn, **extra)


@final
class PostgresDatabase(ExecutorResource):
    """A pool of PostgreSQL connections used by one store.

    Create it with :meth:`open` (inside ``trio.run``) and close it with :meth:`aclose`.
    """

    def __init__(
        self,
        pool: psycopg_pool.ConnectionPool[Connection],
        *,
        executor: Executor,
        timeouts: TimeoutSettings,
        pool_size: int,
        name: str = "trio-triggers",
    ) -> None:
        super().__init__(executor)
        self._pool = pool
        self._timeouts = timeouts
        self._pool_size = pool_size
        self._name = name
        self._unreachable_since: float | None = None  # Trio time of an outage's first failure

    @property
    def pool_size(self) -> int:
        return self._pool_size

    @property
    def timeouts(self) -> TimeoutSettings:
        return self._timeouts

    @classmethod
    async def open(
        cls,
        dsn: str,
        *,
        timeouts: TimeoutSettings,
        pool_size: int = DEFAULT_POOL_SIZE,
        executor: Executor | None = None,
        application_name: str = "trio-triggers",
        min_size: int = 1,
    ) -> PostgresDatabase:
        """Open a pool on ``dsn`` and wait until its first ``min_size`` connections work.

        ``executor`` defaults to a :class:`ThreadExecutor` limited to ``pool_size``; a caller may
        pass a wrapper of one (the test helper that pauses ``MockClock`` autojump does).
        ``min_size`` connections are kept open (the others are opened on demand). Raises
        ``ValueError`` for bad options, :class:`psycopg.ProgrammingError` for a malformed DSN
        and :class:`psycopg.OperationalError` (e.g. :class:`psycopg_pool.PoolTimeout`) when the
        server cannot be reached.
        """
        if isinstance(pool_size, bool) or not isinstance(pool_size, int) or pool_size < 1:
            raise ValueError("pool_size must be a positive integer")
        if isinstance(min_size, bool) or not isinstance(min_size, int) or min_size < 1:
            raise ValueError("min_size must be a positive integer")
        min_size = min(min_size, pool_size)
        conninfo = build_conninfo(dsn, timeouts, application_name=application_name)
        chosen: Executor = executor if executor is not None else ThreadExecutor(pool_size)
        pool: psycopg_pool.ConnectionPool[Connection] = psycopg_pool.ConnectionPool(
            conninfo,
            min_size=min_size,
            max_size=pool_size,
            open=False,
            timeout=timeouts.pool_timeout,
            name=application_name,
        )

        def start() -> None:
            # One direct connection first: an unreachable server or a bad password fails now,
            # with libpq's own error, instead of after the pool's reconnect back-off.
            psycopg.connect(conninfo).close()
            pool.open(wait=False)
            try:
                pool.wait(timeout=timeouts.connect_timeout + timeouts.pool_timeout)
            except BaseException:
                pool.close(timeout=1.0)
                raise

        await chosen.run(start)
        return cls(
            pool, executor=chosen, timeouts=timeouts, pool_size=pool_size, name=application_name
        )

    async def aclose(self) -> None:
        """Close the pool (waits for calls in flight; idempotent)."""
        if self._closed:
            return
        self._closed = True
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(self._pool.close, 5.0)

    async def transaction(self, fn: Callable[[Connection], T]) -> T:
        """Run ``fn(connection)`` inside one transaction and return its result.

        psycopg opens the transaction implicitly with ``fn``'s first statement (READ COMMITTED);
        it is committed when ``fn`` returns and rolled back when it raises, and the exception
        propagates. Cancellation waits for the thread; a cancelled caller then gets
        ``trio.Cancelled`` (the transaction committed or rolled back as a whole). A failed commit
        raises the driver error: the caller never sees success for a transaction that did not
        commit.
        """
        pool = self._pool
        pool_timeout = self._timeouts.pool_timeout

        def run() -> T:
            conn = pool.getconn(timeout=pool_timeout)
            try:
                try:
                    result = fn(conn)
                    conn.commit()
                except BaseException:
                    if not conn.closed:
                        # A broken connection cannot roll back; the pool discards it.
                        with contextlib.suppress(psycopg.Error):
                            conn.rollback()
                    raise
                return result
            finally:
                pool.putconn(conn)

        if self._closed:
            raise psycopg_pool.PoolClosed("the database is closed")
        try:
            result = await self._executor.run(run)
        except psycopg.OperationalError as exc:
            if _lost_server(exc) and self._unreachable_since is None:
                self._unreachable_since = trio.current_time()
                log.warning(
                    "PostgreSQL is unreachable (pool %s): %s; store calls fail until it answers",
                    self._name,
                    _first_line(exc),
                )
            raise
        if self._unreachable_since is not None:
            outage = trio.current_time() - self._unreachable_since
            self._unreachable_since = None
            log.warning("PostgreSQL answers again (pool %s) after %.1f s", self._name, outage)
        # A caller cancelled while the thread ran sees the cancellation now (the transaction has
        # committed whole, so its outcome is unknown to the caller, never half applied).
        await trio.lowlevel.checkpoint_if_cancelled()
        return result

    async def migrate(
        self,
        migrations: Sequence[Migration],
        *,
        owns: Callable[[str], bool],
        shapes: Sequence[Shape] | None = None,
    ) -> list[str]:
        """Apply the ``migrations`` not yet recorded, in order; return the names applied
        (:func:`trio_triggers._migrations.apply_migrations`, as on SQLite). Every transaction
        here holds the schema's migration advisory lock."""
        return await apply_migrations(
            self, migrations, owns=owns, dialect=_MIGRATIONS, shapes=shapes
        )


def _lost_server(exc: psycopg.OperationalError) -> bool:
    """Whether ``exc`` says the server is gone (refused, broken or shut down connections, no
    pooled connection in time), not that one statement failed (a timeout, a lock wait):
    client-side failures carry no SQLSTATE; class 08 is a connection exception and 57P the
    server's shutdowns."""
    state = exc.sqlstate
    return state is None or state.startswith(("08", "57P"))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _execute(conn: Connection, sql: str, params: tuple[object, ...]) -> list[TupleRow]:
    # The migrations' DDL is constant text of this package (bytes: psycopg's query type).
    cursor = conn.execute(sql.encode(), params or None)
    return cursor.fetchall() if cursor.description is not None else []


_MIGRATIONS: MigrationDialect[Connection] = MigrationDialect(
    execute=_execute,
    param="%s",
    errors=psycopg.Error,
    first=_MIGRATION_LOCK_SQL,
    tables=(
        "SELECT table_name FROM information_schema.tables"
        " WHERE table_schema = current_schema() AND table_name LIKE 'tt\\_%'"
    ),
    columns=(
        "SELECT column_name FROM information_schema.columns"
        " WHERE table_schema = current_schema() AND table_name = %s"
    ),
)
