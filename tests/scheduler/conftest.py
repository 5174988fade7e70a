"""Fixtures for the scheduler tests: every scenario runs on the memory and the SQLite store."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from trio_triggers import _instrument

from .harness import RecordingStore, ScriptedRunner, Sim

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

    from trio_triggers._store._protocol import TriggerStore


@pytest.fixture(params=["memory", "sqlite"])
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def sim() -> Sim:
    """Simulated wall time starting at 0 (tests request ``autojump_clock`` themselves)."""
    return Sim()


@pytest.fixture
async def inner_store(store_kind: str, sim: Sim) -> AsyncIterator[TriggerStore]:
    if store_kind == "memory":
        from trio_triggers._store import MemoryTriggerStore

        yield MemoryTriggerStore(clock=sim.clock)
    else:
        from trio_triggers._store import open_sqlite_trigger_store

        async with open_sqlite_trigger_store(":memory:", clock=sim.clock) as opened:
            yield opened


@pytest.fixture
def store(inner_store: TriggerStore) -> RecordingStore:
    return RecordingStore(inner_store)


@pytest.fixture
def runner() -> ScriptedRunner:
    return ScriptedRunner()


@pytest.fixture
def recorder() -> Iterator[_instrument.Recorder]:
    installed = _instrument.install_recorder()
    try:
        yield installed
    finally:
        _instrument.reset()
