"""The PostgreSQL trigger store.

Every method is one transaction on one pooled connection (:mod:`._database`), running the same
method bodies as the memory and SQLite stores (:mod:`trio_triggers._store._bodies`, through the
seam :mod:`trio_triggers._store._backend`), which call the same pure claim decision
(:mod:`trio_triggers._store._decision`). Only the row reads and the decision's writes are written
here, each as one statement.

What makes a read-decide-write atomic on a server with many writers: every method that may write
reads the trigger row first with ``SELECT … FOR UPDATE`` (:meth:`_PostgresTx.state`), so two
writers on one trigger serialise on that row lock, in any process on any host; the ledger rows of
a trigger are only written by transactions that hold it (``prune_fires`` deletes only settled rows
no claim reads). Read-only methods take no locks (READ COMMITTED: one consistent statement each).
"""

from __future__ import annotations

import contextlib
import functools
from typing import TYPE_CHECKING, Any, Final, TypeVar, final

import psycopg

from .._clock import SystemWallClock, WallClock
from .._errors import TriggerError
from .._migrations import MigrationError
from .._store._backend import (
    READ_ONLY_METHODS,
    STATE_COLUMNS,
    BatchItemFailed,
    EngineStore,
    failure_for,
    run_bodies,
    trigger_sql,
    write_failed,
)
from .._store._sql import insert_new_params, insert_new_statement
from ._database import DEFAULT_POOL_SIZE, Connection, PostgresDatabase, TimeoutSettings
from ._schema import TRIGGER_MIGRATIONS, TRIGGER_SHAPES, owns_trigger_migration

if TYPE_CHECKING:
    import builtins
    from collections.abc import AsyncIterator, Callable, Sequence

    from psycopg.rows import TupleRow

    from .._executor import Executor
    from .._store import _backend as backend
    from .._store._models import HistoryQuery

__all__ = ["PostgresTriggerStore", "open_postgres_trigger_store"]

# psycopg's errors; ValueError/OverflowError: psycopg refusing to adapt a parameter.
_DRIVER_ERRORS = (psycopg.Error, ValueError, OverflowError)

T = TypeVar("T")

# Every method that may write reads its trigger row FOR UPDATE (see _PostgresTx.state), and
# concurrent schedulers take disjoint due rows: a row another transaction has locked (a peer's
# due read, or any write to that trigger) is skipped, and the read's take (_HOLD) moves the rows
# it answers out of every later read until their next write.
_SQL = trigger_sql(
    param="%s",
    greatest="GREATEST",
    text_param="%s::text",
    lock=" FOR UPDATE",
    skip_locked=" FOR UPDATE SKIP LOCKED",
    insert_fire_suffix=" ON CONFLICT DO NOTHING",
)
# A batch's first reads: every named trigger row, locked in one order for every process (so two
# batches cannot deadlock). The ledger rows are read by a SECOND statement of the same round
# trip (_PREFETCH_FIRES): see _PostgresTx.state_with_fire for why one statement cannot do both.
_PREFETCH_LOCK = (
    "SELECT trigger_id, "
    + ", ".join(STATE_COLUMNS)
    + " FROM tt_triggers WHERE trigger_id = ANY(%s::text[]) ORDER BY trigger_id FOR UPDATE"
)
_PREFETCH_FIRES = (
    "SELECT f.trigger_id, f.outcome, f.run_id, f.manual_key "
    "FROM unnest(%s::text[], %s::bigint[]) AS k(trigger_id, occurrence_at_ms) "
    "JOIN tt_trigger_fires AS f "
    "ON f.trigger_id = k.trigger_id AND f.occurrence_at_ms = k.occurrence_at_ms"
)
_ATTENTION_INPUTS = _SQL.select_attention + "= ANY(%s::text[])"
_SELECT_NAMED = _SQL.select_triggers_head + " WHERE trigger_id = ANY(%s::text[])"
#: Rows per multi-row ``INSERT`` of a bulk registration (15 parameters a row: far under the
#: protocol's 65 535).
_BULK_ROWS: Final = 1000


@functools.lru_cache(maxsize=8)
def _insert_new(rows: int) -> str:
    return insert_new_statement(
        rows, "%s", " ON CONFLICT (trigger_id) DO NOTHING RETURNING trigger_id"
    )


_HOLD = "UPDATE tt_triggers SET attention_at_ms = %s WHERE trigger_id = ANY(%s::text[])"


class _PostgresTx:
    """:class:`StoreTx` over one open PostgreSQL transaction.

    ``lock`` is true for the methods that may write: :meth:`state` then locks the trigger row.
    """

    __slots__ = ("_c", "_lock", "_pending", "_prefetched")

    def __init__(self, connection: Connection, *, lock: bool) -> None:
        self._c = connection
        self._lock = lock
        self._pending: list[tuple[str, tuple[object, ...]]] = []
        # trigger id -> (occurrence, state_with_fire answer) read ahead by ``prefetch``; an
        # entry answers only the FIRST access to its trigger (any later read may follow writes).
        self._prefetched: dict[
            str, tuple[int, tuple[backend.RawState, backend.RawFire | None]]
        ] = {}

    def prefetch(self, hints: Sequence[tuple[str, int] | None]) -> None:
        """Read and lock every hinted trigger row (and its hinted ledger row) in one query."""
        wanted: dict[str, int] = {}
        for hint in hints:
            if hint is not None and hint[0] not in wanted:
                wanted[hint[0]] = hint[1]
        if len(wanted) < 2:
            return
        ids = list(wanted)
        locked, fires = self._query_pair(
            (_PREFETCH_LOCK, (ids,)), (_PREFETCH_FIRES, (ids, list(wanted.values())))
        )
        found = {row[0]: (row[1], row[2], row[3]) for row in fires.fetchall()}
        for row in locked.fetchall():
            trigger_id = row[0]
            self._prefetched[trigger_id] = (
                wanted[trigger_id],
                (row[1 : 1 + len(STATE_COLUMNS)], found.get(trigger_id)),
            )

    def _forget(self, trigger_id: str) -> None:
        if self._prefetched:
            self._prefetched.pop(trigger_id, None)

    def _write(self, sql: str, params: tuple[object, ...]) -> None:
        """Queue a write whose result nobody reads; it is sent with the next read or COMMIT."""
        self._pending.append((sql, params))

    def _query(self, sql: str, params: Sequence[object] = ()) -> psycopg.Cursor[TupleRow]:
        """Run a statement whose result is read, after the queued writes (one round trip)."""
        if not self._pending:
            return self._c.execute(sql, params)
        pending, self._pending = self._pending, []
        with self._c.pipeline():
            for queued, queued_params in pending:
                self._c.execute(queued, queued_params)
            cursor = self._c.execute(sql, params)
        return cursor

    def _query_pair(
        self,
        first: tuple[str, Sequence[object]],
        second: tuple[str, Sequence[object]],
    ) -> tuple[psycopg.Cursor[TupleRow], psycopg.Cursor[TupleRow]]:
        """Two statements in one round trip, the second run (and its snapshot taken) after the
        first has finished, including any lock wait of the first."""
        pending, self._pending = self._pending, []
        with self._c.pipeline():
            for queued, queued_params in pending:
                self._c.execute(queued, queued_params)
            one = self._c.cursor()
            one.execute(*first)
            two = self._c.cursor()
            two.execute(*second)
        return one, two

    def finish(self) -> None:
        """Send the queued writes and COMMIT together (pipeline mode: one round trip)."""
        pending, self._pending = self._pending, []
        if not pending:
            self._c.commit()
            return
        with self._c.pipeline():
            for queued, queued_params in pending:
                self._c.execute(queued, queued_params)
            self._c.commit()

    def trigger(self, trigger_id: str) -> backend.RawTrigger | None:
        self._forget(trigger_id)
        return self._query(_SQL.select_trigger, (trigger_id,)).fetchone()

    def triggers(self, *, enabled_only: bool) -> builtins.list[backend.RawTrigger]:
        return self._query(_SQL.select_enabled if enabled_only else _SQL.select_triggers).fetchall()

    def state(self, trigger_id: str) -> backend.RawState | None:
        self._forget(trigger_id)
        sql = _SQL.lock_state if self._lock else _SQL.select_state
        return self._query(sql, (trigger_id,)).fetchone()

    def fire(self, trigger_id: str, occurrence: int) -> backend.RawFire | None:
        self._forget(trigger_id)
        row = self._query(_SQL.select_fire, (trigger_id, occurrence)).fetchone()
        return None if row is None else (row[0], row[1], row[2])

    def state_with_fire(
        self, trigger_id: str, occurrence: int
    ) -> tuple[backend.RawState, backend.RawFire | None] | None:
        if self._prefetched:
            ahead = self._prefetched.pop(trigger_id, None)
            if ahead is not None and ahead[0] == occurrence:
                return ahead[1]
        if not self._lock:
            return _SQL.state_and_fire(
                self._query(_SQL.state_with_fire, (occurrence, trigger_id)).fetchone()
            )
        # Lock the trigger row, THEN read its ledger row, in two statements. Under READ
        # COMMITTED a statement reads from the snapshot taken when it starts: a locking read
        # that waits for another transaction's lock re-reads the LOCKED row at its newest
        # version when that transaction commits, but any other table it joins is still read
        # from the old snapshot. One statement would therefore see the trigger row a peer just
        # reserved next to the ledger as it was before the peer's claim (no row for this
        # occurrence), and decide on that mixture: the claim of an occurrence a peer holds
        # would record it ``skipped`` over the peer's live reservation, whose ``launched`` is
        # then refused, stranding the reservation until its lease ends. The second statement
        # starts after the lock is granted, so its snapshot includes whatever the lock's
        # previous holder committed, and every ledger row of this trigger is written only
        # under that lock.
        state, fire = self._query_pair(
            (_SQL.lock_state, (trigger_id,)), (_SQL.select_fire, (trigger_id, occurrence))
        )
        raw = state.fetchone()
        if raw is None:
            return None
        found = fire.fetchone()
        return raw, (None if found is None else (found[0], found[1], found[2]))

    def insert_fire(self, trigger_id: str, occurrence: int) -> None:
        self._forget(trigger_id)
        self._write(_SQL.insert_fire, (trigger_id, occurrence))

    def manual_fire(self, key: str) -> backend.RawManualFire | None:
        row = self._query(_SQL.select_manual_fire, (key,)).fetchone()
        return None if row is None else (row[0], row[1], row[2], row[3], row[4], row[5])

    def insert_manual_fire(
        self, trigger_id: str, occurrence: int, key: str, input_json: str, by: str | None
    ) -> None:
        self._forget(trigger_id)
        self._write(_SQL.insert_manual_fire, (trigger_id, occurrence, key, input_json, by))

    def launched_occurrence(self, trigger_id: str, run_id: str) -> int | None:
        self._forget(trigger_id)
        row = self._query(_SQL.launched_occurrence, (trigger_id, run_id)).fetchone()
        value = row[0] if row is not None else None
        return value if isinstance(value, int) else None

    def upsert(self, trigger: backend.EncodedTrigger, registered_at: int) -> None:
        self._forget(trigger.trigger_id)
        self._write(_SQL.upsert, _SQL.upsert_values(trigger, registered_at))

    def triggers_named(self, trigger_ids: Sequence[str]) -> builtins.list[backend.RawTrigger]:
        for trigger_id in trigger_ids:
            self._forget(trigger_id)
        return self._query(_SELECT_NAMED, (list(trigger_ids),)).fetchall()

    def insert_new(
        self, rows: Sequence[tuple[backend.EncodedTrigger, int | None]], registered_at: int
    ) -> set[str]:
        # A row read absent may be inserted by a concurrent registration before this one
        # (READ COMMITTED takes no lock on an absent row): DO NOTHING leaves it, and its id is
        # missing from the answer, so the caller registers it the ordinary way.
        inserted: set[str] = set()
        for start in range(0, len(rows), _BULK_ROWS):
            chunk = rows[start : start + _BULK_ROWS]
            for trigger, _ in chunk:
                self._forget(trigger.trigger_id)
            cursor = self._query(_insert_new(len(chunk)), insert_new_params(chunk, registered_at))
            inserted.update(str(row[0]) for row in cursor.fetchall())
        return inserted

    def attention_inputs(self, trigger_ids: Sequence[str]) -> builtins.list[backend.RawAttention]:
        return self._query(_ATTENTION_INPUTS, (list(trigger_ids),)).fetchall()

    def set_attention(self, trigger_id: str, attention_at: int | None) -> None:
        self._write(_SQL.set_attention, (attention_at, trigger_id))

    def set_registered_at(self, trigger_id: str, registered_at: int) -> None:
        self._forget(trigger_id)
        self._write(_SQL.set_registered_at, (registered_at, trigger_id))

    def due(self, now: int, limit: int) -> builtins.list[backend.RawDue]:
        return self._query(_SQL.due, (now, limit)).fetchall()

    def hold(self, trigger_ids: Sequence[str], until: int) -> None:
        self._write(_HOLD, (until, list(trigger_ids)))

    def next_attention(self) -> object:
        row = self._query(_SQL.next_attention).fetchone()
        return None if row is None else row[0]

    def holding(self) -> builtins.list[backend.RawDue]:
        return self._query(_SQL.holding).fetchall()

    def apply(self, trigger_id: str, write: backend.TriggerWrite) -> None:
        self._forget(trigger_id)
        self._write(*_SQL.statement(trigger_id, write))

    def apply_all(self, trigger_id: str, writes: tuple[backend.TriggerWrite, ...]) -> None:
        self._forget(trigger_id)
        for statement in _SQL.statements(trigger_id, writes):
            self._write(*statement)

    def history(
        self, query: HistoryQuery, fetch: int | None
    ) -> builtins.list[backend.RawFireRecord]:
        rows = self._query(*_SQL.history(query, fetch)).fetchall()
        return [(r[0], r[1], r[2], r[3], r[4], r[5]) for r in rows]

    def prune(self, older_than: int) -> int:
        self._prefetched.clear()
        return self._query(_SQL.prune, (older_than,)).rowcount

    def heartbeat(self, host: str, at: int) -> None:
        self._write(_SQL.heartbeat, (host, at))

    def last_heartbeat(self) -> tuple[object, object] | None:
        row = self._query(_SQL.last_heartbeat).fetchone()
        return None if row is None else (row[0], row[1])


@final
class PostgresTriggerStore(EngineStore):
    """A :class:`~trio_triggers.TriggerStore` on an open :class:`PostgresDatabase`.

    Most code uses :func:`open_postgres_trigger_store`; construct this class directly to use a
    database object you manage (call :meth:`migrate` once). The store never closes a database it
    was given.
    """

    _batching = True

    def __init__(self, database: PostgresDatabase, *, clock: WallClock | None = None) -> None:
        self._database = database
        self._clock = clock if clock is not None else SystemWallClock()

    @property
    def database(self) -> PostgresDatabase:
        return self._database

    @property
    def clock(self) -> WallClock:
        return self._clock

    async def migrate(self) -> builtins.list[str]:
        """Apply the migrations this database lacks, under the migration advisory lock.

        A migration that cannot be applied, or a database written by a newer version, raises
        ``store``, ``could not run trigger migrations`` with the reason as ``__cause__``.
        """
        try:
            return await self._database.migrate(
                TRIGGER_MIGRATIONS, owns=owns_trigger_migration, shapes=TRIGGER_SHAPES
            )
        except MigrationError as exc:
            raise TriggerError("store", f"could not run trigger migrations: {exc}") from exc
        except Exception as exc:  # the pool failing underneath it
            raise TriggerError("store", "could not run trigger migrations") from exc

    async def _run(
        self,
        method: backend.Method,
        body: Callable[[backend.StoreTx, int], T],
        *,
        now: bool = False,
    ) -> T:
        # The clock is read on the Trio thread, once, before the transaction: worker threads
        # cannot read a Trio clock, and the database's now() is never used.
        at = self._clock.now_ms() if now else 0
        lock = method not in READ_ONLY_METHODS

        def work(connection: Connection) -> T:
            tx = _PostgresTx(connection, lock=lock)
            result = body(tx, at)
            tx.finish()  # the queued writes and COMMIT in one round trip
            return result

        try:
            return await self._database.transaction(work)
        except TriggerError:
            raise
        except _DRIVER_ERRORS as exc:
            raise failure_for(method) from exc

    async def _run_batch(
        self,
        bodies: Sequence[backend.Body],
        *,
        hints: Sequence[backend.Hint] = (),
        now: bool = True,
    ) -> builtins.list[Any]:
        at = self._clock.now_ms() if now else 0

        def work(connection: Connection) -> builtins.list[Any]:
            tx = _PostgresTx(connection, lock=True)
            tx.prefetch(hints)
            values = run_bodies(tx, bodies, at, psycopg.Error)
            tx.finish()
            return values

        try:
            return await self._database.transaction(work)
        except (TriggerError, BatchItemFailed):
            raise
        except _DRIVER_ERRORS as exc:
            raise write_failed() from exc

    def __repr__(self) -> str:
        return f"PostgresTriggerStore(clock={self._clock!r})"


@contextlib.asynccontextmanager
async def open_postgres_trigger_store(
    dsn: str,
    *,
    clock: WallClock | None = None,
    pool_size: int = DEFAULT_POOL_SIZE,
    statement_timeout: float = 5.0,
    lock_timeout: float = 2.0,
    connect_timeout: float = 5.0,
    pool_timeout: float = 5.0,
    executor: Executor | None = None,
) -> AsyncIterator[PostgresTriggerStore]:
    """Open (migrating) the PostgreSQL trigger store on ``dsn``; close its pool on exit.

    ``dsn`` is a libpq connection string or ``postgresql://`` URI (its ``options``, e.g. a
    ``search_path``, are kept). ``pool_size`` connections at most; calls run in worker threads
    limited to the same number. ``statement_timeout`` and ``lock_timeout`` bound every statement
    on the server; ``pool_timeout`` bounds the wait for a pooled connection. ``executor``
    replaces the thread executor (tests wrap it to pause ``MockClock`` autojump).

    Failing to reach the server, or to migrate, raises ``store``,
    ``could not run trigger migrations`` with the driver error as ``__cause__``.
    """
    try:
        database = await PostgresDatabase.open(
            dsn,
            application_name="trio-triggers:triggers",
            timeouts=TimeoutSettings(
                statement_timeout=statement_timeout,
                lock_timeout=lock_timeout,
                connect_timeout=connect_timeout,
                pool_timeout=pool_timeout,
            ),
            pool_size=pool_size,
            executor=executor,
        )
    except psycopg.Error as exc:
        raise TriggerError("store", "could not run trigger migrations") from exc
    try:
        store = PostgresTriggerStore(database, clock=clock)
        await store.migrate()
        yield store
    finally:
        await database.aclose()
