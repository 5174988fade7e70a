"""The migration runner every SQL store uses (SQLite and PostgreSQL alike).

A migration is a ``(name, statements)`` pair. The names applied are recorded in
``tt_migrations(name TEXT PRIMARY KEY NOT NULL)``; each migration is applied once, in its own
transaction together with the row recording it, so a failure leaves nothing behind (PostgreSQL
DDL is transactional; SQLite's is too).

Both stores may share one database: their names do not overlap (the trigger store's are
``NNNN_...``, the run store's ``runs_...``), and each store recognises its own through an ``owns``
predicate, so a database written by a newer version (an owned name this version does not know) is
refused before anything is applied.

A database supplies its ``transaction`` and a :class:`MigrationDialect`: how to run one statement
and read its rows, its placeholder, its driver errors, and optionally a statement that starts
every migration transaction (PostgreSQL takes an advisory lock there, so two processes opening
one database at once apply each migration exactly once: the second waits, then sees the name
recorded and skips it).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Final, Generic, Protocol, TypeVar

__all__ = [
    "Migration",
    "MigrationDialect",
    "MigrationError",
    "apply_migrations",
    "owns_run_migration",
    "owns_trigger_migration",
    "schema_shapes",
]

T = TypeVar("T")
C = TypeVar("C")
C_co = TypeVar("C_co", covariant=True)

Migration = tuple[str, Sequence[str]]
"""A migration: its recorded name and the SQL statements it runs (in one transaction)."""

Rows = Sequence[Sequence[object]]

_CREATE_TABLE: Final = "CREATE TABLE IF NOT EXISTS tt_migrations (name TEXT PRIMARY KEY NOT NULL)"
_LEDGER: Final = "tt_migrations"

Shape = Mapping[str, frozenset[str]]
"""Tables (``tt_...``) and their column names."""


class MigrationError(Exception):
    """A migration could not be applied, or the database was written by a newer version."""


def owns_trigger_migration(name: str) -> bool:
    """Whether a recorded name is the trigger store's (``NNNN_...``)."""
    return len(name) > 5 and name[:4].isdigit() and name[4] == "_"


def owns_run_migration(name: str) -> bool:
    """Whether a recorded name is the run store's (``runs_...``)."""
    return name.startswith("runs_")


_SHAPES: dict[tuple[tuple[str, tuple[str, ...]], ...], tuple[Shape, ...]] = {}


def schema_shapes(migrations: Sequence[Migration]) -> tuple[Shape, ...]:
    """The ``tt_`` tables and columns after each prefix of ``migrations`` (SQLite SQL).

    Item ``k`` is the shape the first ``k`` migrations make (item 0 is empty). Computed once per
    list by replaying it on a private in-memory SQLite database, so the expected shape is never
    written down twice. PostgreSQL's migrations make the same tables and column names (a test
    holds them to it), so its store checks against the SQLite replay too.
    """
    key = tuple((name, tuple(statements)) for name, statements in migrations)
    cached = _SHAPES.get(key)
    if cached is not None:
        return cached
    shapes: list[Shape] = [{}]
    connection = sqlite3.connect(":memory:", isolation_level=None)
    try:
        for _name, statements in migrations:
            for statement in statements:
                connection.execute(statement)
            shapes.append(_sqlite_shape(connection))
    finally:
        connection.close()
    result = tuple(shapes)
    _SHAPES[key] = result
    return result


def _sqlite_shape(connection: sqlite3.Connection) -> Shape:
    tables = [
        str(row[0])
        for row in connection.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'tt\\_%' ESCAPE '\\'"
        )
    ]
    return {
        table: frozenset(
            str(row[0])
            for row in connection.execute("SELECT name FROM pragma_table_info(?)", (table,))
        )
        for table in tables
        if table != _LEDGER
    }


def shape_problem(found: Shape, expected: Shape, owned: frozenset[str]) -> str | None:
    """Why ``found`` (the database's ``tt_`` tables) is not what the recorded migrations made.

    Only the tables in ``owned`` (every table this store's migrations create) are compared:
    another store's tables, and tables of other programs, are not this store's business.
    """
    for table in sorted(owned):
        have = found.get(table)
        want = expected.get(table)
        if have is None and want is None:
            continue
        if want is None:
            return (
                f"table {table} exists but no trio-triggers migration that creates it is recorded"
                " (it belongs to another program or was made by hand)"
            )
        if have is None:
            return f"table {table} is missing although its migration is recorded"
        if have != want:
            parts = []
            if want - have:
                parts.append("missing columns " + ", ".join(sorted(want - have)))
            if have - want:
                parts.append("unexpected columns " + ", ".join(sorted(have - want)))
            return f"table {table} has another shape ({'; '.join(parts)})"
    return None


class Transactional(Protocol[C_co]):
    """A database that runs ``fn(connection)`` as one transaction (committed when it returns)."""

    def transaction(self, fn: Callable[[C_co], T], /) -> Awaitable[T]: ...


class MigrationDialect(Generic[C]):
    """What the runner needs to know of one database's SQL and driver."""

    __slots__ = ("columns", "errors", "execute", "first", "param", "tables")

    def __init__(
        self,
        *,
        execute: Callable[[C, str, tuple[object, ...]], Rows],
        param: str,
        errors: type[BaseException] | tuple[type[BaseException], ...],
        tables: str,
        columns: str,
        first: str | None = None,
    ) -> None:
        #: ``execute(connection, sql, params)``: run one statement, answer its rows (or none).
        self.execute = execute
        #: The placeholder (``?``, ``%s``).
        self.param = param
        #: The driver's errors (they become :class:`MigrationError`).
        self.errors = errors
        #: A statement run first in every migration transaction (a lock), if any.
        self.first = first
        #: A query answering the names of the ``tt_`` tables (``tt_migrations`` included).
        self.tables = tables
        #: A query answering the column names of the table given as its one parameter.
        self.columns = columns


def _refuse_unless_ours(
    done: set[str],
    found: Shape,
    known: Sequence[str],
    *,
    owns: Callable[[str], bool],
    expected: Sequence[Shape] | None,
    owned: frozenset[str],
) -> None:
    """Raise :class:`MigrationError` unless the database is this store's, at a known prefix."""
    unknown = sorted(name for name in done if owns(name) and name not in known)
    if unknown:
        raise MigrationError(
            "the database was written by a newer version (unknown migrations: "
            + ", ".join(unknown)
            + ")"
        )
    prefix = 0
    while prefix < len(known) and known[prefix] in done:
        prefix += 1
    if any(name in done for name in known[prefix:]):
        raise MigrationError(
            "the recorded migrations have a gap (recorded: "
            + ", ".join(name for name in known if name in done)
            + ")"
        )
    problem = None if expected is None else shape_problem(found, expected[prefix], owned)
    if problem is not None:
        raise MigrationError(problem)


async def apply_migrations(
    database: Transactional[C],
    migrations: Sequence[Migration],
    *,
    owns: Callable[[str], bool],
    dialect: MigrationDialect[C],
    shapes: Sequence[Shape] | None = None,
) -> list[str]:
    """Apply the ``migrations`` not yet recorded, in order; return the names applied.

    ``owns(name)`` tells which recorded names belong to the calling store; a recorded owned name
    that ``migrations`` does not list means a newer version wrote this database, and
    :class:`MigrationError` is raised before anything is applied. ``shapes``, when given, is
    what each prefix of the migrations makes (:func:`schema_shapes`); the database's tables must
    match the recorded prefix, or :class:`MigrationError` names the difference, again before
    anything is written (without ``shapes`` only the names are checked). Any
    failure to apply a migration also raises :class:`MigrationError` (chained to the driver
    error).
    """
    known = [name for name, _ in migrations]
    expected = shapes
    owned = frozenset(table for shape in expected or () for table in shape)
    execute = dialect.execute

    def begin(conn: C) -> None:
        if dialect.first is not None:
            execute(conn, dialect.first, ())

    def look(conn: C) -> tuple[set[str] | None, dict[str, frozenset[str]]]:
        # Reads only: a database that is refused below must be left exactly as it was.
        begin(conn)
        tables = {str(row[0]) for row in execute(conn, dialect.tables, ())}
        found = {
            table: frozenset(str(row[0]) for row in execute(conn, dialect.columns, (table,)))
            for table in tables & owned
        }
        if _LEDGER not in tables:
            return None, found
        names = {str(row[0]) for row in execute(conn, "SELECT name FROM tt_migrations", ())}
        return names, found

    try:
        recorded, found = await database.transaction(look)
    except dialect.errors as exc:
        raise MigrationError(f"could not read the migrations table: {exc}") from exc
    done = recorded if recorded is not None else set()
    _refuse_unless_ours(done, found, known, owns=owns, expected=expected, owned=owned)
    if recorded is None:

        def create(conn: C) -> None:
            begin(conn)
            execute(conn, _CREATE_TABLE, ())

        try:
            await database.transaction(create)
        except dialect.errors as exc:
            raise MigrationError(f"could not create the migrations table: {exc}") from exc
    select = f"SELECT 1 FROM tt_migrations WHERE name = {dialect.param}"
    insert = f"INSERT INTO tt_migrations (name) VALUES ({dialect.param})"
    applied: list[str] = []
    for name, statements in migrations:
        if name in done:
            continue

        def apply(conn: C, name: str = name, statements: Sequence[str] = statements) -> bool:
            begin(conn)
            if execute(conn, select, (name,)):  # another connection applied it meanwhile
                return False
            for statement in statements:
                execute(conn, statement, ())
            execute(conn, insert, (name,))
            return True

        try:
            if await database.transaction(apply):
                applied.append(name)
        except dialect.errors as exc:
            raise MigrationError(f"could not apply migration {name}") from exc
    return applied
