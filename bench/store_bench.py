"""Trigger-store throughput against the raw ceiling of its database, measured in one run.

For each backend column this prints

* ``cycles/s``: claim -> launched -> completed cycles per second through the store (three write
  transactions per cycle, one trigger, a fresh occurrence each cycle);
* ``raw tx/s``: the same number of minimal write transactions (``BEGIN IMMEDIATE``, one
  ``UPDATE``, ``COMMIT``) straight through the driver on a database with the same settings;
* ``ratio``: store transactions per second divided by the raw rate (target: >= 0.5);
* ``peer tx/s`` (SQLite): a hand-written claim -> launched -> completed in stdlib ``sqlite3`` on
  the store's own schema (same tables, indexes, foreign keys and file settings): each of the
  three transactions is ``BEGIN IMMEDIATE``, the two writes the store makes (the ledger row and
  the trigger row) and ``COMMIT``, with no read, no decision and no Trio. It writes the same
  rows the store writes, so ``store tx/s`` over it is what the store's snapshot read, its
  decision and its plumbing cost on top of the schema's own price;
* ``list 10k``: one idle ``list()`` of 10 000 registered triggers, in milliseconds;
* ``no-trio tx/s``: the store's own method bodies and SQL on a plain connection (no Trio, no
  lock, no executor), which separates the schema's cost from the async plumbing's.

A backend is one :class:`Column`. The ``postgres`` column appears when ``TT_POSTGRES_DSN`` names a
server: there the raw ceiling is one plain psycopg connection doing the same minimal ``UPDATE`` +
``COMMIT``, and ``no-trio`` runs the store's own bodies and SQL (the same write shape) on one
plain connection, so ``store tx/s`` over ``no-trio tx/s`` is the cost of Trio, the thread hop
and the pool.

Run: ``.venv/bin/python bench/store_bench.py [--cycles N]``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sqlite3
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

import trio

from trio_triggers import InlineExecutor, ThreadExecutor, Trigger
from trio_triggers._store import Result, TriggerStore, open_sqlite_trigger_store

if TYPE_CHECKING:
    from trio_triggers._executor import Executor

SYNCHRONOUS: Final = "NORMAL"


class TickingClock:
    """A wall clock that moves 1 ms per reading (no system-clock noise in the store)."""

    def __init__(self) -> None:
        self._now = 1_700_000_000_000

    def now_ms(self) -> int:
        self._now += 1
        return self._now


StoreFactory = Callable[[Path], contextlib.AbstractAsyncContextManager[TriggerStore]]


@dataclass
class Column:
    name: str
    open_store: StoreFactory
    raw_ceiling: Callable[[Path, int], float]  # (directory, transactions) -> transactions/s
    engine_only: Callable[[Path, int], float] | None = None  # (directory, cycles) -> cycles/s
    peer: Callable[[Path, int], float] | None = None  # (directory, cycles) -> cycles/s


def _sqlite_store(executor: Callable[[], Executor]) -> StoreFactory:
    @contextlib.asynccontextmanager
    async def open_(directory: Path) -> AsyncIterator[TriggerStore]:
        async with open_sqlite_trigger_store(
            str(directory / "store.sqlite"),
            clock=TickingClock(),
            executor=executor(),
            synchronous=SYNCHRONOUS,
        ) as store:
            yield store

    return open_


def sqlite_raw_ceiling(directory: Path, transactions: int) -> float:
    """Minimal write transactions through stdlib sqlite3, WAL and the same ``synchronous``."""
    connection = sqlite3.connect(directory / "raw.sqlite", isolation_level=None)
    try:
        connection.execute("PRAGMA journal_mode = WAL")
        connection.execute(f"PRAGMA synchronous = {SYNCHRONOUS}")
        connection.execute("CREATE TABLE counter (id INTEGER PRIMARY KEY, value INTEGER)")
        connection.execute("INSERT INTO counter (id, value) VALUES (1, 0)")
        start = time.perf_counter()
        for _ in range(transactions):
            connection.execute("BEGIN IMMEDIATE")
            connection.execute("UPDATE counter SET value = value + 1 WHERE id = 1")
            connection.execute("COMMIT")
        elapsed = time.perf_counter() - start
    finally:
        connection.close()
    return transactions / elapsed


_SAMPLE_UUID: Final = "cc334a1e-96a6-4fd9-bcc8-b53116bc52e1"


def sqlite_hand_written_peer(directory: Path, cycles: int) -> float:
    """Claim -> launched -> completed as a stdlib ``sqlite3`` user would write it, same schema.

    Each transaction makes the same two row writes the store makes (so the same pages are
    dirtied), without reading a snapshot first: what is left of the store's work when the
    decision is known in advance.
    """
    from trio_triggers._store._codec import encode_trigger
    from trio_triggers._store._sqlite_store import TRIGGER_MIGRATIONS, _SqliteTx

    connection = sqlite3.connect(directory / "peer.sqlite", isolation_level=None)
    try:
        connection.execute("PRAGMA journal_mode = WAL")
        connection.execute(f"PRAGMA synchronous = {SYNCHRONOUS}")
        connection.execute("PRAGMA foreign_keys = ON")
        for _, statements in TRIGGER_MIGRATIONS:
            for statement in statements:
                connection.execute(statement)
        _SqliteTx(connection).upsert(encode_trigger(trigger("bench")))
        execute = connection.execute
        start = time.perf_counter()
        for o in range(1, cycles + 1):
            # As long as the store's reservation ids (same row and page sizes).
            reservation = f"trigger-reservation:bench:{_SAMPLE_UUID}:{o}"
            run_id = f"run-{o}"
            execute("BEGIN IMMEDIATE")
            execute(
                "INSERT INTO tt_trigger_fires (trigger_id, occurrence_at_ms) VALUES (?, ?)",
                ("bench", o),
            )
            execute(
                "UPDATE tt_triggers SET active_run_id = ?, active_claimed_at_ms = ? "
                "WHERE trigger_id = ?",
                (reservation, o, "bench"),
            )
            execute("COMMIT")
            execute("BEGIN IMMEDIATE")
            execute(
                "UPDATE tt_trigger_fires SET outcome = 'launched', run_id = ? "
                "WHERE trigger_id = ? AND occurrence_at_ms = ?",
                (run_id, "bench", o),
            )
            execute(
                "UPDATE tt_triggers SET active_run_id = ?, active_claimed_at_ms = NULL, "
                "last_fired_at_ms = ? WHERE trigger_id = ?",
                (run_id, o, "bench"),
            )
            execute("COMMIT")
            execute("BEGIN IMMEDIATE")
            execute(
                "UPDATE tt_trigger_fires SET outcome = 'completed' "
                "WHERE trigger_id = ? AND occurrence_at_ms = ?",
                ("bench", o),
            )
            execute("UPDATE tt_triggers SET active_run_id = NULL WHERE trigger_id = ?", ("bench",))
            execute("COMMIT")
        elapsed = time.perf_counter() - start
    finally:
        connection.close()
    return cycles / elapsed


def sqlite_engine_without_trio(directory: Path, cycles: int) -> float:
    """The store's own method bodies and SQL on a plain connection, without Trio or the lock.

    Shows how much of the gap to the raw ceiling is the schema's work (several statements and
    pages per transaction) and how much is the async plumbing.
    """
    from trio_triggers._store._bodies import body_claim_fire, body_record_result
    from trio_triggers._store._codec import encode_trigger
    from trio_triggers._store._sqlite_store import TRIGGER_MIGRATIONS, _SqliteTx

    connection = sqlite3.connect(directory / "engine.sqlite", isolation_level=None)
    try:
        connection.execute("PRAGMA journal_mode = WAL")
        connection.execute(f"PRAGMA synchronous = {SYNCHRONOUS}")
        connection.execute("PRAGMA foreign_keys = ON")
        for _, statements in TRIGGER_MIGRATIONS:
            for statement in statements:
                connection.execute(statement)
        tx = _SqliteTx(connection)
        tx.upsert(encode_trigger(trigger("bench")))
        clock = TickingClock()
        start = time.perf_counter()
        for o in range(1, cycles + 1):
            connection.execute("BEGIN IMMEDIATE")
            claim = body_claim_fire(tx, "bench", o, 1, False, clock.now_ms())
            connection.execute("COMMIT")
            run_id = f"run-{o}"
            launched = Result(
                trigger_id="bench",
                occurrence=o,
                outcome="launched",
                run_id=run_id,
                reservation_id=claim.reservation_id,
            )
            connection.execute("BEGIN IMMEDIATE")
            body_record_result(tx, launched)
            connection.execute("COMMIT")
            completed = Result(trigger_id="bench", occurrence=o, outcome="completed", run_id=run_id)
            connection.execute("BEGIN IMMEDIATE")
            body_record_result(tx, completed)
            connection.execute("COMMIT")
        elapsed = time.perf_counter() - start
    finally:
        connection.close()
    return cycles / elapsed


# --- PostgreSQL (TT_POSTGRES_DSN) -------------------------------------------------------------
#
# Same three numbers on the server TT_POSTGRES_DSN names, each round in a fresh schema:
# the store; the raw ceiling (one plain psycopg connection: UPDATE one row, COMMIT, the same
# minimal transaction as the SQLite column); and the store's own method bodies and SQL on one
# plain psycopg connection (the same write shape, without Trio, the pool or the thread hop).
# Without TT_POSTGRES_DSN the column is left out.


@contextlib.contextmanager
def _pg_schema(dsn: str) -> Iterator[str]:
    import uuid

    import psycopg
    import psycopg.conninfo

    schema = f"tt_bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"'.encode())
    params = psycopg.conninfo.conninfo_to_dict(dsn)
    options = f"{params.get('options') or ''} -c search_path={schema}".strip()
    try:
        yield psycopg.conninfo.make_conninfo(dsn, options=options)
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE'.encode())


def _postgres_store(dsn: str) -> StoreFactory:
    from trio_triggers.postgres import open_postgres_trigger_store

    @contextlib.asynccontextmanager
    async def open_(directory: Path) -> AsyncIterator[TriggerStore]:
        del directory
        with _pg_schema(dsn) as schema_dsn:
            async with open_postgres_trigger_store(schema_dsn, clock=TickingClock()) as store:
                yield store

    return open_


def _postgres_raw_ceiling(dsn: str) -> Callable[[Path, int], float]:
    def raw(directory: Path, transactions: int) -> float:
        import psycopg

        del directory
        with _pg_schema(dsn) as schema_dsn, psycopg.connect(schema_dsn) as conn:
            conn.execute("CREATE TABLE counter (id BIGINT PRIMARY KEY, value BIGINT NOT NULL)")
            conn.execute("INSERT INTO counter (id, value) VALUES (1, 0)")
            conn.commit()
            start = time.perf_counter()
            for _ in range(transactions):
                conn.execute("UPDATE counter SET value = value + 1 WHERE id = 1")
                conn.commit()
            return transactions / (time.perf_counter() - start)

    return raw


def _postgres_engine_without_trio(dsn: str) -> Callable[[Path, int], float]:
    def engine(directory: Path, cycles: int) -> float:
        import psycopg

        from trio_triggers._store._bodies import body_claim_fire, body_record_result
        from trio_triggers._store._codec import encode_trigger
        from trio_triggers.postgres._schema import TRIGGER_MIGRATIONS
        from trio_triggers.postgres._trigger_store import _PostgresTx

        del directory
        with _pg_schema(dsn) as schema_dsn, psycopg.connect(schema_dsn) as conn:
            for _, statements in TRIGGER_MIGRATIONS:
                for statement in statements:
                    conn.execute(statement.encode())
            setup = _PostgresTx(conn, lock=True)
            setup.upsert(encode_trigger(trigger("bench")))
            setup.finish()
            clock = TickingClock()
            start = time.perf_counter()
            for o in range(1, cycles + 1):
                tx = _PostgresTx(conn, lock=True)
                claim = body_claim_fire(tx, "bench", o, 1, False, clock.now_ms())
                tx.finish()
                run_id = f"run-{o}"
                tx = _PostgresTx(conn, lock=True)
                body_record_result(
                    tx,
                    Result(
                        trigger_id="bench",
                        occurrence=o,
                        outcome="launched",
                        run_id=run_id,
                        reservation_id=claim.reservation_id,
                    ),
                )
                tx.finish()
                tx = _PostgresTx(conn, lock=True)
                body_record_result(
                    tx,
                    Result(trigger_id="bench", occurrence=o, outcome="completed", run_id=run_id),
                )
                tx.finish()
            return cycles / (time.perf_counter() - start)

    return engine


def postgres_columns() -> list[Column]:
    dsn = os.environ.get("TT_POSTGRES_DSN", "").strip()
    if not dsn:
        return []
    return [
        Column(
            "postgres",
            _postgres_store(dsn),
            _postgres_raw_ceiling(dsn),
            _postgres_engine_without_trio(dsn),
        )
    ]


def columns() -> list[Column]:
    return [
        Column(
            "sqlite-inline",
            _sqlite_store(InlineExecutor),
            sqlite_raw_ceiling,
            sqlite_engine_without_trio,
            sqlite_hand_written_peer,
        ),
        Column(
            "sqlite-threaded",
            _sqlite_store(ThreadExecutor),
            sqlite_raw_ceiling,
            peer=sqlite_hand_written_peer,
        ),
        *postgres_columns(),
    ]


def trigger(trigger_id: str) -> Trigger:
    return Trigger(id=trigger_id, flow_id="flow", input={"n": 1}, cron="0 * * * *")


async def one_cycle(store: TriggerStore, trigger_id: str, occurrence: int) -> None:
    """claim -> launched -> completed for one occurrence (three write transactions alone)."""
    claim = await store.claim_fire(trigger_id, occurrence, expected_revision=1)
    run_id = f"run-{trigger_id}-{occurrence}"
    await store.record_result(
        Result(
            trigger_id=trigger_id,
            occurrence=occurrence,
            outcome="launched",
            run_id=run_id,
            reservation_id=claim.reservation_id,
        )
    )
    await store.record_result(
        Result(trigger_id=trigger_id, occurrence=occurrence, outcome="completed", run_id=run_id)
    )


async def cycles_per_second(store: TriggerStore, cycles: int) -> float:
    await store.register(trigger("bench"))
    start = time.perf_counter()
    for occurrence in range(1, cycles + 1):
        await one_cycle(store, "bench", occurrence)
    return cycles / (time.perf_counter() - start)


CALLERS: Final = 100


async def concurrent_cycles_per_second(store: TriggerStore, cycles: int) -> float:
    """The same cycles spread over ``CALLERS`` triggers cycling at once (as a scheduler's launch
    tasks do), so a batching store may commit concurrent calls together."""
    ids = [f"c{index:03d}" for index in range(CALLERS)]
    for trigger_id in ids:
        await store.register(trigger(trigger_id))
    each = max(1, cycles // CALLERS)

    async def cycle(trigger_id: str) -> None:
        for occurrence in range(1, each + 1):
            await one_cycle(store, trigger_id, occurrence)

    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for trigger_id in ids:
            nursery.start_soon(cycle, trigger_id)
    return each * CALLERS / (time.perf_counter() - start)


async def list_ms(store: TriggerStore, count: int) -> float:
    for index in range(count):
        await store.register(trigger(f"t{index:05d}"))
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        rows = await store.list()
        best = min(best, time.perf_counter() - start)
        assert len(rows) >= count
    return best * 1000


async def measure(
    column: Column, cycles: int, listed: int, rounds: int
) -> tuple[float, float, float, float, float, float]:
    """Best of ``rounds`` interleaved store/raw rounds (the machine may be shared and noisy)."""
    rate = raw = engine = peer = together = 0.0
    with tempfile.TemporaryDirectory() as name:
        directory = Path(name)
        for index in range(rounds):
            round_dir = directory / f"round{index}"
            round_dir.mkdir()
            async with column.open_store(round_dir) as store:
                rate = max(rate, await cycles_per_second(store, cycles))
                together = max(together, await concurrent_cycles_per_second(store, cycles))
            raw = max(raw, column.raw_ceiling(round_dir, 3 * cycles))
            if column.engine_only is not None:
                engine = max(engine, column.engine_only(round_dir, cycles))
            if column.peer is not None:
                peer = max(peer, column.peer(round_dir, cycles))
        async with column.open_store(directory) as store:
            list_time = await list_ms(store, listed)
    return rate, raw, engine, peer, list_time, together


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=2000)
    parser.add_argument("--list", type=int, default=10_000, dest="listed")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"synchronous={SYNCHRONOUS}, {args.cycles} cycles (3 write transactions each)")
    header = f"{'backend':<16} {'cycles/s':>10} {'store tx/s':>11} {'raw tx/s':>10} {'ratio':>6}"
    print(
        header + f" {'peer tx/s':>10} {'vs peer':>8} {'list ms':>8} {'no-trio tx/s':>13}"
        f" {'x100 cyc/s':>11} {'x100 ratio':>11}"
    )
    for column in columns():
        rate, raw, engine, peer, list_time, together = trio.run(
            measure, column, args.cycles, args.listed, args.rounds
        )
        ratio = 3 * rate / raw
        floor = f"{3 * engine:>13.0f}" if engine else f"{'-':>13}"
        versus = f"{3 * peer:>10.0f} {rate / peer:>8.2f}" if peer else f"{'-':>10} {'-':>8}"
        print(
            f"{column.name:<16} {rate:>10.0f} {3 * rate:>11.0f} {raw:>10.0f} {ratio:>6.2f}"
            f" {versus} {list_time:>8.1f} {floor} {together:>11.0f} {3 * together / raw:>11.2f}"
        )
    print("raw = BEGIN IMMEDIATE; UPDATE one counter row; COMMIT (one page per transaction)")
    print("ratio = store tx/s / raw tx/s (the issue's target: >= 0.5)")
    print("peer = the same three transactions hand-written on the store's schema (same rows,")
    print("same pages, no read, no decision, no Trio); vs peer = store tx/s / peer tx/s")
    print(f"list ms = one list() of {args.listed} registered triggers")
    print("no-trio = the store's method bodies and SQL on a plain connection, without Trio,")
    print("the lock or the executor")
    print(f"x100 = the same cycles on {CALLERS} triggers cycling at once (a scheduler's launch")
    print("tasks); SQL stores commit concurrent calls together (group commit); x100 ratio =")
    print("store calls/s over raw tx/s: not the issue's per-transaction ratio, which is 'ratio'")


if __name__ == "__main__":
    main()
