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

from collections.abc import Awaitable, Callable, Sequence
from typing import Final, Generic, Protocol, TypeVar

__all__ = [
    "Migration",
    "MigrationDialect",
    "MigrationError",
    "apply_migrations",
    "owns_run_migration",
    "owns_trigger_migration",
]

T = TypeVar("T")
C = TypeVar("C")
C_co = TypeVar("C_co", covariant=True)

Migration = tuple[str, Sequence[str]]
"""A migration: its recorded name and the SQL statements it runs (in one transaction)."""

Rows = Sequence[Sequence[object]]

_CREATE_TABLE: Final = "CREATE TABLE IF NOT EXISTS tt_migrations (name TEXT PRIMARY KEY NOT NULL)"


class MigrationError(Exception):
    """A migration could not be applied, or the database was written by a newer version."""


def owns_trigger_migration(name: str) -> bool:
    """Whether a recorded name is the trigger store's (``NNNN_...``)."""
    return len(name) > 5 and name[:4].isdigit() and name[4] == "_"


def owns_run_migration(name: str) -> bool:
    """Whether a recorded name is the run store's (``runs_...``)."""
    return name.startswith("runs_")


class Transactional(Protocol[C_co]):
    """A database that runs ``fn(connection)`` as one transaction (committed when it returns)."""

    def transaction(self, fn: Callable[[C_co], T], /) -> Awaitable[T]: ...


class MigrationDialect(Generic[C]):
    """What the runner needs to know of one database's SQL and driver."""

    __slots__ = ("errors", "execute", "first", "param")

    def __init__(
        self,
        *,
        execute: Callable[[C, str, tuple[object, ...]], Rows],
        param: str,
        errors: type[BaseException] | tuple[type[BaseException], ...],
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


async def apply_migrations(
    database: Transactional[C],
    migrations: Sequence[Migration],
    *,
    owns: Callable[[str], bool],
    dialect: MigrationDialect[C],
) -> list[str]:
    """Apply the ``migrations`` not yet recorded, in order; return the names applied.

    ``owns(name)`` tells which recorded names belong to the calling store; a recorded owned name
    that ``migrations`` does not list means a newer version wrote this database, and
    :class:`MigrationError` is raised before anything is applied. Any failure to apply a
    migration also raises :class:`MigrationError` (chained to the driver error).
    """
    known = [name for name, _ in migrations]
    execute = dialect.execute

    def begin(conn: C) -> None:
        if dialect.first is not None:
            execute(conn, dialect.first, ())

    def recorded(conn: C) -> set[str]:
        begin(conn)
        execute(conn, _CREATE_TABLE, ())
        return {str(row[0]) for row in execute(conn, "SELECT name FROM tt_migrations", ())}

    try:
        done = await database.transaction(recorded)
    except dialect.errors as exc:
        raise MigrationError("could not read the migrations table") from exc
    unknown = sorted(name for name in done if owns(name) and name not in known)
    if unknown:
        raise MigrationError(
            "the database was written by a newer version (unknown migrations: "
            + ", ".join(unknown)
            + ")"
        )
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
