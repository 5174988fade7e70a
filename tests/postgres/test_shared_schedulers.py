"""Several scheduler processes on one database share its triggers and launch every boundary.

Regression test for two schedulers on one PostgreSQL database launching almost nothing: a
claim's locking read joined the ledger in the same statement, so under READ COMMITTED a claim
that waited for a peer's lock saw the peer's fresh reservation next to the ledger as it was
before the peer's claim, recorded the boundary ``skipped`` over the peer's live reservation, and
the peer's ``launched`` was refused: every trigger stayed held by a reservation nobody worked on
until its five-minute lease ended, and every later boundary was recorded ``skipped``
(``docs/postgres.md``, "Reading under a lock").

Each case starts two or three real processes (``share_child.py``) a fraction of a second apart,
each serving a scheduler with a NoopRunner or a LocalRunner for a few seconds, on twenty
every-second triggers under one overlap policy. While they run, the test samples the trigger
rows; afterwards it reads the ledger. It requires, for the window in which every process served:

* every boundary of every trigger in the ledger (its primary key makes "at most once" hold);
* at least 95% of them launched (outcome ``launched``, ``completed`` or ``failed``);
* no reservation ever older than ``RESERVATION_BOUND_MS`` (a launch here takes milliseconds, so an
  older one is a reservation its claimer stopped working on);
* under ``skip`` and ``buffer-one`` no launch refused as stale (no peer may displace a live
  reservation under these policies, so a refusal is a lost race).

The three-process cases also run on one SQLite file, whose transactions serialise whole.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
import pytest
import trio

from tests.pg_support import fresh_schema, postgres_marks
from trio_triggers import SystemWallClock, Trigger, open_sqlite_trigger_store
from trio_triggers._identities import is_reservation
from trio_triggers.postgres import open_postgres_trigger_store

if TYPE_CHECKING:
    from collections.abc import Iterator

ROOT = Path(__file__).resolve().parent.parent.parent
TRIGGERS = 20
SERVE_S = 7.0
STAGGER_S = 0.4
RESERVATION_BOUND_MS = 2_500
LAUNCHED = ("launched", "completed", "failed")


def every_second(index: int, overlap: str) -> Trigger:
    return Trigger.make(
        {
            "id": f"s{index:02d}",
            "flow_id": "flow",
            "input": {"index": index},
            "cron": "* * * * * *",
            "timezone": "UTC",
            "overlap": overlap,
        }
    )


@contextlib.contextmanager
def database(kind: str, tmp_path: Path) -> Iterator[str]:
    if kind == "postgres":
        with fresh_schema() as dsn:
            assert dsn.startswith("postgresql://"), "TT_POSTGRES_DSN must be a postgresql:// URI"
            yield dsn
    else:
        yield str(tmp_path / "shared.sqlite")


def query(db: str, sql: str) -> list[tuple[Any, ...]]:
    if db.startswith("postgresql://"):
        with psycopg.connect(db, autocommit=True) as conn:
            return [tuple(r) for r in conn.execute(sql).fetchall()]
    conn2 = sqlite3.connect(db, timeout=30)
    try:
        return [tuple(r) for r in conn2.execute(sql).fetchall()]
    finally:
        conn2.close()


@dataclass
class Sampler:
    db: str
    oldest_ms: int = 0
    oldest: tuple[Any, ...] | None = None
    samples: int = 0
    errors: list[str] = field(default_factory=list)

    def sample(self) -> None:
        rows = query(
            self.db, "SELECT trigger_id, active_run_id, active_claimed_at_ms FROM tt_triggers"
        )
        now = time.time_ns() // 1_000_000  # the test's own real clock, outside the library
        self.samples += 1
        for trigger_id, holder, claimed_at in rows:
            if is_reservation(holder) and claimed_at is not None:
                age = now - int(claimed_at)
                if age > self.oldest_ms:
                    self.oldest_ms, self.oldest = age, (trigger_id, holder)


async def run_children(db: str, runner: str, processes: int, tmp_path: Path) -> dict[str, Any]:
    logs = [tmp_path / f"child-{n}.log" for n in range(processes)]
    sampler = Sampler(db)
    ready: list[int] = []
    stopped: list[int] = []

    async def child(n: int) -> None:
        with logs[n].open("wb") as log:
            process = await trio.lowlevel.open_process(
                [
                    sys.executable,
                    "-m",
                    "tests.postgres.share_child",
                    db,
                    f"host-{n}",
                    runner,
                    str(SERVE_S),
                ],
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=log,
            )
        assert process.stdout is not None
        buffer = b""
        started = False
        with trio.fail_after(SERVE_S + 60):
            while True:
                chunk = await process.stdout.receive_some(4096)
                if not chunk:
                    break
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    message = json.loads(line)
                    if "ready" in message:
                        ready.append(message["ready"])
                        started = True
                    else:
                        stopped.append(message["stopped"])
            code = await process.wait()
        if code != 0 or not started:
            tail = logs[n].read_text(errors="replace")[-4000:]
            raise AssertionError(f"child {n} exited with {code}:\n{tail}")

    async def sample_until(done: trio.Event) -> None:
        while not done.is_set():
            await trio.to_thread.run_sync(sampler.sample)
            await trio.sleep(0.2)

    done = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sample_until, done)
        async with trio.open_nursery() as children:
            for n in range(processes):
                children.start_soon(child, n)
                await trio.sleep(STAGGER_S)
        done.set()
    stale = sum(
        log.read_text(errors="replace").count("A trigger launch lost its reservation")
        for log in logs
    )
    return {
        "from": max(ready),
        "to": min(stopped),
        "sampler": sampler,
        "stale": stale,
        "logs": logs,
    }


_FULL_MATRIX = os.environ.get("TT_RUN_SLOW", "") == "all"
_ONLY_IN_FULL = pytest.mark.skipif(
    not _FULL_MATRIX,
    reason="the full matrix runs with TT_RUN_SLOW=all (nox -s soak); CI runs one case per policy",
)
# Each case serves real processes for about eight seconds. The default run covers every policy
# with three LocalRunner processes on PostgreSQL, the scheduler alone (NoopRunner) once, and
# SQLite once; ``TT_RUN_SLOW=all`` adds the rest of the matrix.
_DEFAULT_CASES = {
    ("postgres", "skip", "local", 3),
    ("postgres", "buffer-one", "local", 3),
    ("postgres", "supersede", "local", 3),
    ("postgres", "supersede", "noop", 2),
    ("sqlite", "supersede", "local", 3),
}


def _case(kind: str, overlap: str, runner: str, processes: int) -> Any:
    marks = [*postgres_marks()] if kind == "postgres" else []
    if (kind, overlap, runner, processes) not in _DEFAULT_CASES:
        marks.append(_ONLY_IN_FULL)
    return pytest.param(kind, overlap, runner, processes, marks=marks)


CASES = [
    _case("postgres", overlap, runner, processes)
    for overlap in ("skip", "buffer-one", "supersede")
    for runner in ("noop", "local")
    for processes in (2, 3)
] + [
    # SQLite serialises whole transactions; three processes per policy show it is the peer.
    _case("sqlite", overlap, "local", 3)
    for overlap in ("skip", "buffer-one", "supersede")
]


@pytest.mark.parametrize(("kind", "overlap", "runner", "processes"), CASES)
async def test_schedulers_on_one_database_launch_every_boundary(
    kind: str, overlap: str, runner: str, processes: int, tmp_path: Path
) -> None:
    with database(kind, tmp_path) as db:
        if kind == "postgres":
            async with open_postgres_trigger_store(db, clock=SystemWallClock()) as pg:
                for index in range(TRIGGERS):
                    await pg.register(every_second(index, overlap))
        else:
            async with open_sqlite_trigger_store(db, clock=SystemWallClock()) as lite:
                for index in range(TRIGGERS):
                    await lite.register(every_second(index, overlap))
        ran = await run_children(db, runner, processes, tmp_path)
        fires = query(db, "SELECT trigger_id, occurrence_at_ms, outcome FROM tt_trigger_fires")

    # The window in which every process served, less a second at each end.
    first = (ran["from"] // 1000 + 2) * 1000
    last = (ran["to"] // 1000 - 1) * 1000
    assert last - first >= 2_000, (ran["from"], ran["to"])
    ledger = {(f[0], f[1]): f[2] for f in fires}
    expected = [(f"s{i:02d}", o) for i in range(TRIGGERS) for o in range(first, last + 1, 1000)]
    missing = [key for key in expected if key not in ledger]
    launched = sum(1 for key in expected if ledger.get(key) in LAUNCHED)
    outcomes: dict[str, int] = {}
    for key in expected:
        outcomes[str(ledger.get(key))] = outcomes.get(str(ledger.get(key)), 0) + 1
    sampler: Sampler = ran["sampler"]
    summary = (
        f"{kind} {overlap} {runner} x{processes}: {launched}/{len(expected)} launched "
        f"{outcomes}, oldest reservation {sampler.oldest_ms} ms {sampler.oldest} "
        f"({sampler.samples} samples), {ran['stale']} stale launches"
    )
    print(summary)
    assert not missing, f"boundaries missing from the ledger: {missing[:10]}; {summary}"
    assert launched >= 0.95 * len(expected), summary
    assert sampler.samples >= 5, summary
    assert sampler.oldest_ms <= RESERVATION_BOUND_MS, summary
    if overlap != "supersede":
        assert ran["stale"] == 0, summary
