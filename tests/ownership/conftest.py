"""Fixtures of the ownership tests: a hand-set clock and one store per backend."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from trio_triggers import _instrument
from trio_triggers._ownership import HEARTBEAT_STALE_AFTER_MS, RunStoreBase

from .backends import BACKENDS, ManualClock


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
def recorder() -> Iterator[_instrument.Recorder]:
    installed = _instrument.install_recorder()
    yield installed
    _instrument.reset()
