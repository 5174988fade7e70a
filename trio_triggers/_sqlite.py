"""Shared SQLite plumbing for the trigger store and the run store.

One :class:`SqliteDatabase` wraps one ``sqlite3`` connection (the store's single writer) and runs
every store method as one transaction on it:

* the work goes through the executor seam (inline on the Trio thread by default, or a worker
  thread). Calls are serialised: with a thread executor behind a :class:`trio.Lock`; with the
  inline executor a transaction runs synchronously after one checkpoint, so nothing can
  interleave with it and the lock is taken only while a call waits out a busy database;
* write transactions begin with ``BEGIN IMMEDIATE`` so the write lock is taken before any read,
  which makes the read-decide-write of a claim atomic against other connections and processes;
* ``busy_timeout`` is 0: SQLite never sleeps inside the driver. A busy database is retried with
  ``trio.sleep`` back-off (so lock waits are Trio waits that ``MockClock`` sees and cancel scopes
  can interrupt), up to ``busy_wait`` seconds in all (opening too: the connection's pragmas can
  meet a busy database while another connection holds an exclusive lock); after that the original
  ``sqlite3.OperationalError`` propagates and the store reports it as its own failure;
* the journal is WAL with ``synchronous=NORMAL`` by default: a process crash loses nothing that
  was committed; an operating-system crash or power loss may lose the last few committed
  transactions (never corrupting the file). ``synchronous="FULL"`` makes every commit durable
  against power loss at the cost of one more fsync per transaction.

Migrations are ``(name, statements)`` pairs recorded in ``tt_migrations(name TEXT PRIMARY KEY NOT
NULL)``; each is applied once, in its own transaction together with the row recording it. Both
stores may share one database (and one connection): their migration names do not overlap, and
each store recognises its own names through the ``owns`` predicate so a database written by a
newer version (an owned name this version does not know) is refused.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import Literal, TypeVar

import trio

from ._executor import Executor, InlineExecutor

__all__ = [
    "BUSY_WAIT_S",
    "Migration",
    "MigrationError",
    "SqliteDatabase",
    "is_busy_error",
]

T = TypeVar("T")

BUSY_WAIT_S = 30.0
"""Default bound on the total Trio time one call may spend waiting for a busy database."""

_FIRST_BACKOFF_S = 0.001
_MAX_BACKOFF_S = 0.05
# sqlite3 keeps this many prepared statements per connection (keyed by SQL text; the stores'
# SQL is constant text). Both stores together use a few dozen; the default is 128.
_CACHED_STATEMENTS = 256

Migration = tuple[str, Sequence[str]]
"""A migration: its recorded name and the SQL statements it runs (in one transaction)."""

Synchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]


class MigrationError(Exception):
    """A migration could not be applied, or the database was written by a newer version."""


def is_busy_error(exc: BaseException) -> bool:
    """Whether ``exc`` is SQLite's "database is locked/busy" (worth a retry)."""
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return (code & 0xFF) in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    text = str(exc).lower()
    return "locked" in text or "busy" in text


class SqliteDatabase:
    """One SQLite connection used as a store's single writer.

    Create it with :meth:`open` (inside ``trio.run``) and close it with :meth:`aclose`.
    """

    def __init__(
        self,
        connection: sqlite3.Connection,
        *,
        path: str,
        executor: Executor,
        busy_wait: float = BUSY_WAIT_S,
    ) -> None:
        self._connection = connection
        self._path = path
        self._executor = executor
        self._busy_wait = busy_wait
        self._lock = trio.Lock()
        self._closed = False
        # Exactly the inline executor (not a subclass or wrapper, whose ``run`` may differ).
        self._inline = type(executor) is InlineExecutor

    @property
    def path(self) -> str:
        return self._path

    @property
    def executor(self) -> Executor:
        return self._executor

    @property
    def closed(self) -> bool:
        return self._closed

    @classmethod
    async def open(
        cls,
        path: str,
        *,
        executor: Executor | None = None,
        synchronous: Synchronous = "NORMAL",
        busy_wait: float = BUSY_WAIT_S,
    ) -> SqliteDatabase:
        """Open (creating if needed) the database file at ``path`` (``":memory:"`` allowed)."""
        chosen: Executor = executor if executor is not None else InlineExecutor()

        def connect() -> sqlite3.Connection:
            # Opening touches no page; the pragmas below do, so they go through the retry.
            return sqlite3.connect(
                path,
                isolation_level=None,
                check_same_thread=False,
                timeout=0,
                cached_statements=_CACHED_STATEMENTS,
            )

        def configure(conn: sqlite3.Connection) -> None:
            # Each pragma is idempotent, so a busy attempt simply runs them all again. Setting
            # ``synchronous`` loads the schema and switching to WAL takes a lock: both meet
            # SQLITE_BUSY while another connection holds an exclusive lock (a writer in
            # rollback-journal mode, WAL recovery, or the last connection's checkpoint).
            conn.execute("PRAGMA busy_timeout = 0")
            conn.execute("PRAGMA foreign_keys = ON")
            conn.execute(f"PRAGMA synchronous = {synchronous}")
            conn.execute("PRAGMA journal_mode = WAL").fetchone()

        connection = await chosen.run(connect)
        database = cls(connection, path=path, executor=chosen, busy_wait=busy_wait)
        try:
            await database._call(configure)
        except BaseException:
            with trio.CancelScope(shield=True):
                await chosen.run(connection.close)
            raise
        return database

    async def aclose(self) -> None:
        if self._closed:
            return
        async with self._lock:
            if self._closed:
                return
            self._closed = True
            with trio.CancelScope(shield=True):
                await self._executor.run(self._connection.close)

    async def transaction(
        self,
        fn: Callable[[sqlite3.Connection], T],
        *,
        write: bool = True,
        checkpoint: bool = True,
    ) -> T:
        """Run ``fn(connection)`` inside one transaction and return its result.

        ``write=True`` begins with ``BEGIN IMMEDIATE``; ``write=False`` with a deferred
        ``BEGIN`` (a consistent read snapshot that never blocks writers under WAL). If ``fn``
        raises, the transaction is rolled back and the exception propagates. A busy database is
        retried (``fn`` runs again from the start on a fresh transaction).

        ``checkpoint=False`` is for a caller that has just passed a checkpoint of its own (the
        store's group commit): with the inline executor the transaction then runs at once.
        """
        begin = "BEGIN IMMEDIATE" if write else "BEGIN"

        def run(conn: sqlite3.Connection) -> T:
            conn.execute(begin)
            try:
                result = fn(conn)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            return result

        return await self._call(run, checkpoint=checkpoint)

    async def _call(self, fn: Callable[[sqlite3.Connection], T], *, checkpoint: bool = True) -> T:
        if self._closed:
            raise sqlite3.ProgrammingError("Cannot operate on a closed database.")
        if self._inline and not self._lock.locked():
            # Fast path. The inline executor runs ``fn`` synchronously on the Trio thread, so
            # once the checkpoint (the call's cancellation point and its yield to other tasks)
            # has passed, no other task can run until ``fn`` returns: the whole transaction is
            # atomic with respect to this process's tasks without taking the lock. The lock is
            # only needed when a call must wait (a busy database): then it keeps the callers
            # in order, and a caller arriving meanwhile queues behind it (``locked()``).
            if checkpoint:
                await trio.lowlevel.checkpoint()
                if self._closed:
                    raise sqlite3.ProgrammingError("Cannot operate on a closed database.")
            if not self._lock.locked():
                try:
                    return fn(self._connection)
                except sqlite3.OperationalError as exc:
                    # ``fn`` has rolled back (``transaction``) or opened none (``open``).
                    if not is_busy_error(exc) or self._busy_wait <= 0:
                        raise
                return await self._retry(fn, failed=True)
        return await self._retry(fn, failed=False)

    async def _retry(self, fn: Callable[[sqlite3.Connection], T], *, failed: bool) -> T:
        """Run ``fn`` under the lock, retrying a busy database with Trio-time back-off.

        ``failed`` says the caller's first attempt already met a busy database (so the first
        thing to do is to back off).
        """
        async with self._lock:
            if self._closed:
                raise sqlite3.ProgrammingError("Cannot operate on a closed database.")
            waited = 0.0
            backoff = _FIRST_BACKOFF_S
            while True:
                if failed:
                    await trio.sleep(backoff)
                    waited += backoff
                    backoff = min(backoff * 2, _MAX_BACKOFF_S)
                try:
                    return await self._executor.run(fn, self._connection)
                except sqlite3.OperationalError as exc:
                    if not is_busy_error(exc) or waited >= self._busy_wait:
                        raise
                failed = True

    async def migrate(
        self, migrations: Sequence[Migration], *, owns: Callable[[str], bool]
    ) -> list[str]:
        """Apply the ``migrations`` not yet recorded, in order; return the names applied.

        ``owns(name)`` tells which recorded names belong to the calling store; a recorded owned
        name that ``migrations`` does not list means a newer version wrote this database, and
        :class:`MigrationError` is raised before anything is applied. Any failure to apply a
        migration also raises :class:`MigrationError` (chained to the driver error).
        """
        known = [name for name, _ in migrations]

        def recorded(conn: sqlite3.Connection) -> set[str]:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS tt_migrations (name TEXT PRIMARY KEY NOT NULL)"
            )
            return {str(row[0]) for row in conn.execute("SELECT name FROM tt_migrations")}

        try:
            done = await self.transaction(recorded)
        except sqlite3.Error as exc:
            raise MigrationError("could not read the migrations table") from exc
        unknown = sorted(name for name in done if owns(name) and name not in known)
        if unknown:
            raise MigrationError(
                "the database was written by a newer version (unknown migrations: "
                + ", ".join(unknown)
                + ")"
            )
        applied: list[str] = []
        for name, statements in migrations:
            if name in done:
                continue

            def apply(
                conn: sqlite3.Connection, name: str = name, statements: Sequence[str] = statements
            ) -> bool:
                row = conn.execute("SELECT 1 FROM tt_migrations WHERE name = ?", (name,)).fetchone()
                if row is not None:  # another connection applied it meanwhile
                    return False
                for statement in statements:
                    conn.execute(statement)
                conn.execute("INSERT INTO tt_migrations (name) VALUES (?)", (name,))
                return True

            try:
                if await self.transaction(apply):
                    applied.append(name)
            except sqlite3.Error as exc:
                raise MigrationError(f"could not apply migration {name}") from exc
        return applied
