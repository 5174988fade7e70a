"""SQLite-specific behaviour: migrations, sharing a database, durability, contention,
several processes, determinism under MockClock (§9.3, §9.17 example 33)."""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from trio_triggers import ThreadExecutor, TrioWallClock
from trio_triggers._declarations import Trigger
from trio_triggers._migrations import MigrationError
from trio_triggers._sqlite import SqliteDatabase
from trio_triggers._store import (
    HistoryQuery,
    Result,
    SqliteTriggerStore,
    TriggerStore,
    open_sqlite_trigger_store,
)
from trio_triggers._store._memory import MemoryTriggerStore
from trio_triggers.testing import AutojumpGuardExecutor

from .backends import ManualClock, MemoryBackdoor, SqliteBackdoor, normalize
from .helpers import DAILY, LEASE, declaration, raises

NAMES = [
    "0001_triggers",
    "0002_reservation_lease",
    "0003_heartbeat",
    "0004_fire_run_index",
    "0005_attention",
    "0006_operator_state",
    "0007_missed_counts",
    "0008_backfills",
    "0009_manual_fires",
    "0010_trigger_failure_fields",
]


def _migrations(path: Path) -> list[str]:
    with sqlite3.connect(path) as connection:
        return [row[0] for row in connection.execute("SELECT name FROM tt_migrations ORDER BY 1")]


async def test_migrations_recorded_in_order_and_idempotent(tmp_path: Path) -> None:
    path = tmp_path / "t.sqlite"
    async with open_sqlite_trigger_store(str(path), clock=ManualClock()) as store:
        await store.register(declaration())
        assert await store.migrate() == []
    assert _migrations(path) == NAMES
    async with open_sqlite_trigger_store(str(path), clock=ManualClock()) as store:
        got = await store.get("daily")
        assert got is not None
        assert got.revision == 1
    assert _migrations(path) == NAMES
    with sqlite3.connect(path) as connection:
        mode = connection.execute("PRAGMA journal_mode").fetchone()
        index = connection.execute(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'tt_trigger_fires'"
            " AND name = 'tt_trigger_fires_run_id'"
        ).fetchall()
    assert mode == ("wal",)
    assert index == [("tt_trigger_fires_run_id",)]


async def test_partial_schema_fails_to_open(tmp_path: Path) -> None:
    path = tmp_path / "t.sqlite"
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE tt_triggers (trigger_id TEXT, active_claimed_at_ms INT)")
    reason = (
        "table tt_triggers exists but no trio-triggers migration that creates it is recorded"
        " (it belongs to another program or was made by hand)"
    )
    with raises("store", f"could not run trigger migrations: {reason}") as caught:
        async with open_sqlite_trigger_store(str(path), clock=ManualClock()):
            pass  # pragma: no cover
    assert caught.error is not None
    assert isinstance(caught.error.__cause__, MigrationError)


async def test_newer_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.sqlite"
    async with open_sqlite_trigger_store(str(path), clock=ManualClock()) as store:
        await store.register(declaration())
    with sqlite3.connect(path) as connection:
        connection.execute("INSERT INTO tt_migrations (name) VALUES ('0005_from_the_future')")
        connection.execute("INSERT INTO tt_migrations (name) VALUES ('runs_9999_not_ours')")
    reason = (
        "the database was written by a newer version (unknown migrations: 0005_from_the_future)"
    )
    with raises("store", f"could not run trigger migrations: {reason}") as caught:
        async with open_sqlite_trigger_store(str(path), clock=ManualClock()):
            pass  # pragma: no cover
    cause = caught.error.__cause__ if caught.error is not None else None
    assert isinstance(cause, MigrationError)
    assert "newer version" in str(cause)
    assert "0005_from_the_future" in str(cause)


async def test_unopenable_path_is_a_store_error(tmp_path: Path) -> None:
    with raises("store", "could not run trigger migrations"):
        async with open_sqlite_trigger_store(str(tmp_path / "missing" / "t.sqlite")):
            pass  # pragma: no cover


async def test_in_memory_database() -> None:
    async with open_sqlite_trigger_store(":memory:", clock=ManualClock()) as store:
        await store.register(declaration())
        claim = await store.claim_fire("daily", 1, expected_revision=1)
        assert claim.action == "fire"
        assert isinstance(store, TriggerStore)


async def test_store_on_a_shared_database(tmp_path: Path) -> None:
    database = await SqliteDatabase.open(str(tmp_path / "shared.sqlite"))
    try:
        await database.migrate(
            [("runs_0001", ["CREATE TABLE tt_runs (id TEXT PRIMARY KEY)"])],
            owns=lambda name: name.startswith("runs_"),
        )
        store = await SqliteTriggerStore.open(database, clock=ManualClock())
        await store.register(declaration())
        again = SqliteTriggerStore(database, clock=ManualClock())
        assert await again.migrate() == []
        assert (await again.get("daily")) is not None
        names = await database.transaction(
            lambda c: [r[0] for r in c.execute("SELECT name FROM tt_migrations ORDER BY 1")]
        )
        assert names == [*NAMES, "runs_0001"]
    finally:
        await database.aclose()
    assert database.closed


async def _scenario(store: TriggerStore, clock: Any) -> None:
    """A scripted sequence touching every table and every kind of write."""
    await store.register(declaration())
    await store.register(declaration(id="buffered", overlap="buffer-one"))
    await store.register(declaration(id="super", overlap="supersede", timezone="UTC"))
    for tid in ("daily", "buffered", "super"):
        claim = await store.claim_fire(tid, 1, expected_revision=1)
        await store.record_result(
            Result(
                trigger_id=tid,
                occurrence=1,
                outcome="launched",
                run_id=f"{tid}-run-1",
                reservation_id=claim.reservation_id,
            )
        )
        await store.claim_fire(tid, 2, expected_revision=1)
    await store.record_result(
        Result(trigger_id="daily", occurrence=1, outcome="failed", error="exit 1")
    )
    await store.heartbeat("host-a")
    await store.claim_fire("daily", 3, expected_revision=1)
    await store.set_pending("buffered", 5)


async def test_durability_across_reopen(tmp_path: Path) -> None:
    path = str(tmp_path / "durable.sqlite")
    clock = ManualClock(1_000)
    async with open_sqlite_trigger_store(path, clock=clock) as store:
        await _scenario(store, clock)
        before = (
            await store.list(),
            await store.history(),
            await store.last_heartbeat(),
            [await store.inspect(t) for t in ("daily", "buffered", "super")],
            await SqliteBackdoor(store).dump(),
        )
    async with open_sqlite_trigger_store(path, clock=clock) as store:
        after = (
            await store.list(),
            await store.history(),
            await store.last_heartbeat(),
            [await store.inspect(t) for t in ("daily", "buffered", "super")],
            await SqliteBackdoor(store).dump(),
        )
    assert repr(after) == repr(before)
    assert after[1] == before[1]
    assert after[3] == before[3]


async def test_memory_and_sqlite_agree_on_the_scenario(tmp_path: Path) -> None:
    clock = ManualClock(5)
    memory = MemoryTriggerStore(clock=clock)
    await _scenario(memory, clock)
    async with open_sqlite_trigger_store(str(tmp_path / "a.sqlite"), clock=clock) as sqlite:
        await _scenario(sqlite, clock)
        assert normalize(await SqliteBackdoor(sqlite).dump()) == normalize(
            await MemoryBackdoor(memory).dump()
        )
        assert normalize(repr(await sqlite.list())) == normalize(repr(await memory.list()))


async def test_two_store_objects_contend_without_lock_errors(tmp_path: Path) -> None:
    path = str(tmp_path / "contended.sqlite")
    triggers, occurrences = 4, 25
    clock = ManualClock(0)
    granted: list[tuple[str, int]] = []
    async with (
        open_sqlite_trigger_store(path, clock=clock, executor=ThreadExecutor()) as one,
        open_sqlite_trigger_store(path, clock=clock, executor=ThreadExecutor()) as two,
    ):
        for index in range(triggers):
            await one.register(declaration(id=f"t{index}", overlap="supersede"))

        async def claimer(store: TriggerStore) -> None:
            for occurrence in range(1, occurrences + 1):
                for index in range(triggers):
                    claim = await store.claim_fire(f"t{index}", occurrence, expected_revision=1)
                    if claim.reservation_id is not None:
                        granted.append((f"t{index}", occurrence))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(claimer, one)
            nursery.start_soon(claimer, two)
    expected = [(f"t{i}", o) for o in range(1, occurrences + 1) for i in range(triggers)]
    assert sorted(granted) == sorted(expected)


async def test_two_processes_claim_each_occurrence_once(tmp_path: Path) -> None:
    path = str(tmp_path / "processes.sqlite")
    triggers, occurrences = 3, 40
    async with open_sqlite_trigger_store(path) as store:
        for index in range(triggers):
            await store.register(declaration(id=f"t{index}", overlap="supersede"))
    script = str(Path(__file__).with_name("claimer.py"))
    outputs: list[bytes] = []

    async def run() -> None:
        done = await trio.run_process(
            [sys.executable, script, path, str(triggers), str(occurrences)],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr.decode()
        outputs.append(done.stdout)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        nursery.start_soon(run)
    lines = [json.loads(line) for out in outputs for line in out.splitlines()]
    assert all(line[0] != "error" for line in lines), lines
    keys = sorted((line[0], line[1]) for line in lines)
    assert keys == sorted((f"t{i}", o) for i in range(triggers) for o in range(1, occurrences + 1))
    assert len({line[3] for line in lines}) == len(lines)  # every reservation is unique


async def _timed_scenario(store: TriggerStore) -> list[Any]:
    answers: list[Any] = []
    await store.register(Trigger.make({**DAILY, "overlap": "buffer-one"}))
    await store.register(Trigger.make({**DAILY, "id": "super", "overlap": "supersede"}))
    for occurrence in range(1, 6):
        for tid in ("daily", "super"):
            answers.append(await store.claim_fire(tid, occurrence, expected_revision=1))
            await trio.sleep(61)
        if occurrence % 2 == 0:
            answers.append(await store.active_run("daily"))
            answers.append(await store.claim_pending("daily", expected_revision=1))
        await store.heartbeat("host")
    await trio.sleep(LEASE / 1000)
    answers.append(await store.active_run("daily"))
    answers.append(await store.active_run("super"))
    answers.append(await store.history(HistoryQuery(limit=50)))
    answers.append(await store.last_heartbeat())
    answers.append(await store.list())
    return answers


@pytest.mark.parametrize("threaded", [False, True], ids=["inline", "threaded-guarded"])
async def test_determinism_under_autojump(
    autojump_clock: trio.testing.MockClock, tmp_path: Path, threaded: bool
) -> None:
    runs: list[Any] = []
    for attempt in range(2):
        executor = AutojumpGuardExecutor(ThreadExecutor(), autojump_clock) if threaded else None
        path = str(tmp_path / f"run{attempt}.sqlite")
        clock = TrioWallClock(1_700_000_000_000)
        async with open_sqlite_trigger_store(path, clock=clock, executor=executor) as store:
            answers = await _timed_scenario(store)
            dump = await SqliteBackdoor(store).dump()
        runs.append(normalize((repr(answers), dump)))
    assert runs[0] == runs[1]
    assert "1700000" in runs[0][0]  # the wall clock really was simulated


async def test_open_waits_for_another_connections_exclusive_lock(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    # Opening meets SQLITE_BUSY in its connect-time pragmas while another connection holds an
    # exclusive lock; the open retries in Trio time instead of failing.
    path = tmp_path / "t.sqlite"
    blocker = sqlite3.connect(path, isolation_level=None, timeout=0)
    blocker.execute("CREATE TABLE other (x INTEGER)")
    blocker.execute("BEGIN EXCLUSIVE")
    blocker.execute("INSERT INTO other (x) VALUES (1)")
    registered: list[int] = []

    async def use() -> None:
        async with open_sqlite_trigger_store(str(path), clock=ManualClock()) as store:
            registered.append((await store.register(declaration())).revision)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(use)
        await trio.sleep(3)
        assert registered == []
        blocker.execute("COMMIT")
    blocker.close()
    assert registered == [1]
    assert _migrations(path) == NAMES


async def test_open_busy_beyond_busy_wait_is_a_store_error(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    path = tmp_path / "t.sqlite"
    blocker = sqlite3.connect(path, isolation_level=None, timeout=0)
    blocker.execute("CREATE TABLE other (x INTEGER)")
    blocker.execute("BEGIN EXCLUSIVE")
    blocker.execute("INSERT INTO other (x) VALUES (1)")
    with raises("store", "could not run trigger migrations") as caught:
        async with open_sqlite_trigger_store(str(path), clock=ManualClock(), busy_wait=0.5):
            pass  # pragma: no cover
    assert caught.error is not None
    assert isinstance(caught.error.__cause__, sqlite3.OperationalError)
    blocker.execute("ROLLBACK")
    blocker.close()
