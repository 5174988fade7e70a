"""The run-store backends the conformance suite runs against, in ONE place.

``BACKENDS`` maps a backend name to a factory ``(clock, tmp_path, stale_after_ms) -> async
context manager yielding a store``. The ``store`` fixture in ``conftest.py`` is parametrized over
``BACKENDS``, so adding a backend here (for example ``"postgres"``, whose factory skips the test
when no server is configured) runs the whole conformance suite against it. Nothing else has to
change.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

from tests.postgres.conformance import postgres_run_backend
from trio_triggers import ThreadExecutor, WallClock
from trio_triggers._ownership import MemoryRunStore, RunStoreBase, open_sqlite_run_store


class ManualClock:
    """A wall clock the test sets by hand (no Trio time, so thread-backed stores stay exact)."""

    def __init__(self, now_ms: int = 0) -> None:
        self.now = now_ms

    def now_ms(self) -> int:
        return self.now

    def set(self, now_ms: int) -> None:
        self.now = now_ms


BackendFactory = Callable[[WallClock, Path, int], AbstractAsyncContextManager[RunStoreBase]]


@asynccontextmanager
async def memory_backend(
    clock: WallClock, tmp_path: Path, stale_after_ms: int
) -> AsyncIterator[RunStoreBase]:
    yield MemoryRunStore(clock=clock, stale_after_ms=stale_after_ms)


@asynccontextmanager
async def sqlite_inline_backend(
    clock: WallClock, tmp_path: Path, stale_after_ms: int
) -> AsyncIterator[RunStoreBase]:
    path = str(tmp_path / "runs-inline.sqlite")
    async with open_sqlite_run_store(path, clock=clock, stale_after_ms=stale_after_ms) as store:
        yield store


@asynccontextmanager
async def sqlite_threaded_backend(
    clock: WallClock, tmp_path: Path, stale_after_ms: int
) -> AsyncIterator[RunStoreBase]:
    path = str(tmp_path / "runs-threaded.sqlite")
    async with open_sqlite_run_store(
        path, clock=clock, executor=ThreadExecutor(2), stale_after_ms=stale_after_ms
    ) as store:
        yield store


BACKENDS: dict[str, BackendFactory] = {
    "memory": memory_backend,
    "sqlite-inline": sqlite_inline_backend,
    "sqlite-threaded": sqlite_threaded_backend,
    "postgres": postgres_run_backend,  # skips without TT_POSTGRES_DSN (fails if required)
}
