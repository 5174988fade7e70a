"""The SQLite trigger store: the schema and migrations of ``triggers.md`` §9.3.

Each method is one transaction on the shared :class:`~trio_triggers._sqlite.SqliteDatabase`
(``BEGIN IMMEDIATE`` for every method that may write, a deferred ``BEGIN`` snapshot for the
read-only ones), running the same method bodies as every other store (:mod:`._bodies`, through
the seam :mod:`._backend`). Only the row reads and the writes of :mod:`._decision` are written
here, each as one statement.
"""

from __future__ import annotations

import contextlib
import functools
import sqlite3
from typing import TYPE_CHECKING, Any, Final, Literal, TypeVar, final

from .._clock import SystemWallClock, WallClock
from .._errors import TriggerError
from .._migrations import Migration, MigrationError, owns_trigger_migration
from .._sqlite import BUSY_WAIT_S, SqliteDatabase
from ._backend import (
    CLOCK_METHODS,
    MISSED_COLUMNS,
    READ_ONLY_METHODS,
    UNKNOWN,
    BatchItemFailed,
    EngineStore,
    failure_for,
    run_bodies,
    trigger_sql,
    write_failed,
)
from ._sql import INSERT_NEW_COLUMNS, insert_new_params, insert_new_statement

if TYPE_CHECKING:
    import builtins
    from collections.abc import AsyncIterator, Callable, Sequence

    from .._executor import Executor
    from . import _backend as backend
    from ._models import HistoryQuery

__all__ = [
    "TRIGGER_MIGRATIONS",
    "SqliteTriggerStore",
    "open_sqlite_trigger_store",
]

T = TypeVar("T")

_OUTCOME_CHECK = "'launched', 'completed', 'skipped', 'buffered', 'superseded', 'failed'"

TRIGGER_MIGRATIONS: Final[tuple[Migration, ...]] = (
    (
        "0001_triggers",
        (
            """
            CREATE TABLE tt_triggers (
                trigger_id TEXT PRIMARY KEY NOT NULL,
                flow_id TEXT NOT NULL,
                input_json TEXT NOT NULL,
                cron TEXT NOT NULL,
                timezone TEXT,
                overlap TEXT NOT NULL CHECK (overlap IN ('skip', 'buffer-one', 'supersede')),
                catch_up TEXT NOT NULL CHECK (catch_up IN ('none', 'one', 'all')),
                max_catch_up INTEGER NOT NULL CHECK (max_catch_up >= 0),
                enabled INTEGER NOT NULL CHECK (enabled IN (0, 1)),
                revision INTEGER NOT NULL,
                last_fired_at_ms INTEGER,
                pending_at_ms INTEGER,
                active_run_id TEXT
            )
            """,
            f"""
            CREATE TABLE tt_trigger_fires (
                trigger_id TEXT NOT NULL REFERENCES tt_triggers (trigger_id),
                occurrence_at_ms INTEGER NOT NULL,
                outcome TEXT CHECK (outcome IS NULL OR outcome IN ({_OUTCOME_CHECK})),
                run_id TEXT,
                error TEXT,
                PRIMARY KEY (trigger_id, occurrence_at_ms)
            )
            """,
        ),
    ),
    (
        "0002_reservation_lease",
        ("ALTER TABLE tt_triggers ADD COLUMN active_claimed_at_ms INTEGER",),
    ),
    (
        "0003_heartbeat",
        (
            """
            CREATE TABLE tt_scheduler_heartbeats (
                host TEXT PRIMARY KEY NOT NULL,
                ticked_at_ms INTEGER NOT NULL
            )
            """,
        ),
    ),
    (
        "0004_fire_run_index",
        ("CREATE INDEX tt_trigger_fires_run_id ON tt_trigger_fires (run_id)",),
    ),
    (
        "0005_attention",
        (
            "ALTER TABLE tt_triggers ADD COLUMN registered_at_ms INTEGER",
            # Rows from before the index are due at once; the first due read computes them.
            f"ALTER TABLE tt_triggers ADD COLUMN attention_at_ms INTEGER DEFAULT {UNKNOWN}",
            "CREATE INDEX tt_triggers_attention ON tt_triggers (attention_at_ms, trigger_id) "
            "WHERE attention_at_ms IS NOT NULL",
            "CREATE INDEX tt_triggers_holding ON tt_triggers (trigger_id) "
            "WHERE active_run_id IS NOT NULL",
        ),
    ),
    (
        "0006_operator_state",
        (
            "ALTER TABLE tt_triggers ADD COLUMN paused_at_ms INTEGER",
            "ALTER TABLE tt_triggers ADD COLUMN pause_note TEXT",
            "ALTER TABLE tt_triggers ADD COLUMN paused_by TEXT",
            "ALTER TABLE tt_triggers ADD COLUMN resume_after_ms INTEGER",
            "ALTER TABLE tt_triggers ADD COLUMN removed_at_ms INTEGER",
        ),
    ),
    (
        "0007_missed_counts",
        tuple(
            f"ALTER TABLE tt_triggers ADD COLUMN {column} INTEGER NOT NULL DEFAULT 0"
            for column in MISSED_COLUMNS
        ),
    ),
    (
        "0008_backfills",
        (
            # A trigger's latest backfill (docs/operations.md, "Backfill"): at most one runs.
            "ALTER TABLE tt_triggers ADD COLUMN backfill_start_ms INTEGER",
            "ALTER TABLE tt_triggers ADD COLUMN backfill_end_ms INTEGER",
            "ALTER TABLE tt_triggers ADD COLUMN backfill_next_ms INTEGER",
            "ALTER TABLE tt_triggers ADD COLUMN backfill_total INTEGER",
            "ALTER TABLE tt_triggers ADD COLUMN backfill_done INTEGER",
            "ALTER TABLE tt_triggers ADD COLUMN backfill_bound INTEGER",
            "ALTER TABLE tt_triggers ADD COLUMN backfill_overlap TEXT",
            "ALTER TABLE tt_triggers ADD COLUMN backfill_state TEXT",
            "ALTER TABLE tt_triggers ADD COLUMN backfill_created_at_ms INTEGER",
            "ALTER TABLE tt_triggers ADD COLUMN backfill_by TEXT",
        ),
    ),
    (
        "0009_manual_fires",
        (
            # A manual fire ("run now") is a ledger row at an off-grid instant with its key,
            # the input its run gets and who asked; a key names one fire in the whole store.
            "ALTER TABLE tt_trigger_fires ADD COLUMN manual_key TEXT",
            "ALTER TABLE tt_trigger_fires ADD COLUMN manual_input_json TEXT",
            "ALTER TABLE tt_trigger_fires ADD COLUMN manual_by TEXT",
            "CREATE UNIQUE INDEX tt_trigger_fires_manual_key ON tt_trigger_fires (manual_key) "
            "WHERE manual_key IS NOT NULL",
        ),
    ),
    (
        "0010_trigger_failure_fields",
        (
            # Jitter, the window and pausing after failures (docs/declarations.md, "Jitter,
            # windows and pausing after failures"): a row from before them has none of them.
            "ALTER TABLE tt_triggers ADD COLUMN jitter_ms INTEGER NOT NULL DEFAULT 0 "
            "CHECK (jitter_ms >= 0)",
            "ALTER TABLE tt_triggers ADD COLUMN start_at_ms INTEGER",
            "ALTER TABLE tt_triggers ADD COLUMN end_at_ms INTEGER",
            "ALTER TABLE tt_triggers ADD COLUMN pause_after_failures INTEGER "
            "CHECK (pause_after_failures IS NULL OR pause_after_failures >= 1)",
            "ALTER TABLE tt_triggers ADD COLUMN consecutive_failures INTEGER NOT NULL DEFAULT 0",
        ),
    ),
)
"""The trigger store's migrations, in order (their names are recorded in ``tt_migrations``)."""


_SQL = trigger_sql(param="?", greatest="max", text_param="?")

#: Rows per multi-row ``INSERT`` of a bulk registration: 15 parameters a row stays under
#: SQLite's limit on a statement's parameters (32 766 since 3.32, 999 before).
_BULK_ROWS: Final = 500 if sqlite3.sqlite_version_info >= (3, 32) else 60


@functools.lru_cache(maxsize=8)
def _insert_new(rows: int) -> str:
    return insert_new_statement(rows, "?")


@functools.lru_cache(maxsize=8)
def _select_named(count: int) -> str:
    return _SQL.select_named(count)


class _SqliteTx:
    """:class:`StoreTx` over one open SQLite transaction."""

    __slots__ = ("_c",)

    def __init__(self, connection: sqlite3.Connection) -> None:
        self._c = connection

    def trigger(self, trigger_id: str) -> backend.RawTrigger | None:
        row: backend.RawTrigger | None = self._c.execute(
            _SQL.select_trigger, (trigger_id,)
        ).fetchone()
        return row

    def triggers(self, *, enabled_only: bool) -> builtins.list[backend.RawTrigger]:
        sql = _SQL.select_enabled if enabled_only else _SQL.select_triggers
        return self._c.execute(sql).fetchall()

    def state(self, trigger_id: str) -> backend.RawState | None:
        row: backend.RawState | None = self._c.execute(_SQL.select_state, (trigger_id,)).fetchone()
        return row

    def fire(self, trigger_id: str, occurrence: int) -> backend.RawFire | None:
        row: backend.RawFire | None = self._c.execute(
            _SQL.select_fire, (trigger_id, occurrence)
        ).fetchone()
        return row

    def state_with_fire(
        self, trigger_id: str, occurrence: int
    ) -> tuple[backend.RawState, tuple[object, object, object] | None] | None:
        return _SQL.state_and_fire(
            self._c.execute(_SQL.state_with_fire, (occurrence, trigger_id)).fetchone()
        )

    def insert_fire(self, trigger_id: str, occurrence: int) -> None:
        self._c.execute(_SQL.insert_fire, (trigger_id, occurrence))

    def manual_fire(self, key: str) -> backend.RawManualFire | None:
        row: backend.RawManualFire | None = self._c.execute(
            _SQL.select_manual_fire, (key,)
        ).fetchone()
        return row

    def insert_manual_fire(
        self, trigger_id: str, occurrence: int, key: str, input_json: str, by: str | None
    ) -> None:
        self._c.execute(_SQL.insert_manual_fire, (trigger_id, occurrence, key, input_json, by))

    def launched_occurrence(self, trigger_id: str, run_id: str) -> int | None:
        row = self._c.execute(_SQL.launched_occurrence, (trigger_id, run_id)).fetchone()
        value = row[0] if row is not None else None
        return value if isinstance(value, int) else None

    def upsert(self, trigger: backend.EncodedTrigger, registered_at: int) -> None:
        self._c.execute(_SQL.upsert, _SQL.upsert_values(trigger, registered_at))

    def triggers_named(self, trigger_ids: Sequence[str]) -> builtins.list[backend.RawTrigger]:
        rows: list[backend.RawTrigger] = []
        step = _BULK_ROWS * len(INSERT_NEW_COLUMNS)  # as many ids as a bulk insert's values
        for start in range(0, len(trigger_ids), step):
            chunk = trigger_ids[start : start + step]
            rows.extend(self._c.execute(_select_named(len(chunk)), chunk).fetchall())
        return rows

    def insert_new(
        self, rows: Sequence[tuple[backend.EncodedTrigger, int | None]], registered_at: int
    ) -> set[str]:
        # One write transaction holds the database (BEGIN IMMEDIATE): rows read absent in it
        # are still absent, so every row is inserted.
        for start in range(0, len(rows), _BULK_ROWS):
            chunk = rows[start : start + _BULK_ROWS]
            self._c.execute(_insert_new(len(chunk)), insert_new_params(chunk, registered_at))
        return {trigger.trigger_id for trigger, _ in rows}

    def attention_inputs(self, trigger_ids: Sequence[str]) -> builtins.list[backend.RawAttention]:
        rows: list[backend.RawAttention] = []
        for start in range(0, len(trigger_ids), 500):
            chunk = trigger_ids[start : start + 500]
            marks = ", ".join("?" * len(chunk))
            rows.extend(self._c.execute(f"{_SQL.select_attention}IN ({marks})", chunk).fetchall())
        return rows

    def set_attention(self, trigger_id: str, attention_at: int | None) -> None:
        self._c.execute(_SQL.set_attention, (attention_at, trigger_id))

    def set_registered_at(self, trigger_id: str, registered_at: int) -> None:
        self._c.execute(_SQL.set_registered_at, (registered_at, trigger_id))

    def due(self, now: int, limit: int) -> builtins.list[backend.RawDue]:
        return self._c.execute(_SQL.due, (now, limit)).fetchall()

    def hold(self, trigger_ids: Sequence[str], until: int) -> None:
        self._c.executemany(_SQL.set_attention, [(until, trigger_id) for trigger_id in trigger_ids])

    def next_attention(self) -> object:
        row = self._c.execute(_SQL.next_attention).fetchone()
        return None if row is None else row[0]

    def holding(self) -> builtins.list[backend.RawDue]:
        return self._c.execute(_SQL.holding).fetchall()

    def apply(self, trigger_id: str, write: backend.TriggerWrite) -> None:
        self._c.execute(*_SQL.statement(trigger_id, write))

    def apply_all(self, trigger_id: str, writes: tuple[backend.TriggerWrite, ...]) -> None:
        execute = self._c.execute
        for statement in _SQL.statements(trigger_id, writes):
            execute(*statement)

    def history(
        self, query: HistoryQuery, fetch: int | None
    ) -> builtins.list[backend.RawFireRecord]:
        return self._c.execute(*_SQL.history(query, fetch)).fetchall()

    def prune(self, older_than: int) -> int:
        return self._c.execute(_SQL.prune, (older_than,)).rowcount

    def heartbeat(self, host: str, at: int) -> None:
        self._c.execute(_SQL.heartbeat, (host, at))

    def last_heartbeat(self) -> tuple[object, object] | None:
        row: tuple[object, object] | None = self._c.execute(_SQL.last_heartbeat).fetchone()
        return row


# Driver failures: sqlite3's own errors, plus the binding errors it raises as ValueError
# (text it cannot encode) or OverflowError (an integer beyond 64 bits).
_DRIVER_ERRORS = (sqlite3.Error, ValueError, OverflowError)


@final
class SqliteTriggerStore(EngineStore):
    """A :class:`TriggerStore` on an open :class:`SqliteDatabase`.

    Most code uses :func:`open_sqlite_trigger_store`. Construct this class directly to share
    one database (one file, one writer connection) with another component such as the run
    store: ``store = await SqliteTriggerStore.open(database, clock=clock)`` migrates and
    returns the store; the database stays owned (and closed) by the caller.
    """

    _batching = True

    def __init__(self, database: SqliteDatabase, *, clock: WallClock | None = None) -> None:
        self._database = database
        self._clock = clock if clock is not None else SystemWallClock()

    @property
    def database(self) -> SqliteDatabase:
        return self._database

    @property
    def clock(self) -> WallClock:
        return self._clock

    @classmethod
    async def open(
        cls, database: SqliteDatabase, *, clock: WallClock | None = None
    ) -> SqliteTriggerStore:
        """Apply the trigger migrations to ``database`` and return a store on it."""
        store = cls(database, clock=clock)
        await store.migrate()
        return store

    async def migrate(self) -> builtins.list[str]:
        """Apply the migrations this database lacks (idempotent); answer the names applied.

        A migration that cannot be applied, or a database written by a newer version (an
        ``NNNN_`` name this version does not know), raises ``store``,
        ``could not run trigger migrations`` with the reason as ``__cause__``.
        """
        try:
            return await self._database.migrate(TRIGGER_MIGRATIONS, owns=owns_trigger_migration)
        except MigrationError as exc:
            raise TriggerError("store", f"could not run trigger migrations: {exc}") from exc
        except sqlite3.Error as exc:
            raise TriggerError("store", "could not run trigger migrations") from exc

    async def _run(
        self,
        method: backend.Method,
        body: Callable[[backend.StoreTx, int], T],
        *,
        now: bool = False,
        checkpoint: bool = True,
    ) -> T:
        at = self._clock.now_ms() if now else 0
        try:
            return await self._database.transaction(
                lambda connection: body(_SqliteTx(connection), at),
                write=method not in READ_ONLY_METHODS,
                checkpoint=checkpoint,
            )
        except TriggerError:
            raise
        except _DRIVER_ERRORS as exc:
            raise failure_for(method) from exc

    async def _run_alone(self, method: backend.Method, body: backend.Body) -> Any:
        return await self._run(method, body, now=method in CLOCK_METHODS, checkpoint=False)

    async def _run_batch(
        self,
        bodies: Sequence[backend.Body],
        *,
        hints: Sequence[backend.Hint] = (),
        now: bool = True,
    ) -> builtins.list[Any]:
        del hints  # every read is a local call: nothing to gain from reading ahead
        at = self._clock.now_ms() if now else 0

        def run_all(connection: sqlite3.Connection) -> builtins.list[Any]:
            return run_bodies(_SqliteTx(connection), bodies, at, sqlite3.Error)

        try:
            return await self._database.transaction(run_all, checkpoint=False)
        except (TriggerError, BatchItemFailed):
            raise
        except _DRIVER_ERRORS as exc:
            raise write_failed() from exc

    def __repr__(self) -> str:
        return f"SqliteTriggerStore(path={self._database.path!r}, clock={self._clock!r})"


@contextlib.asynccontextmanager
async def open_sqlite_trigger_store(
    path: str,
    *,
    clock: WallClock | None = None,
    executor: Executor | None = None,
    synchronous: Literal["OFF", "NORMAL", "FULL", "EXTRA"] = "NORMAL",
    busy_wait: float = BUSY_WAIT_S,
) -> AsyncIterator[SqliteTriggerStore]:
    """Open (creating and migrating) the SQLite trigger store at ``path``; close it on exit.

    ``":memory:"`` gives a private in-memory database. ``executor`` defaults to the inline
    executor (deterministic under ``MockClock``); pass a ``ThreadExecutor`` to run statements
    in a worker thread. ``synchronous`` is SQLite's durability level (``NORMAL`` by default,
    see the store docs for what a power loss can cost); ``busy_wait`` bounds the Trio time one
    call waits for another connection's write lock.
    """
    try:
        database = await SqliteDatabase.open(
            path, executor=executor, synchronous=synchronous, busy_wait=busy_wait
        )
    except sqlite3.Error as exc:
        raise TriggerError("store", "could not run trigger migrations") from exc
    try:
        store = await SqliteTriggerStore.open(database, clock=clock)
        yield store
    finally:
        await database.aclose()
