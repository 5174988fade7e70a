"""Three scheduler processes, each with a LocalRunner, on one database, killed at random.

Twenty triggers fire every second (``catch_up="all"``, once per overlap policy) for a window of
twenty seconds while a driver SIGKILLs a random process every few seconds and restarts it. Then
the killing stops, the processes run on for one run lease (``STALE_AFTER_MS``, so runs of killed
owners are taken over) and a few seconds more, the triggers are disabled, and once everything has
settled the database must show what the claim protocol promises (``docs/postgres.md``):

* **no boundary is missing**: every second of the window has a ledger row for every trigger;
* **everything settled**: no ledger row is unclaimed, buffered or still ``launched``, except
  work that is still owed (a row whose own reservation holds its trigger, left by a claimant
  killed between claim and launch, which the reservation lease re-arms; under buffer-one a
  buffered boundary of a trigger disabled meanwhile); every run row is terminal;
* **one run per idempotency key**: every launched boundary (``completed``/``failed``) names
  exactly one run row, the one with that boundary's key; no run exists for a boundary that is
  not in the ledger; a ``superseded`` boundary has at most one run, and it is terminal;
* **the ledger agrees with the runs table**: a ``completed`` boundary's run is ``completed``.

A boundary can legitimately end ``superseded`` without a run: its claimant was killed between
the claim and the launch, and the next boundary displaced the reservation. The test also
requires 75% of the window's boundaries to have completed runs (it measures 96-100% in most
runs), so it cannot pass vacuously.

The same test runs on PostgreSQL and on one SQLite file. Each takes about 40 s of real time,
so it is marked ``slow`` and runs only with ``TT_RUN_SLOW=1`` (which ``.ci/run`` sets), and
then under ``supersede`` only: the policy whose claims displace reservations, the one the other
two's paths are a part of. ``TT_RUN_SLOW=all`` (``nox -s soak``) runs every policy.
``TT_MP_WINDOW_S`` shortens the window for a quick look.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import sqlite3
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
import pytest
import trio

from tests.pg_support import fresh_schema, postgres_marks
from trio_triggers import SystemWallClock
from trio_triggers._declarations import Trigger
from trio_triggers._identities import idempotency_key, reservation_occurrence
from trio_triggers._store import TriggerStore, open_sqlite_trigger_store
from trio_triggers.postgres import open_postgres_trigger_store

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

ROOT = Path(__file__).resolve().parent.parent.parent
TRIGGERS = 20
PROCESSES = 3
STALE_AFTER_MS = 2_000
WINDOW_S = float(os.environ.get("TT_MP_WINDOW_S", "20"))
SEED = int(os.environ.get("TT_MP_SEED", "7"))

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        os.environ.get("TT_RUN_SLOW", "") in ("", "0"),
        reason="a 40-second real-time soak test per backend: set TT_RUN_SLOW=1 to run it",
    ),
]


def every_second(index: int, overlap: str, *, enabled: bool = True) -> Trigger:
    return Trigger.make(
        {
            "id": f"t{index:02d}",
            "flow_id": "flow",
            "input": {"index": index},
            "cron": "* * * * * *",
            "timezone": "UTC",
            "overlap": overlap,
            "catch_up": "all",
            "max_catch_up": 120,
            "enabled": enabled,
        }
    )


@contextlib.asynccontextmanager
async def open_store(db: str) -> AsyncIterator[TriggerStore]:
    if db.startswith("postgresql://"):
        async with open_postgres_trigger_store(db, clock=SystemWallClock()) as pg:
            yield pg
    else:
        async with open_sqlite_trigger_store(db, clock=SystemWallClock()) as lite:
            yield lite


@dataclass
class Child:
    host: str
    log: Path
    process: trio.Process | None = None
    starts: int = 0


@dataclass
class Driver:
    db: str
    directory: Path
    children: list[Child] = field(default_factory=list)
    kills: int = 0

    async def start(self, child: Child, nursery: trio.Nursery) -> None:
        child.starts += 1
        log = child.log.open("ab")
        process = await trio.lowlevel.open_process(
            [
                sys.executable,
                "-m",
                "tests.postgres.mp_child",
                self.db,
                child.host,
                str(STALE_AFTER_MS),
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=log,
        )
        log.close()
        child.process = process
        assert process.stdout is not None
        line = b""
        with trio.fail_after(60):
            while not line.endswith(b"\n"):
                chunk = await process.stdout.receive_some(64)
                if not chunk:
                    raise AssertionError(f"{child.host} exited before it was ready:\n{tail(child)}")
                line += chunk
        assert line.strip() == b"ready", line
        nursery.start_soon(drain, process)

    async def kill(self, child: Child) -> None:
        process = child.process
        assert process is not None
        process.send_signal(signal.SIGKILL)
        await process.wait()
        self.kills += 1

    async def stop_all(self) -> None:
        for child in self.children:
            if child.process is not None and child.process.returncode is None:
                child.process.kill()
                await child.process.wait()


async def drain(process: trio.Process) -> None:
    assert process.stdout is not None
    with contextlib.suppress(trio.ClosedResourceError, trio.BrokenResourceError):
        while await process.stdout.receive_some(1024):
            pass


def tail(child: Child, lines: int = 40) -> str:
    try:
        return "\n".join(child.log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "<no log>"


# --- reading the outcome --------------------------------------------------------------------


@dataclass
class Snapshot:
    fires: list[tuple[str, int, str | None, str | None]]  # trigger, occurrence, outcome, run
    runs: list[tuple[str, str, str | None]]  # run_id, status, idempotency_key
    holders: dict[str, str | None] = field(default_factory=dict)  # trigger -> active_run_id

    def owed(self, fire: tuple[str, int, str | None, str | None]) -> bool:
        """A claimed row whose own reservation still holds its trigger: a claimant killed
        between its claim and its launch left it, and the reservation lease (5 minutes) will
        re-arm it. It is owed work, not lost work (the simulator's T20 counts it the same)."""
        holder = self.holders.get(fire[0])
        return fire[2] is None and reservation_occurrence(holder) == fire[1]


def read(db: str) -> Snapshot:
    fires_sql = (
        "SELECT trigger_id, occurrence_at_ms, outcome, run_id FROM tt_trigger_fires "
        "ORDER BY trigger_id, occurrence_at_ms"
    )
    runs_sql = "SELECT run_id, status, idempotency_key FROM tt_runs ORDER BY run_id"
    holders_sql = "SELECT trigger_id, active_run_id FROM tt_triggers"
    rows: list[Any]
    if db.startswith("postgresql://"):
        with psycopg.connect(db, autocommit=True) as conn:
            fires = [tuple(r) for r in conn.execute(fires_sql).fetchall()]
            rows = [tuple(r) for r in conn.execute(runs_sql).fetchall()]
            holders = dict(conn.execute(holders_sql).fetchall())
    else:
        conn2 = sqlite3.connect(db, timeout=30)
        try:
            fires = [tuple(r) for r in conn2.execute(fires_sql).fetchall()]
            rows = [tuple(r) for r in conn2.execute(runs_sql).fetchall()]
            holders = dict(conn2.execute(holders_sql).fetchall())
        finally:
            conn2.close()
    return Snapshot(fires=fires, runs=rows, holders=holders)


UNSETTLED_OUTCOMES = (None, "buffered", "launched")
TERMINAL_RUNS = ("completed", "failed", "cancelled")


def settled(snapshot: Snapshot, overlap: str) -> bool:
    # Under buffer-one a boundary buffered when the triggers were disabled stays owed (in the
    # pending slot, resumed when the trigger is enabled again): it is not unsettled work.
    unsettled = tuple(o for o in UNSETTLED_OUTCOMES if o != "buffered" or overlap != "buffer-one")
    return all(f[2] not in unsettled or snapshot.owed(f) for f in snapshot.fires) and all(
        r[1] in TERMINAL_RUNS for r in snapshot.runs
    )


def check(snapshot: Snapshot, window_end: int, overlap: str) -> dict[str, int]:
    by_key: dict[str, list[tuple[str, str, str | None]]] = {}
    for run in snapshot.runs:
        assert run[2] is not None, f"run {run[0]} has no idempotency key"
        by_key.setdefault(run[2], []).append(run)
    ledger: dict[str, tuple[str, int, str | None, str | None]] = {}
    for fire in snapshot.fires:
        ledger[idempotency_key(fire[0], fire[1])] = fire

    counts = {
        "boundaries": 0,
        "completed_in_window": 0,
        "completed": 0,
        "failed": 0,
        "superseded": 0,
        "skipped": 0,
        "buffered": 0,
        "owed": 0,
        "blocked": 0,
        "runs": 0,
    }
    # A boundary that did not run is superseded under supersede, skipped under the others.
    not_run = {"supersede": ("superseded",), "skip": ("skipped",)}.get(
        overlap, ("skipped", "buffered")
    )
    for index in range(TRIGGERS):
        trigger_id = f"t{index:02d}"
        occurrences = sorted(f[1] for f in snapshot.fires if f[0] == trigger_id)
        assert occurrences, f"{trigger_id} never fired"
        first = occurrences[0]
        expected = list(range(first, window_end + 1, 1000))
        missing = sorted(set(expected) - set(occurrences))
        assert not missing, f"{trigger_id} is missing boundaries {missing[:10]}"
        # Boundaries behind an owed reservation (its claimant was killed before launching) wait
        # for the reservation lease, five minutes, longer than this test: they are counted
        # apart ("blocked"), not held against the completion bar.
        stranded = [f[1] for f in snapshot.fires if f[0] == trigger_id and snapshot.owed(f)]
        if stranded:
            blocked = [o for o in expected if o > min(stranded)]
            counts["blocked"] += len(blocked)
            expected = [o for o in expected if o <= min(stranded)]
        counts["boundaries"] += len(expected)
        window = set(expected)
        counts["completed_in_window"] += sum(
            1
            for f in snapshot.fires
            if f[0] == trigger_id and f[1] in window and f[2] == "completed"
        )

    for fire in snapshot.fires:
        trigger_id, occurrence, outcome, run_id = fire
        key = idempotency_key(trigger_id, occurrence)
        runs = by_key.get(key, [])
        if snapshot.owed(fire):
            counts["owed"] += 1
            assert not runs or runs[0][1] in TERMINAL_RUNS, f"{key} owed, its run {runs[0]}"
            continue
        assert outcome not in UNSETTLED_OUTCOMES or outcome in not_run, (
            f"{key} is unsettled ({outcome})"
        )
        assert len(runs) <= 1, f"{key} has {len(runs)} runs"
        if outcome in ("completed", "failed"):
            assert len(runs) == 1, f"{key} was {outcome} but has no run"
            assert runs[0][0] == run_id, f"{key}: ledger names {run_id}, runs table {runs[0][0]}"
            if outcome == "completed":
                assert runs[0][1] == "completed", f"{key}: run {run_id} is {runs[0][1]}"
            else:
                assert runs[0][1] in ("failed", "cancelled"), f"{key}: run is {runs[0][1]}"
        else:
            assert outcome in not_run, f"{key}: unexpected outcome {outcome}"
        assert outcome is not None
        counts[outcome] += 1
        counts["runs"] += len(runs)
    for key, runs in by_key.items():
        assert key in ledger, f"run {runs[0][0]} has key {key}, which is not in the ledger"
        assert runs[0][1] in TERMINAL_RUNS, f"run {runs[0][0]} is {runs[0][1]}"
    return counts


# --- the test ---------------------------------------------------------------------------------


@contextlib.contextmanager
def database(kind: str, tmp_path: Path) -> Iterator[str]:
    if kind == "postgres":
        with fresh_schema() as dsn:
            # The children and the CLI tell a DSN from a SQLite path by its URI scheme.
            assert dsn.startswith("postgresql://"), "TT_POSTGRES_DSN must be a postgresql:// URI"
            yield dsn
    else:
        yield str(tmp_path / "shared.sqlite")


_ALL_POLICIES = os.environ.get("TT_RUN_SLOW", "") == "all"
_ONLY_IN_SOAK = pytest.mark.skipif(
    not _ALL_POLICIES, reason="runs with TT_RUN_SLOW=all (nox -s soak); CI runs supersede"
)


@pytest.mark.parametrize(
    "overlap",
    [
        pytest.param("skip", marks=_ONLY_IN_SOAK),
        pytest.param("buffer-one", marks=_ONLY_IN_SOAK),
        "supersede",
    ],
)
@pytest.mark.parametrize("kind", [pytest.param("postgres", marks=postgres_marks()), "sqlite"])
async def test_killed_and_restarted_processes_lose_and_duplicate_nothing(
    kind: str, overlap: str, tmp_path: Path
) -> None:
    rng = random.Random(SEED)
    with database(kind, tmp_path) as db:
        async with open_store(db) as store:
            for index in range(TRIGGERS):
                await store.register(every_second(index, overlap))
        driver = Driver(db=db, directory=tmp_path)
        driver.children = [
            Child(host=f"proc-{n}", log=tmp_path / f"proc-{n}.log") for n in range(PROCESSES)
        ]
        clock = SystemWallClock()
        try:
            async with trio.open_nursery() as nursery:
                for child in driver.children:
                    await driver.start(child, nursery)
                # The window: kill a random process every 3-6 s and restart it at once.
                end = trio.current_time() + WINDOW_S
                while trio.current_time() < end:
                    await trio.sleep(rng.uniform(3.0, 6.0))
                    victim = rng.choice(driver.children)
                    await driver.kill(victim)
                    await trio.sleep(rng.uniform(0.0, 1.0))
                    await driver.start(victim, nursery)
                # One run lease (plus slack) without kills: runs of killed owners are taken over,
                # and any reservation a killed claimant left is displaced by later boundaries.
                await trio.sleep(STALE_AFTER_MS / 1000 + 4)
                async with open_store(db) as store:
                    for index in range(TRIGGERS):
                        await store.register(every_second(index, overlap, enabled=False))
                disabled_at = clock.now_ms()
                with trio.fail_after(STALE_AFTER_MS / 1000 + 60):
                    while True:
                        snapshot = await trio.to_thread.run_sync(read, db)
                        if settled(snapshot, overlap):
                            break
                        await trio.sleep(0.5)
                await driver.stop_all()
                nursery.cancel_scope.cancel()
        except BaseException:
            await driver.stop_all()
            for child in driver.children:
                print(f"--- {child.host} (started {child.starts}x) ---\n{tail(child)}")
            raise
        # Boundaries up to 2 s before disabling were certainly claimed by a live scheduler.
        window_end = (disabled_at - 2_000) // 1000 * 1000
        counts = check(snapshot, window_end, overlap)
        print(f"{kind} {overlap}: {driver.kills} kills, {counts}")
        assert driver.kills >= WINDOW_S / 8
        # Not vacuous: most of the window's boundaries ran to completion, under every policy.
        # The rest did not run for a legitimate reason: a killed owner's run is taken over only
        # after STALE_AFTER_MS, and the boundaries that fall due meanwhile are skipped,
        # buffered or supersede it. (This share was 48-50% under supersede while a PostgreSQL
        # claim read a stale ledger under a waited lock, see docs/postgres.md.) Measured on the
        # quiet 2-core machine: 96-100% in most runs, 82.6% in the worst (PostgreSQL,
        # supersede, 9 reservations of killed claimants). The aim is 90%; the bar is 75% so
        # that a bad draw of kills does not fail CI. Boundaries blocked behind a killed
        # claimant's reservation are not in the count: one kill between a tick's claim and its
        # launches strands every trigger that tick claimed for the reservation lease (five
        # minutes, longer than the test), so a kill early in the window can block most of it
        # (580 blocked against 200 counted in one CI run, all twenty triggers stranded by one
        # kill ten seconds in). An earlier bound, "blocked at most the counted boundaries",
        # failed on such a draw although every guarantee held, so it is gone: what is blocked
        # is the contract's reservation lease at work, and the checks above (no boundary
        # missing, one run per key, everything settled) cover the blocked boundaries too.
        assert counts["completed_in_window"] >= 0.75 * counts["boundaries"], counts
