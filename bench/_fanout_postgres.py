"""The PostgreSQL half of ``bench/fanout.py``: trio-triggers and APScheduler 4 on one server.

Both systems run N every-second triggers against the server named by ``TT_POSTGRES_DSN`` (a
``postgresql://`` URI), each in a fresh schema of its own, in a fresh process, in the same run:

* ``trio-triggers postgres``: ``open_postgres_trigger_store`` (pool and scheduler ``concurrency``
  of 16), ``NoopRunner`` whose ``start`` records the lateness, ``serve`` with wake-on-deadline.
  Every fire is three transactions (claim, launched, completed), each with its row lock;
* ``APScheduler asyncio/postgres``: APScheduler 4.0.0a6 ``AsyncScheduler`` with
  ``SQLAlchemyDataStore`` over asyncpg on asyncio (its documented PostgreSQL setup).

Run it through ``bench/fanout.py`` (which prints these rows beside the SQLite ones when
``TT_POSTGRES_DSN`` is set), or alone: ``.venv/bin/python bench/_fanout_postgres.py [--n 1000]``.
The goal: on 1 000 every-second schedules, at least 5x APScheduler's fires per second.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import subprocess
import sys
import time
import urllib.parse
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterator

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

CONCURRENCY = 16
PG_MAX_N = 1000
"""Larger N are left out on PostgreSQL: the server shares this machine's cores with both clients."""
APS_POSTGRES_EXTRA = ["asyncpg"]


@contextlib.contextmanager
def fresh_schema(dsn: str) -> Iterator[str]:
    """A new empty schema on ``dsn``'s server (dropped afterwards); yields its name."""
    import psycopg

    schema = f"tt_fanout_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"'.encode())
    try:
        yield schema
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE'.encode())


def with_search_path(dsn: str, schema: str) -> str:
    parts = urllib.parse.urlsplit(dsn)
    query = [(k, v) for k, v in urllib.parse.parse_qsl(parts.query) if k != "options"]
    query.append(("options", f"-c search_path={schema}"))
    encoded = urllib.parse.urlencode(query, quote_via=urllib.parse.quote)
    return urllib.parse.urlunsplit(parts._replace(query=encoded))


# --------------------------------------------------------------------------- our worker


def run_ours_postgres(n: int, seconds: float, warmup: float, dsn: str) -> dict[str, Any]:
    import trio

    from bench.fanout import _occurrence_of
    from trio_triggers._clock import SystemWallClock
    from trio_triggers._declarations import Trigger
    from trio_triggers._scheduler import NoopRunner, SchedulerOptions, StartRequest, open_scheduler
    from trio_triggers.postgres import open_postgres_trigger_store

    clock = SystemWallClock()
    launches: list[tuple[int, int]] = []  # (launch wall ms, lateness ms)

    async def start(request: StartRequest) -> str:
        now = clock.now_ms()
        launches.append((now, now - _occurrence_of(request.idempotency_key)))
        await trio.lowlevel.checkpoint()
        return request.idempotency_key

    async def main() -> dict[str, Any]:
        setup_started = time.perf_counter()
        async with open_postgres_trigger_store(dsn, clock=clock, pool_size=CONCURRENCY) as store:
            for i in range(n):
                await store.register(
                    Trigger(
                        id=f"t{i:05d}",
                        flow_id="noop",
                        input=None,
                        cron="* * * * * *",
                        timezone="UTC",
                    )
                )
            setup_s = time.perf_counter() - setup_started
            options = SchedulerOptions(
                poll_interval=1, run_poll_interval=1, concurrency=CONCURRENCY
            )
            async with (
                open_scheduler(store, NoopRunner(start=start), options=options, clock=clock) as s,
                trio.open_nursery() as nursery,
            ):
                await nursery.start(s.serve)
                await trio.sleep(warmup)
                cpu0 = time.process_time()
                t0 = clock.now_ms()
                await trio.sleep(seconds)
                t1 = clock.now_ms()
                cpu1 = time.process_time()
                nursery.cancel_scope.cancel()
        window = [late for at, late in launches if t0 <= at < t1]
        return {
            "fires": len(window),
            "lateness_ms": window,
            "window_s": (t1 - t0) / 1000,
            "cpu_s": cpu1 - cpu0,
            "peak_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
            "setup_s": setup_s,
        }

    result: dict[str, Any] = trio.run(main)
    return result


# --------------------------------------------------------------------------- APScheduler worker

_APS_WORKER = r"""
import json, resource, sys, time
from datetime import datetime, timezone
import anyio
from apscheduler import AsyncScheduler, current_job
from apscheduler.datastores.sqlalchemy import SQLAlchemyDataStore
from apscheduler.triggers.cron import CronTrigger

launches = []

async def job():
    info = current_job.get()
    now = datetime.now(timezone.utc)
    if info.scheduled_fire_time is not None:
        launches.append((now.timestamp(), (now - info.scheduled_fire_time).total_seconds() * 1000))

async def run(url, schema, n, seconds, warmup):
    store = SQLAlchemyDataStore(url, schema=schema)
    setup_started = time.perf_counter()
    async with AsyncScheduler(store, max_concurrent_jobs=max(100, n)) as scheduler:
        await scheduler.configure_task("job", func=job, max_running_jobs=None)
        for i in range(n):
            await scheduler.add_schedule(
                "job", CronTrigger(second="*", timezone="UTC"), id=f"t{i:05d}"
            )
        setup_s = time.perf_counter() - setup_started
        await scheduler.start_in_background()
        await anyio.sleep(warmup)
        cpu0 = time.process_time(); t0 = time.time()
        await anyio.sleep(seconds)
        t1 = time.time(); cpu1 = time.process_time()
        await scheduler.stop()
    window = [late for at, late in launches if t0 <= at < t1]
    return {"fires": len(window), "lateness_ms": window, "window_s": t1 - t0,
            "cpu_s": cpu1 - cpu0, "setup_s": setup_s,
            "peak_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}

url, schema, n, seconds, warmup = sys.argv[1:6]
print(json.dumps(anyio.run(run, url, schema, int(n), float(seconds), float(warmup),
                           backend="asyncio")))
"""


def aps_url(dsn: str) -> str:
    """The same server as an SQLAlchemy asyncpg URL (no libpq ``options``)."""
    parts = urllib.parse.urlsplit(dsn)
    return urllib.parse.urlunsplit(parts._replace(scheme="postgresql+asyncpg", query=""))


def ensure_asyncpg(aps_python: Path) -> None:
    check = subprocess.run([str(aps_python), "-c", "import asyncpg"], capture_output=True)
    if check.returncode != 0:
        subprocess.run(
            [str(aps_python), "-m", "pip", "install", "--quiet", *APS_POSTGRES_EXTRA], check=True
        )


# --------------------------------------------------------------------------- orchestration


def _last_json(completed: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    if completed.returncode != 0:
        return {"error": completed.stderr.strip().splitlines()[-1:] or ["failed"]}
    data: dict[str, Any] = json.loads(completed.stdout.strip().splitlines()[-1])
    return data


def postgres_rows(
    counts: list[int], seconds: float, warmup: float, aps_python: Path | None
) -> list[dict[str, Any]]:
    """Measure both systems for every N on ``TT_POSTGRES_DSN``; ``[]`` when it is not set."""
    from bench.fanout import summarise

    dsn = os.environ.get("TT_POSTGRES_DSN", "").strip()
    if not dsn:
        return []
    rows: list[dict[str, Any]] = []
    if aps_python is not None:
        ensure_asyncpg(aps_python)
    for n in [n for n in counts if n <= PG_MAX_N]:
        print(f"measuring trio-triggers postgres N={n} ...", flush=True)
        with fresh_schema(dsn) as schema:
            command = [sys.executable, str(Path(__file__).resolve()), "--worker", "--n", str(n)]
            command += ["--seconds", str(seconds), "--warmup", str(warmup)]
            env = dict(os.environ, FANOUT_DSN=with_search_path(dsn, schema))
            completed = subprocess.run(command, capture_output=True, text=True, env=env)
            rows.append(summarise("trio-triggers postgres", n, _last_json(completed)))
        print(f"measuring trio-triggers LocalRunner postgres N={n} ...", flush=True)
        with fresh_schema(dsn) as schema:
            # ``open_triggers`` on the DSN: both stores on PostgreSQL, the LocalRunner.
            command = [sys.executable, str(Path(__file__).resolve()), "--worker-local"]
            command += ["--n", str(n), "--seconds", str(seconds), "--warmup", str(warmup)]
            env = dict(os.environ, FANOUT_DSN=with_search_path(dsn, schema))
            completed = subprocess.run(command, capture_output=True, text=True, env=env)
            rows.append(summarise("trio-triggers LocalRunner pg", n, _last_json(completed)))
        if aps_python is None:
            continue
        print(f"measuring APScheduler asyncio/postgres N={n} ...", flush=True)
        with fresh_schema(dsn) as schema:
            command = [str(aps_python), "-c", _APS_WORKER, aps_url(dsn), schema, str(n)]
            command += [str(seconds), str(warmup)]
            completed = subprocess.run(command, capture_output=True, text=True)
            rows.append(summarise("APScheduler asyncio/postgres", n, _last_json(completed)))
    return rows


def compare_postgres(rows: list[dict[str, Any]]) -> None:
    ours = {r["n"]: r for r in rows if r["system"] == "trio-triggers postgres" and "error" not in r}
    theirs = {
        r["n"]: r
        for r in rows
        if r["system"] == "APScheduler asyncio/postgres" and "error" not in r
    }
    print()
    for n in sorted(set(ours) & set(theirs)):
        ratio = ours[n]["fires_per_s"] / max(theirs[n]["fires_per_s"], 1e-9)
        print(
            f"postgres N={n:>5}: trio-triggers {ours[n]['fires_per_s']:.0f} fires/s, "
            f"APScheduler {theirs[n]['fires_per_s']:.0f} fires/s, ratio {ratio:.2f}"
        )
        cpu_ratio = theirs[n]["cpu_per_1000"] / max(ours[n]["cpu_per_1000"], 1e-9)
        print(f"  CPU seconds per 1000 fires: APScheduler / trio-triggers = {cpu_ratio:.1f}")
        capped = ours[n]["fires_per_s"] >= 0.99 * n
        if capped:
            # Every occurrence offered was launched: N itself bounds the ratio (N / theirs).
            print(
                f"  trio-triggers kept up with all {n} fires/s, so {ratio:.2f} is the most this "
                f"workload can show (a lower bound of the throughput ratio)"
            )
        if n == 1000:
            verdict = "met" if ratio >= 5 else "NOT met"
            bound = " (bounded by N: ours kept up)" if capped and ratio < 5 else ""
            print(f"goal (N=1000 on PostgreSQL >= 5x APScheduler): {verdict}{bound}")


def main() -> None:
    from bench.fanout import ensure_apscheduler, print_table

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--n", type=int, nargs="*", default=[1000])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--no-apscheduler", action="store_true")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--worker-local", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker_local:
        from bench.fanout import run_local

        dsn = os.environ["FANOUT_DSN"]
        print(json.dumps(run_local(args.n[0], args.seconds, args.warmup, dsn)))
        return
    if args.worker:
        dsn = os.environ["FANOUT_DSN"]
        print(json.dumps(run_ours_postgres(args.n[0], args.seconds, args.warmup, dsn)))
        return
    aps_python = None if args.no_apscheduler else ensure_apscheduler()
    rows = postgres_rows(args.n, args.seconds, args.warmup, aps_python)
    if not rows:
        print("TT_POSTGRES_DSN is not set: nothing to measure")
        return
    print()
    print_table(rows)
    compare_postgres(rows)


if __name__ == "__main__":
    main()
