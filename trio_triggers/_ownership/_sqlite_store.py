"""The SQLite run store: ``tt_runs`` on the shared :class:`~trio_triggers._sqlite.SqliteDatabase`.

Every operation is one ``BEGIN IMMEDIATE`` transaction on the database's single writer
connection: the row is read, the shared pure decision (:mod:`._decide`) runs, and the changed
columns are written before ``COMMIT``. SQLite serialises writers across connections and
processes, so nothing can commit to the row between the read and the write (``ownership.md``
§1.5). Lock waits are Trio sleeps (``busy_timeout`` 0), so a cancelled call returns promptly.

The store can own its database (``open_sqlite_run_store(path)``) or be opened on a database that
is already open (``open_sqlite_run_store(database)``), for example the one the SQLite trigger
store uses: both stores then share one file and one writer connection. The migrations of this
store are named ``runs_*`` and never collide with the trigger store's.
"""

from __future__ import annotations

import sqlite3
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Generic, TypeVar, final

from .._batching import GroupCommit, never_needs_now, run_each
from .._errors import RunStoreError
from .._migrations import Migration, owns_run_migration
from .._sqlite import BUSY_WAIT_S, SqliteDatabase, Synchronous
from ._backend import (
    HEARTBEAT_STALE_AFTER_MS,
    Created,
    Decision,
    Existing,
    RunRow,
    SqlRunStore,
    changed_columns,
    decode_row,
    driver_error,
    first_table_columns,
    insert_values,
    run_sql,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Sequence

    from .._clock import WallClock
    from .._executor import Executor

__all__ = ["RUN_MIGRATIONS", "SqliteRunStore", "open_sqlite_run_store", "owns_run_migration"]

OutcomeT = TypeVar("OutcomeT")

_DDL = f"""
CREATE TABLE IF NOT EXISTS tt_runs (
{first_table_columns("INTEGER")},

    CONSTRAINT tt_runs_run_id CHECK (length(run_id) > 0),
    CONSTRAINT tt_runs_status CHECK (status IN
        ('pending', 'running', 'suspended', 'completed', 'failed', 'cancelled')),
    CONSTRAINT tt_runs_created_at CHECK (typeof(created_at_ms) = 'integer'
        AND created_at_ms BETWEEN 0 AND 9007199254740991),
    CONSTRAINT tt_runs_started_at CHECK (started_at_ms IS NULL
        OR (typeof(started_at_ms) = 'integer' AND started_at_ms BETWEEN 0 AND 9007199254740991)),
    CONSTRAINT tt_runs_finished_at CHECK (finished_at_ms IS NULL
        OR (typeof(finished_at_ms) = 'integer' AND finished_at_ms BETWEEN 0 AND 9007199254740991)),
    CONSTRAINT tt_runs_heartbeat_at CHECK (heartbeat_at_ms IS NULL
        OR (typeof(heartbeat_at_ms) = 'integer'
            AND heartbeat_at_ms BETWEEN 0 AND 9007199254740991)),
    CONSTRAINT tt_runs_claimed_at CHECK (claimed_at_ms IS NULL
        OR (typeof(claimed_at_ms) = 'integer' AND claimed_at_ms BETWEEN 0 AND 9007199254740991)),
    CONSTRAINT tt_runs_cancel_requested_at CHECK (cancel_requested_at_ms IS NULL
        OR (typeof(cancel_requested_at_ms) = 'integer'
            AND cancel_requested_at_ms BETWEEN 0 AND 9007199254740991)),
    CONSTRAINT tt_runs_owner CHECK (
        (status = 'running'
            AND owner_host_id IS NOT NULL AND length(owner_host_id) > 0
            AND typeof(owner_pid) = 'integer' AND owner_pid BETWEEN 0 AND 9007199254740991
            AND owner_nonce IS NOT NULL AND length(owner_nonce) > 0
            AND heartbeat_at_ms IS NOT NULL)
        OR
        (status <> 'running'
            AND owner_host_id IS NULL AND owner_pid IS NULL AND owner_nonce IS NULL
            AND heartbeat_at_ms IS NULL)),
    CONSTRAINT tt_runs_claim CHECK (
        (claim_host_id IS NULL AND claim_pid IS NULL AND claim_nonce IS NULL
            AND claimed_at_ms IS NULL)
        OR
        (claim_host_id IS NOT NULL AND length(claim_host_id) > 0
            AND typeof(claim_pid) = 'integer' AND claim_pid BETWEEN 0 AND 9007199254740991
            AND claim_nonce IS NOT NULL AND length(claim_nonce) > 0
            AND claimed_at_ms IS NOT NULL
            AND status IN ('pending', 'suspended', 'running'))),
    CONSTRAINT tt_runs_finished CHECK (
        (finished_at_ms IS NOT NULL) = (status IN ('completed', 'failed', 'cancelled'))),
    CONSTRAINT tt_runs_started CHECK ((started_at_ms IS NULL) = (status = 'pending')),
    CONSTRAINT tt_runs_state_json CHECK (json_valid(state_json)),
    CONSTRAINT tt_runs_cancel_ack CHECK (cancel_acknowledgement_json IS NULL
        OR (cancel_requested_at_ms IS NOT NULL AND json_valid(cancel_acknowledgement_json))),
    CONSTRAINT tt_runs_flow_id CHECK (flow_id IS NULL OR length(flow_id) > 0),
    CONSTRAINT tt_runs_input_json CHECK (input_json IS NULL OR json_valid(input_json)),
    CONSTRAINT tt_runs_result_json CHECK (result_json IS NULL
        OR (status = 'completed' AND json_valid(result_json))),
    CONSTRAINT tt_runs_error CHECK (error IS NULL OR status IN ('failed', 'cancelled')),
    CONSTRAINT tt_runs_idempotency_key CHECK (idempotency_key IS NULL
        OR length(idempotency_key) > 0)
)
"""

RUN_MIGRATIONS: list[Migration] = [
    (
        "runs_0001_tt_runs",
        [
            _DDL,
            "CREATE INDEX IF NOT EXISTS tt_runs_cancel_requested ON tt_runs "
            "(cancel_requested_at_ms) WHERE cancel_requested_at_ms IS NOT NULL",
            # Our own index for list_runs / find_claimable (allowed by §8).
            "CREATE INDEX IF NOT EXISTS tt_runs_status_created ON tt_runs "
            "(status, created_at_ms, run_id)",
        ],
    ),
    (
        # Our addition: how many times an owner began executing the run (RunRow.attempts).
        "runs_0002_attempts",
        [
            "ALTER TABLE tt_runs ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0 "
            "CONSTRAINT tt_runs_attempts CHECK (typeof(attempts) = 'integer' AND attempts >= 0)",
        ],
    ),
    (
        # Our addition: what a flow printed (RunRow.output_json), kept with its outcome.
        "runs_0003_output",
        [
            "ALTER TABLE tt_runs ADD COLUMN output_json TEXT "
            "CONSTRAINT tt_runs_output_json CHECK (output_json IS NULL "
            "OR (status IN ('completed', 'failed', 'cancelled') AND json_valid(output_json)))",
        ],
    ),
    (
        # Our addition: a run waiting between two attempts of its retry policy, and the
        # attempts that failed before (RunRow.retry_at_ms, RunRow.attempt_log_json).
        "runs_0004_retries",
        [
            "ALTER TABLE tt_runs ADD COLUMN retry_at_ms INTEGER "
            "CONSTRAINT tt_runs_retry_at_ms CHECK (retry_at_ms IS NULL "
            "OR (status = 'suspended' AND typeof(retry_at_ms) = 'integer'))",
            "ALTER TABLE tt_runs ADD COLUMN attempt_log_json TEXT "
            "CONSTRAINT tt_runs_attempt_log_json CHECK (attempt_log_json IS NULL "
            "OR json_valid(attempt_log_json))",
        ],
    ),
]


_SQL = run_sql(param="?")


def _driver_error(method: str, exc: BaseException) -> RunStoreError:
    return driver_error(method, exc, sqlite3.IntegrityError)


def _write(conn: sqlite3.Connection, old: RunRow | None, new: RunRow) -> None:
    if old is None:
        conn.execute(_SQL.insert, insert_values(new))
        return
    changed, values = changed_columns(old, new)
    if not changed:
        return
    cursor = conn.execute(_SQL.update(changed), (*values, new.run_id))
    if cursor.rowcount != 1:
        raise sqlite3.OperationalError("the row disappeared inside its transaction")


class _Keyed(Generic[OutcomeT]):
    """A run's write with the run's id: a batch orders its writes by it (one run's keep their
    order, and every process takes rows in the same order)."""

    __slots__ = ("fn", "run_id")

    def __init__(self, run_id: str, fn: Callable[[sqlite3.Connection], OutcomeT]) -> None:
        self.run_id = run_id
        self.fn = fn

    def __call__(self, conn: sqlite3.Connection) -> OutcomeT:
        return self.fn(conn)


def _copy_failure(exc: BaseException, method: str) -> BaseException:
    """Each caller's own error for a batch whose transaction failed (begin or commit)."""
    if isinstance(exc, sqlite3.Error):
        return _driver_error(method, exc)
    if isinstance(exc, RunStoreError):
        return RunStoreError(exc.code, method, exc.message)
    return exc


@final
class SqliteRunStore(SqlRunStore[SqliteDatabase]):
    """The SQLite :class:`~trio_triggers.RunStore`. Build it with :func:`open_sqlite_run_store`.

    ``SqliteRunStore(database, clock=...)`` on an already open and migrated
    :class:`~trio_triggers._sqlite.SqliteDatabase` is also fine; call :meth:`migrate` once.
    The store never closes a database it was given.
    """

    _migrations = RUN_MIGRATIONS
    _sql = _SQL

    _group: GroupCommit | None = None

    async def _run(
        self, method: str, fn: Callable[[sqlite3.Connection], OutcomeT], *, write: bool
    ) -> OutcomeT:
        if write:
            # Writes of runs that proceed side by side (a thousand launches, claims and
            # outcomes a second) share transactions: one COMMIT for all that arrived together.
            group = self._group
            if group is None:
                group = self._group = GroupCommit(
                    self, needs_now=never_needs_now, copy_failure=_copy_failure
                )
            key = fn.run_id if isinstance(fn, _Keyed) else ""
            value: OutcomeT = await group.call(method, key, fn, None)
            return value
        return await self._alone(method, fn, write=write)

    async def _alone(
        self,
        method: str,
        fn: Callable[[sqlite3.Connection], OutcomeT],
        *,
        write: bool,
        checkpoint: bool = True,
    ) -> OutcomeT:
        try:
            return await self._db.transaction(fn, write=write, checkpoint=checkpoint)
        except RunStoreError:
            raise
        except sqlite3.Error as exc:
            raise _driver_error(method, exc) from exc

    async def _run_alone(self, method: str, body: Callable[[sqlite3.Connection], Any]) -> Any:
        """One write in a transaction of its own (:class:`~trio_triggers._batching.GroupCommit`:
        a batch one of whose writes refused, or a batch of one)."""
        return await self._alone(method, body, write=True, checkpoint=False)

    async def _run_batch(
        self,
        bodies: Sequence[Callable[[sqlite3.Connection], Any]],
        *,
        hints: Sequence[object] = (),
        now: bool = True,
    ) -> list[Any]:
        """The writes of a batch in order in ONE transaction, as if each had its own: each
        reads the row (the ones before it in the batch included) and decides alone."""
        del hints, now  # every read is a local call; the decisions take their own ``now``

        def run_all(conn: sqlite3.Connection) -> list[Any]:
            return run_each(bodies, lambda body: body(conn), sqlite3.Error)

        return await self._db.transaction(run_all, checkpoint=False)

    async def _atomic(
        self, method: str, run_id: str, decide: Callable[[RunRow | None], Decision[OutcomeT]]
    ) -> OutcomeT:
        def txn(conn: sqlite3.Connection) -> OutcomeT:
            found = conn.execute(_SQL.select_one, (run_id,)).fetchone()
            row = None if found is None else decode_row(found, method)
            decision = decide(row)
            if decision.row is not None:
                _write(conn, row, decision.row)
            return decision.outcome

        return await self._run(method, _Keyed(run_id, txn), write=True)

    async def _create(
        self,
        run_id: str,
        idempotency_key: str | None,
        decide: Callable[[RunRow | None, bool], Decision[Created | Existing] | None],
    ) -> Created | Existing:
        def by_key(conn: sqlite3.Connection) -> RunRow | None:
            if idempotency_key is None:
                return None
            found = conn.execute(_SQL.select_key, (idempotency_key,)).fetchone()
            return None if found is None else decode_row(found, "create")

        def txn(conn: sqlite3.Connection) -> Created | Existing:
            existing = by_key(conn)
            taken = conn.execute(_SQL.taken, (run_id,)).fetchone()
            decision = decide(existing, taken is not None)
            if decision is None:
                raise RunStoreError("constraint", "create", "a run with that run_id already exists")
            if decision.row is not None:
                try:
                    _write(conn, None, decision.row)
                except sqlite3.IntegrityError:
                    # A racing create took the key first: report its row, never the key.
                    raced = by_key(conn)
                    if raced is None:
                        raise
                    return Existing(row=raced)
            return decision.outcome

        return await self._run("create", _Keyed(run_id, txn), write=True)

    async def _select(self, method: str, sql: str, params: Sequence[object]) -> list[RunRow]:
        def read(conn: sqlite3.Connection) -> list[RunRow]:
            return [decode_row(found, method) for found in conn.execute(sql, params).fetchall()]

        try:
            return await self._db.statement(read)  # one SELECT: its own snapshot
        except RunStoreError:
            raise
        except sqlite3.Error as exc:
            raise _driver_error(method, exc) from exc

    def __repr__(self) -> str:
        return f"SqliteRunStore(path={self._db.path!r})"


@asynccontextmanager
async def open_sqlite_run_store(
    path: str | SqliteDatabase,
    *,
    clock: WallClock | None = None,
    executor: Executor | None = None,
    synchronous: Synchronous = "NORMAL",
    busy_wait: float = BUSY_WAIT_S,
    stale_after_ms: int = HEARTBEAT_STALE_AFTER_MS,
) -> AsyncIterator[SqliteRunStore]:
    """Open (creating and migrating) the run store at ``path``; close it on exit.

    ``path`` may be a file name, ``":memory:"``, or an already open
    :class:`~trio_triggers._sqlite.SqliteDatabase` (for example the trigger store's): then
    ``executor``, ``synchronous`` and ``busy_wait`` are the database's own, the run store
    migrates ``tt_runs`` into it and leaves it open on exit. The default executor is inline.
    """
    if isinstance(path, SqliteDatabase):
        store = SqliteRunStore(path, clock=clock, stale_after_ms=stale_after_ms)
        await store.migrate()
        yield store
        return
    try:
        database = await SqliteDatabase.open(
            path, executor=executor, synchronous=synchronous, busy_wait=busy_wait
        )
    except sqlite3.Error as exc:
        raise _driver_error("open", exc) from exc
    try:
        store = SqliteRunStore(database, clock=clock, stale_after_ms=stale_after_ms)
        await store.migrate()
        yield store
    finally:
        await database.aclose()
