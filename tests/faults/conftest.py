"""Fault experiments: every test here gets ``postgres_dsn`` on a fresh schema when it asks."""

from __future__ import annotations

from tests.pg_support import postgres_dsn

__all__ = ["postgres_dsn"]
