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


@pytest.fixture
async def env(backend: Backend, tmp_path: Path) -> AsyncIterator[Env]:
    clock = ManualClock(0)
    async with backend.open(clock, tmp_path) as opened:
        yield Env(backend=backend, clock=clock, opened=opened)
