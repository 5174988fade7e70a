"""Fixtures of the ownership tests: a hand-set clock and one store per backend."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from tests.pg_support import postgres_marks
from trio_triggers._ownership import HEARTBEAT_STALE_AFTER_MS, RunStoreBase

from .backends import BACKENDS, ManualClock

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator
    from pathlib import Path


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(0)


def _backend_params() -> list[Any]:
    """One param per backend; PostgreSQL's carries the skip with its reason (decided at
    collection: a skip raised inside the async fixture reached pytest as a bare "Skipped")."""
    return [
        pytest.param(name, marks=postgres_marks() if name == "postgres" else ())
        for name in sorted(BACKENDS)
    ]


@pytest.fixture(params=_backend_params())
async def store(
    request: pytest.FixtureRequest, clock: ManualClock, tmp_path: Path
) -> AsyncIterator[RunStoreBase]:
    async with BACKENDS[request.param](clock, tmp_path, HEARTBEAT_STALE_AFTER_MS) as opened:
        yield opened


@pytest.fixture
def recorder() -> Iterator[Any]:
    """The metrics hook's in-memory recorder (skips if the hook module is not present)."""
    instrument = pytest.importorskip("trio_triggers._instrument")
    installed = instrument.install_recorder()
    yield installed
    instrument.reset()
