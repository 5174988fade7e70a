"""The store backends the conformance suite runs against.

The conformance suite (``tests/store/test_conformance_*.py``) is the definition of "a trigger
store". Every test that takes the ``env`` fixture runs once per entry of :data:`BACKENDS`.

Adding a backend (for example PostgreSQL) happens in ONE place: append a :class:`Backend` to
:data:`BACKENDS` (or to the list returned by :func:`backends`), whose ``open(clock, tmp_path)``
is an async context manager yielding an :class:`Opened`:

* ``store``: the store under test, reading the given ``clock``;
* ``backdoor``: an implementation of :class:`Backdoor` (writes "by hand" outside the store API,
  fault injection and a full dump, as the contract's examples need);
* ``peer()``: an async context manager yielding a *second* store object on the same data (a
  second connection for SQL stores; the same object for the memory store), for the
  concurrency examples.

Mark a backend that needs external services with ``marks`` (for example
``pytest.mark.postgres``) so it is skipped where the service is absent.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import pytest

from tests.pg_support import postgres_marks
from tests.postgres.conformance import open_postgres_trigger_backend
from trio_triggers import ThreadExecutor, WallClock
from trio_triggers._store import MemoryTriggerStore, SqliteTriggerStore, TriggerStore
from trio_triggers._store._sqlite_store import open_sqlite_trigger_store

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable
    from pathlib import Path

__all__ = [
    "BACKENDS",
    "Backdoor",
    "Backend",
    "Dump",
    "ManualClock",
    "Opened",
    "normalize",
]


class ManualClock:
    """A settable wall clock: ``now_ms()`` answers ``value`` until a test changes it."""

    def __init__(self, value: int = 0) -> None:
        self.value = value

    def now_ms(self) -> int:
        return self.value

    def advance(self, ms: int) -> None:
        self.value += ms


Dump = dict[str, list[tuple[Any, ...]]]
"""Every row of the three tables, as plain tuples in a fixed order."""

_TRIGGER_COLUMNS = (
    "trigger_id, flow_id, input_json, cron, timezone, overlap, catch_up, max_catch_up, "
    "enabled, revision, last_fired_at_ms, pending_at_ms, active_run_id, active_claimed_at_ms, "
    "paused_at_ms, pause_note, paused_by, resume_after_ms, removed_at_ms, "
    "missed_overlap, missed_catch_up, missed_catch_up_bound, missed_paused, "
    "backfill_start_ms, backfill_end_ms, backfill_next_ms, backfill_total, backfill_done, "
    "backfill_bound, backfill_overlap, backfill_state, backfill_created_at_ms, backfill_by, "
    "jitter_ms, start_at_ms, end_at_ms, pause_after_failures, consecutive_failures"
)
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def normalize(value: Any) -> Any:
    """Replace the uuid attempt segment of reservation ids (the one random part of a store)."""
    if isinstance(value, str):
        return _UUID.sub("<uuid>", value)
    if isinstance(value, tuple):
        return tuple(normalize(v) for v in value)
    if isinstance(value, list):
        return [normalize(v) for v in value]
    if isinstance(value, dict):
        return {k: normalize(v) for k, v in value.items()}
    return value


class Backdoor(Protocol):
    """Direct access to a backend's rows, for the examples written "by hand"."""

    async def set_columns(self, trigger_id: str, **values: object) -> None:
        """``UPDATE tt_triggers SET <column> = <value>, ... WHERE trigger_id = ...``."""
        ...

    async def put_fire(
        self,
        trigger_id: str,
        occurrence: int,
        outcome: str | None,
        run_id: str | None = None,
        error: str | None = None,
    ) -> None:
        """Insert or replace one ledger row."""
        ...

    async def fail_pending_writes(self, on: bool) -> None:
        """While on, any write of a non-NULL ``pending_at_ms`` fails like a database error."""
        ...

    async def break_tables(self) -> None:
        """Make every statement fail from now on (the tables are gone)."""
        ...

    async def dump(self) -> Dump:
        """Every row of every table."""
        ...


@dataclass
class Opened:
    store: TriggerStore
    backdoor: Backdoor
    peer: Callable[[], contextlib.AbstractAsyncContextManager[TriggerStore]]


@dataclass
class Backend:
    name: str
    open: Callable[[WallClock, Path], contextlib.AbstractAsyncContextManager[Opened]]
    marks: list[pytest.MarkDecorator] = field(default_factory=list)
    sql: bool = False

    def param(self) -> Any:
        return pytest.param(self, id=self.name, marks=self.marks)


# --- memory ---------------------------------------------------------------------------------


class MemoryBackdoor:
    def __init__(self, store: MemoryTriggerStore) -> None:
        self._store = store
        self._fail_pending = False
        self._broken = False

    def _install(self) -> None:
        fail_pending, broken = self._fail_pending, self._broken

        def hook(operation: str, table: str, values: Any) -> None:
            if broken:
                raise RuntimeError(f"no such table: {table}")
            if (
                fail_pending
                and operation == "update"
                and table == "tt_triggers"
                and values.get("pending_at_ms") is not None
            ):
                raise RuntimeError("injected fault: pending_at_ms")

        self._store.fault_hook = hook if (fail_pending or broken) else None

    async def set_columns(self, trigger_id: str, **values: object) -> None:
        self._store._raw_tables().triggers[trigger_id].update(values)

    async def put_fire(
        self,
        trigger_id: str,
        occurrence: int,
        outcome: str | None,
        run_id: str | None = None,
        error: str | None = None,
    ) -> None:
        fires = self._store._raw_tables().fires.setdefault(trigger_id, {})
        fires[occurrence] = {"outcome": outcome, "run_id": run_id, "error": error}

    async def fail_pending_writes(self, on: bool) -> None:
        self._fail_pending = on
        self._install()

    async def break_tables(self) -> None:
        self._broken = True
        self._install()

    async def dump(self) -> Dump:
        tables = self._store._raw_tables()
        from trio_triggers._store._backend import TRIGGER_COLUMNS

        return {
            "tt_triggers": [
                tuple(tables.triggers[key].get(c) for c in TRIGGER_COLUMNS)
                for key in sorted(tables.triggers)
            ],
            "tt_trigger_fires": sorted(
                (tid, occ, row["outcome"], row["run_id"], row["error"])
                for tid, fires in tables.fires.items()
                for occ, row in fires.items()
            ),
            "tt_scheduler_heartbeats": sorted(tables.heartbeats.items()),
        }


@contextlib.asynccontextmanager
async def _open_memory(clock: WallClock, tmp_path: Path) -> AsyncIterator[Opened]:
    del tmp_path
    store = MemoryTriggerStore(clock=clock)

    @contextlib.asynccontextmanager
    async def peer() -> AsyncIterator[TriggerStore]:
        yield store

    yield Opened(store=store, backdoor=MemoryBackdoor(store), peer=peer)


# --- SQLite ---------------------------------------------------------------------------------


class SqliteBackdoor:
    def __init__(self, store: SqliteTriggerStore) -> None:
        self._db = store.database

    async def _execute(self, sql: str, params: tuple[object, ...] = ()) -> None:
        await self._db.transaction(lambda c: c.execute(sql, params))

    async def set_columns(self, trigger_id: str, **values: object) -> None:
        assignments = ", ".join(f"{name} = ?" for name in values)
        await self._execute(
            f"UPDATE tt_triggers SET {assignments} WHERE trigger_id = ?",
            (*values.values(), trigger_id),
        )

    async def put_fire(
        self,
        trigger_id: str,
        occurrence: int,
        outcome: str | None,
        run_id: str | None = None,
        error: str | None = None,
    ) -> None:
        await self._execute(
            "INSERT OR REPLACE INTO tt_trigger_fires "
            "(trigger_id, occurrence_at_ms, outcome, run_id, error) VALUES (?, ?, ?, ?, ?)",
            (trigger_id, occurrence, outcome, run_id, error),
        )

    async def fail_pending_writes(self, on: bool) -> None:
        if on:
            await self._execute(
                "CREATE TRIGGER tt_test_fail_pending BEFORE UPDATE OF pending_at_ms ON tt_triggers "
                "WHEN NEW.pending_at_ms IS NOT NULL "
                "BEGIN SELECT RAISE(ABORT, 'injected fault: pending_at_ms'); END"
            )
        else:
            await self._execute("DROP TRIGGER IF EXISTS tt_test_fail_pending")

    async def break_tables(self) -> None:
        def drop(c: Any) -> None:
            for name in ("tt_trigger_fires", "tt_triggers", "tt_scheduler_heartbeats"):
                c.execute(f"DROP TABLE {name}")

        await self._db.transaction(drop)

    async def dump(self) -> Dump:
        def read(c: Any) -> Dump:
            return {
                "tt_triggers": c.execute(
                    f"SELECT {_TRIGGER_COLUMNS} FROM tt_triggers ORDER BY trigger_id"
                ).fetchall(),
                "tt_trigger_fires": c.execute(
                    "SELECT trigger_id, occurrence_at_ms, outcome, run_id, error "
                    "FROM tt_trigger_fires ORDER BY trigger_id, occurrence_at_ms"
                ).fetchall(),
                "tt_scheduler_heartbeats": c.execute(
                    "SELECT host, ticked_at_ms FROM tt_scheduler_heartbeats ORDER BY host"
                ).fetchall(),
            }

        return await self._db.transaction(read, write=False)


def _sqlite_backend(threaded: bool) -> Callable[[WallClock, Path], Any]:
    @contextlib.asynccontextmanager
    async def open_(clock: WallClock, tmp_path: Path) -> AsyncIterator[Opened]:
        path = str(tmp_path / "triggers.sqlite")

        def executor() -> ThreadExecutor | None:
            return ThreadExecutor() if threaded else None

        async with open_sqlite_trigger_store(path, clock=clock, executor=executor()) as store:

            @contextlib.asynccontextmanager
            async def peer() -> AsyncIterator[TriggerStore]:
                async with open_sqlite_trigger_store(
                    path, clock=clock, executor=executor()
                ) as other:
                    yield other

            yield Opened(store=store, backdoor=SqliteBackdoor(store), peer=peer)

    return open_


BACKENDS: list[Backend] = [
    Backend("memory", _open_memory),
    Backend("sqlite-inline", _sqlite_backend(threaded=False), sql=True),
    Backend("sqlite-threaded", _sqlite_backend(threaded=True), sql=True),
    Backend("postgres", open_postgres_trigger_backend, marks=postgres_marks(), sql=True),
]
"""Every backend the conformance suite runs against (append new ones here)."""
