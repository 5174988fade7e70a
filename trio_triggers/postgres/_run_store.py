"""The PostgreSQL run store: ``tt_runs`` on a pool of PostgreSQL connections.

Every operation is one transaction: the row is read with ``SELECT … FOR UPDATE`` (so nothing
else can commit to it until this transaction ends, in any process on any host), the shared pure
decision of :mod:`trio_triggers._ownership._decide` runs on it, and the changed columns are
written before ``COMMIT`` (``ownership.md`` §1.5). Validation, the skew bound, store-clock readings
and metrics come from :class:`~trio_triggers._ownership._base.RunStoreBase`, exactly as for the
memory and SQLite stores; it, the column mapping, the decode checks and the SQL come through the
run store's backend seam, :mod:`trio_triggers._ownership._backend`.

Because the heartbeat loop's timing holds only if a cancelled call returns promptly
(``ownership.md`` §1.9) and a worker thread holding a transaction is never abandoned, every
round trip is bounded on the server, well below the heartbeat interval: by default
``statement_timeout`` 500 ms and ``lock_timeout`` 250 ms, and at most 500 ms waiting for a
pooled connection.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, final

import psycopg
import psycopg.errors

from .._batching import GroupCommit, never_needs_now, run_each
from .._errors import RunStoreError
from .._ownership._backend import (
    HEARTBEAT_STALE_AFTER_MS,
    SELECT_LIST,
    Created,
    Decision,
    Existing,
    RunRow,
    SqlRunStore,
    changed_columns,
    decode_row,
    driver_error,
    insert_values,
    run_sql,
)
from ._database import DEFAULT_POOL_SIZE, Connection, PostgresDatabase, TimeoutSettings
from ._schema import RUN_MIGRATIONS, RUN_SHAPES

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Sequence

    from .._clock import WallClock
    from .._executor import Executor

__all__ = ["PostgresRunStore", "open_postgres_run_store"]

OutcomeT = TypeVar("OutcomeT")
OutcomeT_co = TypeVar("OutcomeT_co", covariant=True)

_LOCK_MANY = (
    f"SELECT {SELECT_LIST} FROM tt_runs WHERE run_id = ANY(%s) "
    'ORDER BY run_id COLLATE "C" FOR UPDATE'
)
_SQL = run_sql(
    param="%s",
    lock=" FOR UPDATE",
    insert_suffix=" ON CONFLICT (idempotency_key) DO NOTHING",
    status_array=True,
    run_id_order='run_id COLLATE "C"',
)


def _driver_error(method: str, exc: BaseException) -> RunStoreError:
    return driver_error(method, exc, psycopg.IntegrityError)


def _update_and_commit(conn: Connection, old: RunRow, new: RunRow, *, commit: bool) -> None:
    """Write the changed columns, and COMMIT in the same round trip (pipeline mode) when the
    write has the transaction to itself (``commit``); in a batch the batch commits."""
    changed, values = changed_columns(old, new)
    if not changed:
        return
    with conn.pipeline():
        cursor = conn.execute(_SQL.update(changed), (*values, new.run_id))
        if commit:
            conn.commit()
    if cursor.rowcount != 1:  # impossible under the row lock; it changed nothing, so say so
        raise psycopg.OperationalError("the row disappeared inside its transaction")


class _WriteFn(Protocol[OutcomeT_co]):
    def __call__(
        self, conn: Connection, *, commit: bool, locked: dict[str, Any] | None
    ) -> OutcomeT_co: ...


class _Write(Generic[OutcomeT]):
    """A run's write with the run's id (a batch orders its writes, and so its row locks, by
    it); ``commit`` says whether it has the transaction to itself, ``locked`` holds the rows
    its batch has already read and locked (each answers one first read, then is gone)."""

    __slots__ = ("fn", "run_id")

    def __init__(self, run_id: str, fn: _WriteFn[OutcomeT]) -> None:
        self.run_id = run_id
        self.fn = fn

    def __call__(
        self, conn: Connection, *, commit: bool, locked: dict[str, Any] | None = None
    ) -> OutcomeT:
        return self.fn(conn, commit=commit, locked=locked)


def _copy_failure(exc: BaseException, method: str) -> BaseException:
    """Each caller's own error for a batch whose transaction failed."""
    if isinstance(exc, (psycopg.Error, ValueError, OverflowError)):
        return _driver_error(method, exc)
    if isinstance(exc, RunStoreError):
        return RunStoreError(exc.code, method, exc.message)
    return exc


@final
class PostgresRunStore(SqlRunStore[PostgresDatabase]):
    """The PostgreSQL :class:`~trio_triggers.RunStore`; build it with
    :func:`open_postgres_run_store`.

    ``PostgresRunStore(database, clock=...)`` on an open :class:`PostgresDatabase` is also fine;
    call :meth:`migrate` once (it runs under the migration advisory lock). The store never closes
    a database it was given.
    """

    _migrations = RUN_MIGRATIONS
    _shapes = RUN_SHAPES
    _sql = _SQL
    # A MigrationError, or the pool failing underneath it.
    _migration_errors = (Exception,)

    _group: GroupCommit | None = None

    async def _run(self, method: str, fn: Callable[[Connection], OutcomeT]) -> OutcomeT:
        try:
            return await self._db.transaction(fn)
        except RunStoreError:
            raise
        except (psycopg.Error, ValueError, OverflowError) as exc:
            raise _driver_error(method, exc) from exc

    async def _write(self, method: str, write: _Write[OutcomeT]) -> OutcomeT:
        """A run's write, sharing a transaction with the writes that arrive alongside it."""
        group = self._group
        if group is None:
            group = self._group = GroupCommit(
                self, needs_now=never_needs_now, copy_failure=_copy_failure
            )
        value: OutcomeT = await group.call(method, write.run_id, write, None)
        return value

    async def _run_alone(self, method: str, body: _Write[Any]) -> Any:
        """One write in a transaction of its own (it commits with its last statement)."""
        return await self._run(method, lambda conn: body(conn, commit=True))

    async def _run_batch(
        self, bodies: Sequence[_Write[Any]], *, hints: Sequence[object] = (), now: bool = True
    ) -> list[Any]:
        """The writes of a batch in order in ONE transaction (its rows locked in run-id
        order, so two processes' batches cannot deadlock), as if each had its own."""
        del hints, now

        def run_all(conn: Connection) -> list[Any]:
            # Every row of the batch read and locked in one round trip (in run-id order),
            # instead of one ``SELECT ... FOR UPDATE`` per write.
            ids = sorted({body.run_id for body in bodies})
            locked = {found[0]: found for found in conn.execute(_LOCK_MANY, (ids,)).fetchall()}
            return run_each(
                bodies, lambda body: body(conn, commit=False, locked=locked), psycopg.Error
            )

        return await self._db.transaction(run_all)

    async def _atomic(
        self, method: str, run_id: str, decide: Callable[[RunRow | None], Decision[OutcomeT]]
    ) -> OutcomeT:
        def txn(conn: Connection, *, commit: bool, locked: dict[str, Any] | None) -> OutcomeT:
            if locked is not None and run_id in locked:
                found = locked.pop(run_id)  # a later write of this run reads what this one made
            else:
                found = conn.execute(_SQL.lock_one, (run_id,)).fetchone()
            row = None if found is None else decode_row(found, method)
            decision = decide(row)
            if decision.row is not None:
                if row is None:  # pragma: no cover - decisions never create rows
                    raise AssertionError("a decision tried to create a row")
                _update_and_commit(conn, row, decision.row, commit=commit)
            return decision.outcome

        return await self._write(method, _Write(run_id, txn))

    async def _create(
        self,
        run_id: str,
        idempotency_key: str | None,
        decide: Callable[[RunRow | None, bool], Decision[Created | Existing] | None],
    ) -> Created | Existing:
        def by_key(conn: Connection) -> RunRow | None:
            if idempotency_key is None:
                return None
            found = conn.execute(_SQL.select_key, (idempotency_key,)).fetchone()
            return None if found is None else decode_row(found, "create")

        def txn(
            conn: Connection, *, commit: bool, locked: dict[str, Any] | None
        ) -> Created | Existing:
            del locked  # a create reads by key, not by a locked row
            with conn.pipeline():  # both lookups in one round trip
                keyed = (
                    None
                    if idempotency_key is None
                    else conn.execute(_SQL.select_key, (idempotency_key,))
                )
                taken = conn.execute(_SQL.taken, (run_id,))
            found = None if keyed is None else keyed.fetchone()
            existing = None if found is None else decode_row(found, "create")
            decision = decide(existing, taken.fetchone() is not None)
            if decision is None:
                raise RunStoreError("constraint", "create", "a run with that run_id already exists")
            if decision.row is not None:
                with conn.pipeline():  # the insert and COMMIT in one round trip
                    cursor = conn.execute(_SQL.insert, insert_values(decision.row))
                    if commit:
                        conn.commit()
                if cursor.rowcount == 0:
                    # A racing create committed the key first (the insert waited for it): report
                    # its row, never the key's unique violation.
                    raced = by_key(conn)
                    if raced is None:  # pragma: no cover - the conflicting row is committed
                        raise psycopg.OperationalError("the conflicting run disappeared")
                    return Existing(row=raced)
            return decision.outcome

        return await self._write("create", _Write(run_id, txn))

    async def _select(self, method: str, sql: str, params: Sequence[object]) -> list[RunRow]:
        def read(conn: Connection) -> list[RunRow]:
            return [decode_row(found, method) for found in conn.execute(sql, params).fetchall()]

        return await self._run(method, read)

    def __repr__(self) -> str:
        return "PostgresRunStore()"


@asynccontextmanager
async def open_postgres_run_store(
    dsn: str | PostgresDatabase,
    *,
    clock: WallClock | None = None,
    pool_size: int = DEFAULT_POOL_SIZE,
    statement_timeout: float = 0.5,
    lock_timeout: float = 0.25,
    connect_timeout: float = 5.0,
    pool_timeout: float = 0.5,
    executor: Executor | None = None,
    stale_after_ms: int = HEARTBEAT_STALE_AFTER_MS,
) -> AsyncIterator[PostgresRunStore]:
    """Open (creating ``tt_runs`` if needed) the PostgreSQL run store; close its pool on exit.

    ``dsn`` is a libpq connection string or ``postgresql://`` URI, or an already open
    :class:`PostgresDatabase` (then the pool options are that database's and it stays open on
    exit). The timeouts bound every round trip on the server (``ownership.md`` §1.9); the
    defaults keep a cancelled heartbeat prompt. Failing to reach the server raises
    ``RunStoreError("persistence_failed", "open", ...)``.
    """
    if isinstance(dsn, PostgresDatabase):
        store = PostgresRunStore(dsn, clock=clock, stale_after_ms=stale_after_ms)
        await store.migrate()
        yield store
        return
    try:
        database = await PostgresDatabase.open(
            dsn,
            application_name="trio-triggers:runs",
            timeouts=TimeoutSettings(
                statement_timeout=statement_timeout,
                lock_timeout=lock_timeout,
                connect_timeout=connect_timeout,
                pool_timeout=pool_timeout,
            ),
            pool_size=pool_size,
            executor=executor,
            # Every connection open up front: a heartbeat never waits for a connect.
            min_size=pool_size,
        )
    except psycopg.Error as exc:
        raise _driver_error("open", exc) from exc
    try:
        store = PostgresRunStore(database, clock=clock, stale_after_ms=stale_after_ms)
        await store.migrate()
        yield store
    finally:
        await database.aclose()
