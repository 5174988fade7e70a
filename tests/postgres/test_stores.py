"""What the PostgreSQL stores add beyond the conformance suites: many connections at once,
row locks, lost connections, server-side bounds, concurrent opening."""

from __future__ import annotations

from typing import TYPE_CHECKING

import psycopg
import psycopg.errors
import pytest
import trio

from tests.pg_support import admin_connection
from trio_triggers import RunStoreError, TriggerError
from trio_triggers._declarations import Trigger
from trio_triggers._ownership import Created, Existing
from trio_triggers._store import Claim, Result
from trio_triggers.postgres import (
    PostgresStores,
    open_postgres_run_store,
    open_postgres_stores,
    open_postgres_trigger_store,
)

if TYPE_CHECKING:
    from trio_triggers.postgres._database import Connection

pytestmark = pytest.mark.postgres


class ManualClock:
    def __init__(self, value: int = 0) -> None:
        self.value = value

    def now_ms(self) -> int:
        return self.value


def daily(**changes: object) -> Trigger:
    return Trigger.make(
        {
            "id": "daily",
            "flow_id": "flow",
            "input": {"n": 1},
            "cron": "0 0 * * *",
            "overlap": "skip",
            **changes,
        }
    )


def backend_pid(conn: Connection) -> int:
    row = conn.execute("SELECT pg_backend_pid()").fetchone()
    assert row is not None
    return int(row[0])


async def test_claims_from_many_connections_serialise_on_the_trigger_row(
    postgres_dsn: str,
) -> None:
    """Three stores (three pools, 12 connections) claim 24 occurrences of one skip trigger at
    once: exactly one is granted, every other is skipped, and the ledger has all 24."""
    clock = ManualClock(0)
    claims: list[Claim] = []
    async with (
        open_postgres_trigger_store(postgres_dsn, clock=clock) as a,
        open_postgres_trigger_store(postgres_dsn, clock=clock) as b,
        open_postgres_trigger_store(postgres_dsn, clock=clock) as c,
    ):
        await a.register(daily())

        async def claim(store: object, occurrence: int) -> None:
            assert hasattr(store, "claim_fire")
            claims.append(await store.claim_fire("daily", occurrence, expected_revision=1))

        async with trio.open_nursery() as nursery:
            for occurrence in range(1, 25):
                nursery.start_soon(claim, (a, b, c)[occurrence % 3], occurrence)
        actions = sorted(str(claim.action) for claim in claims)
        assert actions == ["fire"] + ["skip"] * 23
        history = await b.history()
        assert len(history.items) == 24
        assert {item.outcome for item in history.items} == {None, "skipped"}


async def test_lost_connection_is_a_store_error_and_the_next_call_recovers(
    postgres_dsn: str,
) -> None:
    async with open_postgres_trigger_store(postgres_dsn, clock=ManualClock(), pool_size=1) as s:
        await s.register(daily())
        pid = await s.database.transaction(backend_pid)
        with admin_connection(postgres_dsn) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        with pytest.raises(TriggerError) as caught:
            await s.claim_fire("daily", 1, expected_revision=1)
        assert (caught.value.code, caught.value.message) == ("store", "trigger store write failed")
        assert isinstance(caught.value.__cause__, psycopg.OperationalError)
        # Nothing was written by the failed call, and the pool reconnects for the next one.
        assert (await s.history()).items == []
        claim = await s.claim_fire("daily", 1, expected_revision=1)
        assert claim.action == "fire"

        pid = await s.database.transaction(backend_pid)
        with admin_connection(postgres_dsn) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        with pytest.raises(TriggerError, match="trigger store read failed"):
            await s.list()
        assert [row.trigger_id for row in await s.list()] == ["daily"]


async def test_reads_take_no_row_locks_and_writers_are_bounded(postgres_dsn: str) -> None:
    async with open_postgres_trigger_store(
        postgres_dsn, clock=ManualClock(), lock_timeout=0.2
    ) as store:
        await store.register(daily())
        with admin_connection(postgres_dsn) as admin, admin.transaction():
            admin.execute("SELECT 1 FROM tt_triggers WHERE trigger_id = 'daily' FOR UPDATE")
            # Readers never wait for a writer's row lock ...
            assert (await store.get("daily")) is not None
            assert (await store.inspect("daily")).active_run_id is None
            assert len(await store.list()) == 1
            # ... and a writer waits at most lock_timeout, then fails like any database error.
            with pytest.raises(TriggerError, match="trigger store write failed") as caught:
                await store.claim_fire("daily", 1, expected_revision=1)
            assert isinstance(caught.value.__cause__, psycopg.errors.LockNotAvailable)
        assert (await store.claim_fire("daily", 1, expected_revision=1)).action == "fire"


async def test_a_cancelled_claim_commits_whole_or_not_at_all(postgres_dsn: str) -> None:
    """A claim cancelled while it waits for the row lock still finishes (its thread is never
    abandoned): once the lock is released it commits, and the caller sees the cancellation."""
    async with open_postgres_trigger_store(postgres_dsn, clock=ManualClock()) as store:
        await store.register(daily())
        admin = psycopg.connect(postgres_dsn, autocommit=False)
        try:
            admin.execute("SELECT 1 FROM tt_triggers WHERE trigger_id = 'daily' FOR UPDATE")

            async def release_soon() -> None:
                await trio.sleep(0.2)
                await trio.to_thread.run_sync(admin.commit)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(release_soon)
                with trio.move_on_after(0.05) as scope:
                    await store.claim_fire("daily", 1, expected_revision=1)
            assert scope.cancelled_caught
        finally:
            admin.close()
        held = await store.inspect("daily")
        assert held.active_run_id is not None  # the claim committed, reservation and all
        assert [item.occurrence for item in (await store.history()).items] == [1]


async def test_stores_opening_together_migrate_once(postgres_dsn: str) -> None:
    opened: list[PostgresStores] = []

    async def one() -> None:
        async with open_postgres_stores(postgres_dsn, pool_size=1, run_pool_size=1) as stores:
            opened.append(stores)
            await trio.sleep(0.1)  # keep it open while the others open

    async with trio.open_nursery() as nursery:
        for _ in range(3):
            nursery.start_soon(one)
    assert len(opened) == 3
    with admin_connection(postgres_dsn) as conn:
        names = conn.execute("SELECT name FROM tt_migrations ORDER BY name").fetchall()
    assert names == [
        ("0001_triggers",),
        ("0002_reservation_lease",),
        ("0003_heartbeat",),
        ("0004_fire_run_index",),
        ("0005_attention",),
        ("0006_operator_state",),
        ("0007_missed_counts",),
        ("0008_backfills",),
        ("0009_manual_fires",),
        ("0010_trigger_failure_fields",),
        ("runs_0001_tt_runs",),
        ("runs_0002_attempts",),
        ("runs_0003_output",),
        ("runs_0004_retries",),
    ]


async def test_open_postgres_stores_unpacks_as_a_pair(postgres_dsn: str) -> None:
    clock = ManualClock(5)
    async with open_postgres_stores(postgres_dsn, clock=clock) as (triggers, runs):
        registered = await triggers.register(daily())
        assert registered.revision == 1
        created = await runs.create("run-1", "{}", idempotency_key="daily:1")
        assert isinstance(created, Created)
        assert created.row.created_at_ms == 5


async def test_unreachable_server_fails_to_open_with_typed_errors() -> None:
    dsn = "postgresql://tt:tt@127.0.0.1:1/nowhere"
    with pytest.raises(TriggerError) as caught:
        async with open_postgres_trigger_store(dsn, connect_timeout=1, pool_timeout=0.5):
            pass
    assert (caught.value.code, caught.value.message) == (
        "store",
        "could not run trigger migrations",
    )
    with pytest.raises(RunStoreError) as run_caught:
        async with open_postgres_run_store(dsn, connect_timeout=1, pool_timeout=0.5):
            pass
    assert (run_caught.value.code, run_caught.value.method) == ("persistence_failed", "open")


async def test_creates_racing_on_one_key_from_many_connections(postgres_dsn: str) -> None:
    """The local runner's deduplication across processes: one row per idempotency key."""
    outcomes: list[Created | Existing] = []
    async with (
        open_postgres_run_store(postgres_dsn, clock=ManualClock()) as a,
        open_postgres_run_store(postgres_dsn, clock=ManualClock()) as b,
    ):

        async def create(store: object, n: int) -> None:
            assert hasattr(store, "create")
            outcomes.append(await store.create(f"run-{n}", "{}", idempotency_key="daily:1"))

        async with trio.open_nursery() as nursery:
            for n in range(8):
                nursery.start_soon(create, (a, b)[n % 2], n)
        created = [o for o in outcomes if isinstance(o, Created)]
        assert len(created) == 1
        winner = created[0].row.run_id
        assert all(o.row.run_id == winner for o in outcomes)
        assert [row.run_id for row in await a.list_runs()] == [winner]


async def test_run_store_lost_connection_is_persistence_failed(postgres_dsn: str) -> None:
    async with open_postgres_run_store(postgres_dsn, clock=ManualClock(), pool_size=1) as store:
        await store.create("run-1", "{}")
        pid = await store.database.transaction(backend_pid)
        with admin_connection(postgres_dsn) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        with pytest.raises(RunStoreError) as caught:
            await store.get("run-1")
        assert (caught.value.code, caught.value.method) == ("persistence_failed", "get")
        assert (await store.get("run-1")).status == "pending"


async def test_run_store_row_lock_waits_are_bounded(postgres_dsn: str) -> None:
    async with open_postgres_run_store(postgres_dsn, clock=ManualClock()) as store:
        await store.create("run-1", "{}")
        with admin_connection(postgres_dsn) as admin, admin.transaction():
            admin.execute("SELECT 1 FROM tt_runs WHERE run_id = 'run-1' FOR UPDATE")
            with pytest.raises(RunStoreError) as caught:
                await store.request_cancel("run-1", 1)
            assert caught.value.code == "persistence_failed"
            assert isinstance(caught.value.__cause__, psycopg.errors.LockNotAvailable)
            # The plain read does not lock.
            assert (await store.get("run-1")).cancel_requested_at_ms is None


async def test_constraint_violation_is_constraint(postgres_dsn: str) -> None:
    async with open_postgres_run_store(postgres_dsn, clock=ManualClock()) as store:
        await store.create("run-1", "{}")
        with pytest.raises(RunStoreError) as caught:
            await store.create("run-1", "{}")
        assert caught.value.code == "constraint"
        # A CHECK failing in the database (written around the store) is a constraint too.
        with admin_connection(postgres_dsn) as admin:
            admin.execute("ALTER TABLE tt_runs ADD CONSTRAINT no_x CHECK (run_id <> 'x')")
        with pytest.raises(RunStoreError) as check:
            await store.create("x", "{}")
        assert check.value.code == "constraint"


async def test_record_result_round_trip_uses_store_clock_not_server_time(
    postgres_dsn: str,
) -> None:
    clock = ManualClock(1_000)
    async with open_postgres_trigger_store(postgres_dsn, clock=clock) as store:
        await store.register(daily())
        claim = await store.claim_fire("daily", 7, expected_revision=1)
        with admin_connection(postgres_dsn) as admin:
            row = admin.execute(
                "SELECT active_claimed_at_ms FROM tt_triggers WHERE trigger_id = 'daily'"
            ).fetchone()
        assert row == (1_000,)
        await store.record_result(
            Result(
                trigger_id="daily",
                occurrence=7,
                outcome="launched",
                run_id="run-7",
                reservation_id=claim.reservation_id,
            )
        )
        await store.heartbeat("host-a")
        beat = await store.last_heartbeat()
        assert beat is not None
        assert (beat.host, beat.ticked_at) == ("host-a", 1_000)
        assert (await store.get("daily")) is not None


async def test_run_store_opens_every_connection_up_front(postgres_dsn: str) -> None:
    """A heartbeat never waits for a connect: the run store's pool is full from the start."""
    import uuid

    import psycopg.conninfo

    name = f"tt-upfront-{uuid.uuid4().hex[:8]}"  # other tests' sessions may still be closing
    dsn = psycopg.conninfo.make_conninfo(postgres_dsn, application_name=name)
    async with open_postgres_run_store(dsn, clock=ManualClock(), pool_size=3) as store:
        with admin_connection(postgres_dsn) as admin:
            row = admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (name,)
            ).fetchone()
        assert row is not None
        assert row[0] == 3
        assert store.database.pool_size == 3
