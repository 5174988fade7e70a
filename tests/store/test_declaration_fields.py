"""Validation of the per-trigger fields, and databases from before them (migration
``0010_trigger_failure_fields``): docs/declarations.md, "Jitter, windows and pausing after
failures"."""

from __future__ import annotations

import datetime
import sqlite3
from typing import TYPE_CHECKING, Any

import pytest

from tests.pg_support import admin_connection, fresh_schema, postgres_marks
from trio_triggers import TriggerError
from trio_triggers._declarations import Trigger
from trio_triggers._store import MemoryTriggerStore, open_sqlite_trigger_store
from trio_triggers._store._decision import PauseIfRunning, SetFailures, plan_failures
from trio_triggers._store._models import Result
from trio_triggers._store._sqlite_store import TRIGGER_MIGRATIONS

from .backends import ManualClock

if TYPE_CHECKING:
    from pathlib import Path

BASE: dict[str, Any] = {"id": "t", "flow_id": "f", "input": {}, "cron": "* * * * *"}
JAN_1 = 1_767_225_600_000  # 2026-01-01T00:00:00Z

BAD: list[tuple[str, object, str]] = [
    ("jitter", -0.001, "from 0 to 86400"),
    ("jitter", 86_400.5, "from 0 to 86400"),
    ("jitter", float("nan"), "from 0 to 86400"),
    ("jitter", True, "a number of seconds"),
    ("jitter", "10", "a number of seconds"),
    ("start_at", "2026-01-01T00:00:00", "with an offset"),  # a local time: which instant?
    ("start_at", datetime.datetime(2026, 1, 1), "with an offset"),
    ("start_at", "next tuesday", "with an offset"),
    ("start_at", 1.5, "with an offset"),
    ("end_at", True, "with an offset"),
    ("pause_after_failures", 0, "from 1 to 1000"),
    ("pause_after_failures", 1001, "from 1 to 1000"),
    ("pause_after_failures", True, "from 1 to 1000"),
    ("pause_after_failures", 2.0, "from 1 to 1000"),
]


@pytest.mark.parametrize(("field", "value", "detail"), BAD)
def test_each_bad_value_is_refused_at_its_field(field: str, value: object, detail: str) -> None:
    with pytest.raises(TriggerError) as info:
        Trigger.make({**BASE, field: value})
    assert (info.value.code, info.value.path) == ("invalid_trigger", field)
    assert detail in info.value.message
    assert repr(value) not in info.value.message or isinstance(value, bool | int)


def test_an_end_before_the_start_is_refused_at_end_at() -> None:
    with pytest.raises(TriggerError) as info:
        Trigger.make({**BASE, "start_at": JAN_1 + 1, "end_at": JAN_1})
    assert (info.value.code, info.value.path) == ("invalid_trigger", "end_at")
    # Equal ends are a window of one instant (both ends are included).
    assert Trigger.make({**BASE, "start_at": JAN_1, "end_at": JAN_1}).end_at == JAN_1


def test_instants_are_read_from_text_datetimes_and_epoch_ms() -> None:
    berlin = datetime.timezone(datetime.timedelta(hours=1))
    for given in (
        "2026-01-01T00:00:00Z",
        "2026-01-01T01:00:00+01:00",
        datetime.datetime(2026, 1, 1, 1, tzinfo=berlin),
        JAN_1,
    ):
        assert Trigger.make({**BASE, "start_at": given}).start_at == JAN_1
    made = Trigger.make({**BASE, "jitter": datetime.timedelta(milliseconds=1500)})
    assert (made.jitter, made.jitter_ms) == (1.5, 1500)
    # Defaults: no jitter, no window, never paused for failures.
    plain = Trigger.make(BASE)
    assert (plain.jitter, plain.start_at, plain.end_at, plain.pause_after_failures) == (
        0,
        None,
        None,
        None,
    )
    # A declaration round-trips through make (a stored trigger re-validated).
    full = Trigger.make(
        {**BASE, "jitter": 2.5, "start_at": JAN_1, "end_at": JAN_1 + 1, "pause_after_failures": 4}
    )
    assert Trigger.make(full) == full


async def test_register_refuses_a_bad_field_and_writes_nothing() -> None:
    store = MemoryTriggerStore(clock=ManualClock(JAN_1))
    bad = Trigger(id="t", flow_id="f", input={}, cron="* * * * *", pause_after_failures=0)
    with pytest.raises(TriggerError) as info:
        await store.register(bad)
    assert (info.value.code, info.value.path) == ("invalid_trigger", "pause_after_failures")
    assert await store.list() == []
    good = await store.register(Trigger.make({**BASE, "jitter": 3}))
    with pytest.raises(TriggerError):
        await store.register(Trigger(**{**BASE, "jitter": -1}))
    assert await store.get("t") == good  # unchanged, same revision


OLD_ROW = (
    "INSERT INTO tt_triggers (trigger_id, flow_id, input_json, cron, timezone, overlap, "
    "catch_up, max_catch_up, enabled, revision, registered_at_ms) "
    "VALUES ('old', 'f', '{}', '* * * * *', NULL, 'skip', 'none', 0, 1, 1, 0)"
)


async def test_a_sqlite_database_from_before_the_fields_keeps_working(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    older = [m for m in TRIGGER_MIGRATIONS if m[0] < "0010"]
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE TABLE tt_migrations (name TEXT PRIMARY KEY NOT NULL)")
    for name, statements in older:
        for statement in statements:
            conn.execute(statement)
        conn.execute("INSERT INTO tt_migrations (name) VALUES (?)", (name,))
    conn.execute(OLD_ROW)
    conn.close()
    async with open_sqlite_trigger_store(str(path), clock=ManualClock(JAN_1)) as store:
        old = await store.get("old")
        assert old is not None
        assert (old.jitter, old.start_at, old.end_at, old.pause_after_failures) == (
            0,
            None,
            None,
            None,
        )
        assert old.consecutive_failures == 0
        # Registering the same declaration again (register_many) changes nothing.
        (again,) = await store.register_many([old.declaration])
        assert again.revision == 1
        changed = await store.register(Trigger.make({**_plain(old), "jitter": 5}))
        assert (changed.revision, changed.jitter) == (2, 5)


def _plain(trigger: Trigger) -> dict[str, Any]:
    return {
        "id": trigger.id,
        "flow_id": trigger.flow_id,
        "input": trigger.input,
        "cron": trigger.cron,
    }


@pytest.mark.parametrize("backend", [pytest.param("postgres", marks=postgres_marks())])
async def test_a_postgres_database_from_before_the_fields_keeps_working(backend: str) -> None:
    from trio_triggers.postgres import open_postgres_trigger_store
    from trio_triggers.postgres._schema import TRIGGER_MIGRATIONS as PG_MIGRATIONS

    del backend
    with fresh_schema() as dsn:
        with admin_connection(dsn) as conn:
            conn.execute("CREATE TABLE tt_migrations (name TEXT PRIMARY KEY NOT NULL)")
            for name, statements in PG_MIGRATIONS:
                if name >= "0010":
                    continue
                for statement in statements:
                    conn.execute(statement.encode())
                conn.execute(b"INSERT INTO tt_migrations (name) VALUES (%s)", (name,))
            conn.execute(OLD_ROW.encode())
        async with open_postgres_trigger_store(dsn, clock=ManualClock(JAN_1)) as store:
            old = await store.get("old")
            assert old is not None
            assert (old.jitter, old.pause_after_failures, old.consecutive_failures) == (0, None, 0)
            (again,) = await store.register_many([old.declaration])
            assert again.revision == 1
            changed = await store.register(Trigger.make({**_plain(old), "pause_after_failures": 2}))
            assert (changed.revision, changed.pause_after_failures) == (2, 2)


# --- the run of failures (plan_failures) --------------------------------------------------------


def _result(outcome: str) -> Result:
    return Result(trigger_id="t", occurrence=0, outcome=outcome)  # type: ignore[arg-type]


def test_only_failed_and_completed_move_the_run_of_failures() -> None:
    def plan(outcome: str, consecutive: int, stored: str | None = None) -> tuple[object, ...]:
        return plan_failures(
            _result(outcome),
            stored,  # type: ignore[arg-type]
            consecutive=consecutive,
            threshold=3,
            at=7,
            by="me",
        )

    assert plan("failed", 0) == (SetFailures(count=1),)
    assert plan("failed", 2) == (
        SetFailures(count=3),
        PauseIfRunning(paused_at=7, note="paused after 3 consecutive failed runs", by="me"),
    )
    assert plan("completed", 2) == (SetFailures(count=0),)
    assert plan("completed", 0) == ()  # nothing to reset: no write
    for outcome in ("skipped", "buffered", "superseded", "launched"):
        assert plan(outcome, 2) == (), outcome  # they say nothing about the flow
    assert plan("failed", 2, stored="failed") == ()  # a repeat is counted once


async def test_re_registering_keeps_the_run_of_failures() -> None:
    store = MemoryTriggerStore(clock=ManualClock(JAN_1))
    registered = await store.register(Trigger.make({**BASE, "pause_after_failures": 5}))
    claim = await store.claim_fire("t", JAN_1 + 60_000, expected_revision=registered.revision)
    await store.record_result(
        Result(
            trigger_id="t",
            occurrence=JAN_1 + 60_000,
            outcome="failed",
            reservation_id=claim.reservation_id,
        )
    )
    again = await store.register(Trigger.make({**BASE, "pause_after_failures": 4}))
    assert (again.consecutive_failures, again.pause_after_failures) == (1, 4)
