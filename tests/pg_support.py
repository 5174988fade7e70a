"""PostgreSQL for the tests: where the server is, and a fresh schema per test.

* ``TT_POSTGRES_DSN`` names the server (CI: ``postgresql://tt:tt@127.0.0.1:5432/tt_test``).
* ``TT_REQUIRE_POSTGRES=1`` (set by ``.ci/run``) turns "no server" into a test **failure**:
  a CI machine whose PostgreSQL did not come up must not pass by skipping every PostgreSQL test.
* Without it, a developer without a server sees the PostgreSQL tests skipped with the reason.

Each test gets its own schema (``tt_t_<hex>``) and a DSN whose ``options`` set the
``search_path`` to it, so every store opened on that DSN sees only that test's tables (and the
migration advisory lock is per schema). The schema is dropped after the test. Creating a schema is
a few milliseconds, much cheaper than a database.

Use the ``postgres_dsn`` fixture (import it into a test module or conftest), or
:func:`fresh_schema` directly where a fixture does not fit (conformance backend lists).
"""

from __future__ import annotations

import contextlib
import functools
import os
import urllib.parse
import uuid
from typing import TYPE_CHECKING

import psycopg
import psycopg.conninfo
import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator

    from psycopg.rows import TupleRow

ENV_DSN = "TT_POSTGRES_DSN"
ENV_REQUIRE = "TT_REQUIRE_POSTGRES"

__all__ = [
    "ENV_DSN",
    "ENV_REQUIRE",
    "admin_connection",
    "fresh_schema",
    "postgres_dsn",
    "postgres_marks",
    "require_postgres",
    "server_dsn",
    "skip_reason",
]


def postgres_required() -> bool:
    return os.environ.get(ENV_REQUIRE, "").strip() not in ("", "0", "false", "no")


@functools.cache
def _probe(dsn: str) -> str | None:
    """``None`` when the server answers, else why not (cached: one probe per process)."""
    try:
        with psycopg.connect(dsn, connect_timeout=3, autocommit=True) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return f"{type(exc).__name__}: {str(exc).strip() or 'no detail'}"
    return None


def server_dsn() -> str:
    """The server's DSN, or skip (fail under ``TT_REQUIRE_POSTGRES=1``) with the reason."""
    dsn = os.environ.get(ENV_DSN, "").strip()
    if not dsn:
        reason = f"{ENV_DSN} is not set (no PostgreSQL server to test against)"
    else:
        problem = _probe(dsn)
        if problem is None:
            return dsn
        reason = f"PostgreSQL at {_redact(dsn)} is not reachable: {problem}"
    if postgres_required():
        pytest.fail(f"{ENV_REQUIRE}=1 but {reason}", pytrace=False)
    pytest.skip(reason)


def skip_reason() -> str | None:
    """Why PostgreSQL tests would be skipped here, or ``None`` (run them, or fail if required)."""
    if postgres_required():
        return None
    dsn = os.environ.get(ENV_DSN, "").strip()
    if not dsn:
        return f"{ENV_DSN} is not set (no PostgreSQL server to test against)"
    problem = _probe(dsn)
    return None if problem is None else f"PostgreSQL at {_redact(dsn)} is not reachable: {problem}"


def postgres_marks() -> list[pytest.MarkDecorator]:
    """Marks for a parametrized PostgreSQL backend: ``postgres``, plus a ``skipif`` with the
    reason (decided at collection, so the reason shows even where the skip would otherwise be
    raised inside Trio, which pytest-trio reports without its message)."""
    reason = skip_reason()
    return [pytest.mark.postgres, pytest.mark.skipif(reason is not None, reason=reason or "")]


def require_postgres() -> None:
    """Skip or fail now unless a server is reachable (for tests that open DSNs themselves)."""
    server_dsn()


def _redact(dsn: str) -> str:
    try:
        params = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.Error:
        return "<malformed DSN>"
    if "password" in params:
        params["password"] = "***"
    return psycopg.conninfo.make_conninfo("", **params)


@contextlib.contextmanager
def admin_connection(dsn: str | None = None) -> Iterator[psycopg.Connection[TupleRow]]:
    """An autocommit connection to the server (for setup, inspection and sabotage)."""
    with psycopg.connect(dsn or server_dsn(), autocommit=True) as conn:
        yield conn


def with_search_path(dsn: str, schema: str) -> str:
    """``dsn`` with its sessions in ``schema``, and commits that do not wait for the WAL flush:
    a test never survives a server crash anyway, and a flush per commit (DDL included) is most
    of what a test costs. Durability itself is PostgreSQL's, not ours to test.

    A ``postgresql://`` URI stays a URI (``--db`` and ``is_postgres_dsn`` recognise only URIs).
    """
    extra = f"-c search_path={schema} -c synchronous_commit=off"
    if dsn.startswith(("postgresql://", "postgres://")):
        parts = urllib.parse.urlsplit(dsn)
        query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
        options = " ".join([*(v for k, v in query if k == "options"), extra])
        query = [(k, v) for k, v in query if k != "options"] + [("options", options)]
        encoded = urllib.parse.urlencode(query, quote_via=urllib.parse.quote)
        return urllib.parse.urlunsplit(parts._replace(query=encoded))
    params = psycopg.conninfo.conninfo_to_dict(dsn)
    options = f"{params.get('options') or ''} {extra}".strip()
    return psycopg.conninfo.make_conninfo(dsn, options=options)


_ADMIN: dict[str, psycopg.Connection[TupleRow]] = {}


def _shared_admin(base: str) -> psycopg.Connection[TupleRow]:
    """One autocommit connection per process and server for creating and dropping schemas (a
    connection costs more than the DDL)."""
    conn = _ADMIN.get(base)
    if conn is None or conn.closed:
        conn = psycopg.connect(base, autocommit=True, options="-c synchronous_commit=off")
        _ADMIN[base] = conn
    return conn


def _admin_execute(base: str, sql: bytes) -> None:
    try:
        _shared_admin(base).execute(sql)
    except psycopg.OperationalError:  # the shared connection broke: once more on a fresh one
        _ADMIN.pop(base).close()
        _shared_admin(base).execute(sql)


@contextlib.contextmanager
def fresh_schema() -> Iterator[str]:
    """Create an empty schema, yield a DSN that uses it, drop it afterwards."""
    base = server_dsn()
    schema = f"tt_t_{uuid.uuid4().hex[:16]}"
    _admin_execute(base, f'CREATE SCHEMA "{schema}"'.encode())
    try:
        yield with_search_path(base, schema)
    finally:
        # Bounded, so a session a test leaked cannot hang the suite on the schema's locks.
        _admin_execute(base, b"SET lock_timeout = '10s'")
        _admin_execute(base, f'DROP SCHEMA "{schema}" CASCADE'.encode())


@pytest.fixture
def postgres_dsn() -> Iterator[str]:
    """A DSN on a fresh, empty schema of the test server."""
    with fresh_schema() as dsn:
        yield dsn
