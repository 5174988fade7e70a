"""THE backend seam of the run store: what a new run store implements, and all it may import.

A run store is a :class:`RunStoreBase` subclass. The base holds every rule of ``ownership.md``
(argument validation and its order, store-clock readings, the skew bound, metrics) and the pure
decisions (:mod:`._decide`) decide every operation, so a backend supplies four primitives and no
rule of its own:

* ``_atomic(method, run_id, decide)``: in ONE transaction, read the row of ``run_id`` (``None``
  when absent), call ``decide(row)`` and, when the :class:`Decision` carries a row, write the
  columns that changed (:func:`changed_columns`); answer ``decision.outcome``. Nothing may commit
  to the row between the read and the write: a server locks it (``SELECT … FOR UPDATE``,
  :attr:`RunSql.lock_one`), a single-writer database begins with its write lock
  (SQLite ``BEGIN IMMEDIATE``);
* ``_create(run_id, idempotency_key, decide)``: read the row holding the key and whether
  ``run_id`` is taken, call ``decide(existing, taken)`` (``None``: refuse with ``constraint``)
  and insert the decided row; a racing create that took the key first answers
  ``Existing(row=<its row>)``, never a unique violation;
* ``_get(run_id)`` and ``_list(statuses, limit, claimable_at, newest_first=, trigger_id=)``:
  plain reads (:meth:`RunSql.list_runs` has the query). A SQL store (:class:`SqlRunStore`) has
  both already and supplies ``_select(method, sql, params)`` instead: one read-only transaction
  answering the decoded rows of one statement.

Rows are read with :data:`SELECT_LIST` and decoded with :func:`decode_row` (a row breaking a
column rule raises ``decode_failed``); rows are written from :func:`row_columns`. A failure of
the database becomes :func:`driver_error` (``constraint`` for an integrity error, else
``persistence_failed``). The SQL of every SQL dialect is :func:`run_sql`'s table. The run-store
conformance tests (``tests/ownership``) run against every store a backend registers there.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import TYPE_CHECKING, Final, Generic, Protocol, TypeVar

import msgspec

from .._errors import RunStoreError
from .._identities import BOUNDARY_STAMP_LENGTH
from .._migrations import Migration, MigrationError, Shape, owns_run_migration
from ._base import RunStoreBase
from ._columns import COLUMNS, SELECT_LIST, decode_row, first_table_columns, row_columns
from ._decide import Decision
from ._models import Created, Existing, RunRow
from ._owner import HEARTBEAT_STALE_AFTER_MS

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Sequence

    from .._clock import WallClock

__all__ = [
    "COLUMNS",
    "HEARTBEAT_STALE_AFTER_MS",
    "SELECT_LIST",
    "Created",
    "Decision",
    "Existing",
    "RunRow",
    "RunSql",
    "RunStoreBase",
    "SqlRunStore",
    "changed_columns",
    "decode_row",
    "driver_error",
    "first_table_columns",
    "insert_values",
    "row_columns",
    "run_sql",
]

_CAUSE_DEPTH: Final = 8


class Migrating(Protocol):
    """A database that applies migrations (:func:`trio_triggers._migrations.apply_migrations`)."""

    async def migrate(
        self,
        migrations: Sequence[Migration],
        *,
        owns: Callable[[str], bool],
        shapes: Sequence[Shape] | None = None,
    ) -> list[str]: ...


DatabaseT = TypeVar("DatabaseT", bound=Migrating)


class SqlRunStore(RunStoreBase, Generic[DatabaseT]):
    """A run store on a SQL database object it may share with the trigger store (and never
    closes): what the SQLite and PostgreSQL run stores have in common besides the SQL."""

    #: This dialect's ``runs_...`` migrations.
    _migrations: Sequence[Migration]
    #: This dialect's statements (:func:`run_sql`).
    _sql: RunSql
    #: What a failed migration raises here (it becomes ``persistence_failed`` in ``open``).
    _migration_errors: tuple[type[BaseException], ...] = (MigrationError,)
    #: What each prefix of the migrations makes (default: their SQLite replay).
    _shapes: Sequence[Shape] | None = None

    def __init__(
        self,
        database: DatabaseT,
        *,
        clock: WallClock | None = None,
        stale_after_ms: int = HEARTBEAT_STALE_AFTER_MS,
    ) -> None:
        super().__init__(clock=clock, stale_after_ms=stale_after_ms)
        self._db = database

    @property
    def database(self) -> DatabaseT:
        return self._db

    async def migrate(self) -> list[str]:
        """Create ``tt_runs`` if needed; returns the migration names applied now."""
        try:
            return await self._db.migrate(
                self._migrations, owns=owns_run_migration, shapes=self._shapes
            )
        except self._migration_errors as exc:
            raise RunStoreError("persistence_failed", "open", str(exc)) from exc

    @abstractmethod
    async def _select(self, method: str, sql: str, params: Sequence[object]) -> list[RunRow]:
        """The rows ``sql`` answers, decoded for ``method``, read in one read-only transaction."""

    async def _get(self, run_id: str) -> RunRow | None:
        found = await self._select("get", self._sql.select_one, (run_id,))
        return found[0] if found else None

    async def _list(
        self,
        statuses: Collection[str] | None,
        limit: int | None,
        claimable_at: int | None,
        *,
        newest_first: bool = False,
        trigger_id: str | None = None,
    ) -> list[RunRow]:
        query = self._sql.list_runs(
            statuses,
            limit,
            claimable_at,
            self._stale_after_ms,
            newest_first=newest_first,
            trigger_id=trigger_id,
        )
        if query is None:
            return []
        sql, params = query
        return await self._select(
            "list_runs" if claimable_at is None else "find_claimable", sql, params
        )


def driver_error(method: str, exc: BaseException, integrity: type[BaseException]) -> RunStoreError:
    """``constraint`` for an ``integrity`` error anywhere in the chain (8 levels), else
    ``persistence_failed`` (``ownership.md`` §9.1)."""
    seen: BaseException | None = exc
    for _ in range(_CAUSE_DEPTH):
        if seen is None:
            break
        if isinstance(seen, integrity):
            return RunStoreError("constraint", method, "a database constraint was violated")
        seen = seen.__cause__ or seen.__context__
    return RunStoreError(
        "persistence_failed", method, f"the database failed ({type(exc).__name__})"
    )


def changed_columns(old: RunRow, new: RunRow) -> tuple[list[str], tuple[object, ...]]:
    """The columns ``new`` changes from ``old`` (in :data:`COLUMNS` order) and their values."""
    values = row_columns(new)
    before = row_columns(old)
    changed = [c for c in COLUMNS if values[c] != before[c]]
    return changed, tuple(values[c] for c in changed)


def insert_values(row: RunRow) -> tuple[object, ...]:
    """The parameters of :attr:`RunSql.insert` for ``row``."""
    values = row_columns(row)
    return tuple(values[c] for c in COLUMNS)


class RunSql(msgspec.Struct, frozen=True, kw_only=True):
    """One dialect's ``tt_runs`` statements."""

    select_one: str  # (run_id)
    lock_one: str  # (run_id): select_one, locking the row where the dialect locks
    select_key: str  # (idempotency_key)
    taken: str  # (run_id)
    insert: str  # insert_values(row)
    param: str
    #: ``status = ANY(<param>)`` with one list parameter, or ``status IN (<param>, ...)``.
    status_array: bool
    #: How ``list_runs`` orders ties of ``created_at_ms`` by ``run_id`` (code point order).
    run_id_order: str

    def update(self, changed: Collection[str]) -> str:
        """The ``UPDATE`` of ``changed`` columns (parameters: their values, then ``run_id``)."""
        p = self.param
        assignments = ", ".join(f"{c} = {p}" for c in changed)
        return f"UPDATE tt_runs SET {assignments} WHERE run_id = {p}"

    def list_runs(
        self,
        statuses: Collection[str] | None,
        limit: int | None,
        claimable_at: int | None,
        stale_after_ms: int,
        *,
        newest_first: bool = False,
        trigger_id: str | None = None,
    ) -> tuple[str, list[object]] | None:
        """``list_runs`` / ``find_claimable``'s read, or ``None`` when it must answer nothing.

        ``trigger_id`` keeps the runs launched for that trigger's boundaries: their idempotency
        key is exactly ``"<trigger_id>:"`` and a 24-character ISO instant (the length makes
        the prefix test exact, so trigger ``a`` never takes the runs of trigger ``a:b``).
        """
        p = self.param
        where: list[str] = []
        params: list[object] = []
        if statuses is not None:
            wanted = sorted(set(statuses))
            if not wanted:
                return None
            if self.status_array:
                where.append(f"status = ANY({p})")
                params.append(wanted)
            else:
                where.append(f"status IN ({', '.join(p for _ in wanted)})")
                params.extend(wanted)
        if claimable_at is not None:
            cut = claimable_at - stale_after_ms
            where.append(
                f"((claim_host_id IS NOT NULL AND claimed_at_ms < {p})"
                " OR (claim_host_id IS NULL AND status IN ('pending', 'suspended')"
                f" AND (retry_at_ms IS NULL OR retry_at_ms <= {p}"
                " OR cancel_requested_at_ms IS NOT NULL))"
                f" OR (claim_host_id IS NULL AND status = 'running' AND heartbeat_at_ms < {p}))"
            )
            params.extend([cut, claimable_at, cut])
        if trigger_id is not None:
            prefix = f"{trigger_id}:"
            where.append(f"length(idempotency_key) = {p} AND substr(idempotency_key, 1, {p}) = {p}")
            params.extend([len(prefix) + BOUNDARY_STAMP_LENGTH, len(prefix), prefix])
        sql = f"SELECT {SELECT_LIST} FROM tt_runs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        order = " DESC" if newest_first else ""
        sql += f" ORDER BY created_at_ms{order}, {self.run_id_order}{order}"
        if limit is not None:
            sql += f" LIMIT {p}"
            params.append(limit)
        return sql, params


def run_sql(
    *,
    param: str,
    lock: str = "",
    insert_suffix: str = "",
    status_array: bool = False,
    run_id_order: str = "run_id",
) -> RunSql:
    """The statements in one dialect: ``param`` its placeholder, ``lock`` the suffix of a read
    that locks its row (`` FOR UPDATE``), ``insert_suffix`` the insert's conflict clause."""
    p = param
    select_one = f"SELECT {SELECT_LIST} FROM tt_runs WHERE run_id = {p}"
    return RunSql(
        select_one=select_one,
        lock_one=select_one + lock,
        select_key=f"SELECT {SELECT_LIST} FROM tt_runs WHERE idempotency_key = {p}",
        taken=f"SELECT 1 FROM tt_runs WHERE run_id = {p}",
        insert=(
            f"INSERT INTO tt_runs ({SELECT_LIST}) VALUES ({', '.join(p for _ in COLUMNS)})"
            + insert_suffix
        ),
        param=param,
        status_array=status_array,
        run_id_order=run_id_order,
    )
