"""PostgreSQL stores for trio-triggers (extra ``trio-triggers[postgres]``).

Both stores use the same schema, rules and pure decision code as the SQLite stores; they differ
only in how they read a snapshot and apply writes. See ``docs/postgres.md``.
"""

from __future__ import annotations

from ._database import is_postgres_dsn

__all__ = ["is_postgres_dsn"]
