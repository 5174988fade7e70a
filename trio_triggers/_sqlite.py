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

Migrations are run by :mod:`trio_triggers._migrations` (the same runner as PostgreSQL's). Both
stores may share one database (and one connection): their migration names do not overlap.
"""

from __future__ import annotations

import logging
import sqlite3
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import trio

from ._executor import Executor, ExecutorResource, InlineExecutor
from ._migrations import Migration, MigrationDialect, Shape, apply_migrations, schema_shapes

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

__all__ = [
    "BUSY_WAIT_S",
    "SqliteDatabase",
    "is_busy_error",
]

T = TypeVar("T")

logger = logging.getLogger("trio_triggers.sqlite")

BUSY_WAIT_S = 30.0
"""Default bound on the total Trio time one call may spend waiting for a busy database."""

_FIRST_BACKOFF_S = 0.001
_MAX_BACKOFF_S = 0.05
# A wait longer than this is not our own processes taking turns (theirs last milliseconds) but
# a lock held by something else: it is logged, once when it starts and once when it ends.
_REPORT_WAIT_S = 1.0
# sqlite3 keeps this many prepared statements per connection (keyed by SQL text; the stores'
# SQL is constant text). Both stores together use a few dozen; the default is 128.
_CACHED_STATEMENTS = 256

Synchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]


def is_busy_error(exc: BaseException) -> bool:
    """Whether ``exc`` is SQLite's "database is locked/busy" (worth a retry)."""
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return (code & 0xFF) in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    text = str(exc).lower()
    return "locked" in text or "busy" in text


class SqliteDatabase(ExecutorResource):
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
        super().__init__(executor)
        self._path = path
        self._busy_wait = busy_wait
        self._lock = trio.Lock()
        # Exactly the inline executor (not a subclass or wrapper, whose ``run`` may differ).
        self._inline = type(executor) is InlineExecutor

    @property
    def path(self) -> str:
        return self._path

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
            # A file that is not SQLite's is refused before the driver sees it: SQLite takes an
            # existing file shorter than its header for an empty database and would write over
            # it (a longer one it refuses itself, but only once a page is read).
            _check_header(path)
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
            if _foreign(conn):
                # Another program's tables: the migration runner refuses them, and the file must
                # be left as it was (switching to WAL rewrites its header).
                return
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

    async def statement(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(connection)`` that issues exactly ONE statement, with no ``BEGIN``/``COMMIT``.

        SQLite runs a lone statement as a transaction of its own, so a single ``SELECT`` reads
        one consistent snapshot without the two extra round trips through the library (the
        run store's reads: a thousand runs a second each read their row several times).
        Busy retries as for :meth:`transaction`.
        """
        return await self._call(fn)

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
            reported = False
            while True:
                if failed:
                    await trio.sleep(backoff)
                    waited += backoff
                    backoff = min(backoff * 2, _MAX_BACKOFF_S)
                try:
                    result = await self._executor.run(fn, self._connection)
                except sqlite3.OperationalError as exc:
                    if not is_busy_error(exc):
                        raise
                    if waited >= self._busy_wait:
                        logger.error(
                            "SQLite database %s still locked after %.1f s: giving up (%s)",
                            self._path,
                            waited,
                            exc,
                        )
                        raise
                    if not reported and waited >= _REPORT_WAIT_S:
                        reported = True
                        logger.warning(
                            "SQLite database %s is locked by another connection (%s);"
                            " retrying for up to %.0f s more",
                            self._path,
                            exc,
                            self._busy_wait - waited,
                        )
                else:
                    if reported:
                        logger.warning(
                            "SQLite database %s is free again after %.1f s", self._path, waited
                        )
                    return result
                failed = True

    async def migrate(
        self,
        migrations: Sequence[Migration],
        *,
        owns: Callable[[str], bool],
        shapes: Sequence[Shape] | None = None,
    ) -> list[str]:
        """Apply the ``migrations`` not yet recorded, in order; return the names applied
        (:func:`trio_triggers._migrations.apply_migrations`). The tables found are checked
        against ``shapes``, by default the migrations' own replay."""
        expected = schema_shapes(migrations) if shapes is None else shapes
        return await apply_migrations(
            self, migrations, owns=owns, dialect=_MIGRATIONS, shapes=expected
        )


_TABLES = "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'tt\\_%' ESCAPE '\\'"


_HEADER = b"SQLite format 3\x00"


def _check_header(path: str) -> None:
    if path in ("", ":memory:"):
        return
    try:
        with open(path, "rb") as file:
            head = file.read(len(_HEADER))
    except FileNotFoundError:
        return  # a new database
    except IsADirectoryError:
        raise sqlite3.DatabaseError("unable to open database file: it is a directory") from None
    except OSError:
        return  # unreadable: the driver says why
    if head and head != _HEADER:
        raise sqlite3.DatabaseError("file is not a database (it has no SQLite header)")


def _foreign(conn: sqlite3.Connection) -> bool:
    """Whether the database has ``tt_`` tables but no ``tt_migrations`` (not ours)."""
    names = {str(row[0]) for row in conn.execute(_TABLES)}
    return bool(names) and "tt_migrations" not in names


def _execute(conn: sqlite3.Connection, sql: str, params: tuple[object, ...]) -> list[Any]:
    return conn.execute(sql, params).fetchall()


_MIGRATIONS: MigrationDialect[sqlite3.Connection] = MigrationDialect(
    execute=_execute,
    param="?",
    errors=sqlite3.Error,
    tables=_TABLES,
    columns="SELECT name FROM pragma_table_info(?)",
)
