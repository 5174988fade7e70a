"""Fixtures of the trigger-store conformance suite (backends are listed in ``backends.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from .backends import BACKENDS, Backend, ManualClock
from .helpers import Env

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path


@pytest.fixture(params=[backend.param() for backend in BACKENDS])
def backend(request: pytest.FixtureRequest) -> Backend:
    chosen: Backend = request.param
    return chosen


# A skip raised inside an async test or fixture loses its reason under pytest-trio (and
# tests/conftest.py fails a skip without one), so the backend-dependent skips are sync fixtures.
@pytest.fixture
def sql_only(backend: Backend) -> None:
    """Skip a test about SQL schemas (migrations, CHECK constraints) on the memory store."""
    if not backend.sql:
        pytest.skip("about a SQL schema: the memory store has none")


@pytest.fixture
def memory_only(backend: Backend) -> None:
    """Skip a test of rows a SQL schema's CHECK constraints never admit."""
    if backend.sql:
        pytest.skip("the schema's CHECK constraints keep such rows out of SQL stores")


@pytest.fixture
async def env(backend: Backend, tmp_path: Path) -> AsyncIterator[Env]:
    clock = ManualClock(0)
    async with backend.open(clock, tmp_path) as opened:
        yield Env(backend=backend, clock=clock, opened=opened)
