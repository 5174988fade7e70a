"""Fixtures of the ownership tests: a hand-set clock and one store per backend."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from trio_triggers._ownership import HEARTBEAT_STALE_AFTER_MS, RunStoreBase

from .backends import BACKENDS, ManualClock

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator
    from pathlib import Path


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(0)


@pytest.fixture(params=sorted(BACKENDS))
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
