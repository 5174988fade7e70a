#!/usr/bin/env python
"""Fan-out benchmark: N triggers firing every second, trio-triggers vs APScheduler 4.0.0a6.

For each N (100, 1 000, 5 000 by default) and each system, a fresh process schedules N
every-second triggers (6-field cron ``* * * * * *``), runs them on the real clock for a warm-up
and then a measured window (20 s by default), and reports:

* fires per second achieved vs expected (N);
* dispatch lateness p50 / p99 / max = the moment the job is launched minus its occurrence;
* CPU seconds per 1 000 fires, and the process's peak RSS.

Systems measured in the same run:

* ``trio-triggers``: SQLite store (WAL file, inline executor), ``NoopRunner`` whose ``start``
  records the lateness, ``serve`` with wake-on-deadline;
* ``trio-triggers LocalRunner``: ``open_triggers`` with its defaults (SQLite for both stores,
  the LocalRunner) and flows that return at once; its ``done`` columns are the lateness from
  occurrence to the ledger's ``completed``;
* ``APScheduler trio/memory``: APScheduler 4.0.0a6 ``AsyncScheduler`` on Trio (AnyIO) with the
  in-memory data store;
* ``APScheduler asyncio/sqlite``: the same with ``SQLAlchemyDataStore`` over aiosqlite on asyncio.

APScheduler is installed by this script into ``bench/.venv-apscheduler`` (pip), so the project's
own environment never sees it. ``--quick`` runs N = 100 for 3 s as a smoke test.

    .venv/bin/python bench/fanout.py            # full run, a few minutes
    .venv/bin/python bench/fanout.py --quick    # smoke
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import venv
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
APS_VENV = HERE / ".venv-apscheduler"
APS_REQUIREMENTS = ["apscheduler==4.0.0a6", "sqlalchemy[asyncio]", "aiosqlite", "trio"]


# --------------------------------------------------------------------------- our worker


def _occurrence_of(idempotency_key: str) -> int:
    import datetime

    # ``fromisoformat`` (a C parser) rather than ``strptime``: the measurement runs inside the
    # runner's start, so its cost would be counted as our lateness (APScheduler's job gets its
    # scheduled time as a datetime and parses nothing).
    iso = idempotency_key.split(":", 1)[1]
    when = datetime.datetime.fromisoformat(iso)  # "...Z" is UTC (Python 3.11+)
    return round(when.timestamp() * 1000)


def run_ours(n: int, seconds: float, warmup: float, db_path: str) -> dict[str, Any]:
    import trio

    from trio_triggers._clock import SystemWallClock
    from trio_triggers._declarations import Trigger
    from trio_triggers._scheduler import NoopRunner, SchedulerOptions, StartRequest, open_scheduler
    from trio_triggers._store import open_sqlite_trigger_store

    clock = SystemWallClock()
    launches: list[tuple[int, int]] = []  # (launch wall ms, lateness ms)

    async def start(request: StartRequest) -> str:
        now = clock.now_ms()
        launches.append((now, now - _occurrence_of(request.idempotency_key)))
        await trio.lowlevel.checkpoint()
        return request.idempotency_key

    async def main() -> dict[str, Any]:
        setup_started = time.perf_counter()
        async with open_sqlite_trigger_store(db_path, clock=clock) as store:
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
            options = SchedulerOptions(poll_interval=1, run_poll_interval=1)
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


def run_local(n: int, seconds: float, warmup: float, db_path: str) -> dict[str, Any]:
    """``open_triggers`` with its defaults: SQLite for both stores, the LocalRunner, flows that
    return at once. Lateness is measured twice: at the flow's start (launch) and when the
    ledger records the boundary ``completed`` (completion)."""
    import trio

    import trio_triggers
    from trio_triggers import RunContext
    from trio_triggers._clock import SystemWallClock

    clock = SystemWallClock()
    launches: list[tuple[int, int]] = []  # (flow start wall ms, lateness ms)
    completions: list[tuple[int, int]] = []  # (ledger "completed" wall ms, lateness ms)

    async def main() -> dict[str, Any]:
        setup_started = time.perf_counter()
        async with trio_triggers.open_triggers(db_path, clock=clock, concurrency=max(4, n)) as app:

            @app.flow
            async def noop(input: Any, run: RunContext) -> None:
                now = clock.now_ms()
                launches.append((now, now - _occurrence_of(run.idempotency_key or "")))

            store = app.store
            record = store.record_result

            async def recorded(result: Any) -> None:
                await record(result)
                if result.outcome == "completed":
                    now = clock.now_ms()
                    completions.append((now, now - result.occurrence))

            # The bench's own probe on the ledger write (the store object is the app's).
            store.record_result = recorded  # type: ignore[method-assign]
            for i in range(n):
                await app.schedule(f"t{i:05d}", noop, cron="* * * * * *", timezone="UTC")
            setup_s = time.perf_counter() - setup_started
            async with trio.open_nursery() as nursery:
                await nursery.start(app.serve)
                await trio.sleep(warmup)
                cpu0 = time.process_time()
                t0 = clock.now_ms()
                await trio.sleep(seconds)
                t1 = clock.now_ms()
                cpu1 = time.process_time()
                nursery.cancel_scope.cancel()
        return {
            "fires": sum(1 for at, _ in launches if t0 <= at < t1),
            "lateness_ms": [late for at, late in launches if t0 <= at < t1],
            "completion_ms": [late for at, late in completions if t0 <= at < t1],
            "window_s": (t1 - t0) / 1000,
            "cpu_s": cpu1 - cpu0,
            "peak_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
            "setup_s": setup_s,
        }

    result: dict[str, Any] = trio.run(main)
    return result


# --------------------------------------------------------------------------- orchestration


def ensure_apscheduler() -> Path:
    python = APS_VENV / "bin" / "python"
    if not python.exists():
        print(f"creating {APS_VENV} and installing {' '.join(APS_REQUIREMENTS)} ...", flush=True)
        venv.create(APS_VENV, with_pip=True)
    check = subprocess.run(
        [str(python), "-c", "import apscheduler, aiosqlite, trio, sqlalchemy, greenlet"],
        capture_output=True,
    )
    if check.returncode != 0:
        subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", *APS_REQUIREMENTS], check=True
        )
    return python


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def measure(command: list[str]) -> dict[str, Any]:
    completed = subprocess.run(command, capture_output=True, text=True, check=False)
    if completed.returncode != 0:
        return {"error": completed.stderr.strip().splitlines()[-1:] or ["failed"]}
    line = completed.stdout.strip().splitlines()[-1]
    data: dict[str, Any] = json.loads(line)
    return data


def summarise(name: str, n: int, data: dict[str, Any]) -> dict[str, Any]:
    if "error" in data:
        return {"system": name, "n": n, "error": " ".join(data["error"])}
    lateness = [float(x) for x in data["lateness_ms"]]
    fires = int(data["fires"])
    window = float(data["window_s"])
    return {
        "system": name,
        "n": n,
        "fires_per_s": fires / window if window else 0.0,
        "expected_per_s": float(n),
        "p50": percentile(lateness, 0.50),
        "p99": percentile(lateness, 0.99),
        "max": max(lateness) if lateness else float("nan"),
        "cpu_per_1000": 1000 * float(data["cpu_s"]) / fires if fires else float("nan"),
        "rss_mb": int(data["peak_rss_kb"]) / 1024,
        "setup_s": float(data["setup_s"]),
        "done_p50": percentile([float(x) for x in data.get("completion_ms", [])], 0.50),
        "done_p99": percentile([float(x) for x in data.get("completion_ms", [])], 0.99),
    }


def print_table(rows: list[dict[str, Any]]) -> None:
    header = (
        f"{'system':<28} {'N':>6} {'fires/s':>9} {'expected':>9} {'ratio':>6} "
        f"{'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'CPU s/1k':>9} {'RSS MB':>7} "
        f"{'done p50':>8} {'done p99':>8}"
    )
    print(header)
    print("-" * len(header))
    for row in rows:
        if "error" in row:
            print(f"{row['system']:<28} {row['n']:>6} error: {row['error']}")
            continue
        ratio = row["fires_per_s"] / row["expected_per_s"]
        print(
            f"{row['system']:<28} {row['n']:>6} {row['fires_per_s']:>9.1f} "
            f"{row['expected_per_s']:>9.0f} {ratio:>6.2f} {row['p50']:>8.1f} "
            f"{row['p99']:>8.1f} {row['max']:>8.1f} {row['cpu_per_1000']:>9.3f} "
            f"{row['rss_mb']:>7.1f} {row['done_p50']:>8.1f} {row['done_p99']:>8.1f}"
        )


def compare(rows: list[dict[str, Any]]) -> None:
    def by_n(system: str) -> dict[int, dict[str, Any]]:
        return {r["n"]: r for r in rows if r["system"] == system and "error" not in r}

    ours, local = by_n("trio-triggers sqlite"), by_n("trio-triggers LocalRunner")
    print()
    for row in rows:
        if row["system"].startswith("trio-triggers") or "error" in row:
            continue
        n = row["n"]
        if n in ours:
            mine = ours[n]
            print(
                f"N={n:>5}: vs {row['system']:<26} fires/s ratio (ours/theirs) "
                f"{mine['fires_per_s'] / max(row['fires_per_s'], 1e-9):.2f}, p99 ratio "
                f"{mine['p99'] / max(row['p99'], 1e-9):.2f}, CPU/1k ratio "
                f"{mine['cpu_per_1000'] / max(row['cpu_per_1000'], 1e-9):.2f}"
            )
        if n in local:
            mine = local[n]
            print(
                f"N={n:>5}: LocalRunner vs {row['system']:<14} completion p99 ratio "
                f"(ours/theirs) {mine['done_p99'] / max(row['done_p99'], 1e-9):.2f}, "
                f"launch p99 ratio {mine['p99'] / max(row['p99'], 1e-9):.2f}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="N=100 for 3 s (smoke)")
    parser.add_argument("--n", type=int, nargs="*", default=None, help="trigger counts")
    parser.add_argument("--seconds", type=float, default=None, help="measured window")
    parser.add_argument("--warmup", type=float, default=None, help="warm-up before the window")
    parser.add_argument("--no-apscheduler", action="store_true", help="measure only ours")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()

    counts = args.n or ([100] if args.quick else [100, 1000, 5000])
    seconds = args.seconds or (3.0 if args.quick else 20.0)
    warmup = args.warmup or (2.5 if args.quick else 3.0)

    if args.worker in ("ours", "local"):
        n, db_path = counts[0], os.environ["FANOUT_DB"]
        worker = run_ours if args.worker == "ours" else run_local
        print(json.dumps(worker(n, seconds, warmup, db_path)))
        return

    aps_python = None if args.no_apscheduler else ensure_apscheduler()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="fanout-") as tmp:
        for n in counts:
            db = str(Path(tmp) / f"ours-{n}.sqlite")
            cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "ours", "--n"]
            cmd += [str(n), "--seconds", str(seconds), "--warmup", str(warmup)]
            print(f"measuring trio-triggers sqlite N={n} ...", flush=True)
            data = measure_env(cmd, {"FANOUT_DB": db})
            rows.append(summarise("trio-triggers sqlite", n, data))
            print(f"measuring trio-triggers LocalRunner N={n} ...", flush=True)
            local_cmd = [*cmd]
            local_cmd[local_cmd.index("ours")] = "local"
            local_db = str(Path(tmp) / f"local-{n}.sqlite")
            data = measure_env(local_cmd, {"FANOUT_DB": local_db})
            rows.append(summarise("trio-triggers LocalRunner", n, data))
            if aps_python is None:
                continue
            for kind, label in (
                ("trio-memory", "APScheduler trio/memory"),
                ("asyncio-sqlite", "APScheduler asyncio/sqlite"),
            ):
                print(f"measuring {label} N={n} ...", flush=True)
                aps_db = str(Path(tmp) / f"aps-{kind}-{n}.sqlite")
                aps_cmd = [str(aps_python), str(HERE / "_aps_fanout.py"), kind, str(n)]
                aps_cmd += [str(seconds), str(warmup), aps_db]
                rows.append(summarise(label, n, measure(aps_cmd)))
    print()
    print(f"every-second triggers, {seconds:g} s window after {warmup:g} s warm-up; lateness =")
    print("launch time - occurrence (for APScheduler and the LocalRunner: the job's or flow's")
    print("start); done = completion time - occurrence (the ledger's 'completed' for the")
    print("LocalRunner, the job's end for APScheduler); CPU s/1k = CPU seconds per 1000 fires")
    print()
    print_table(rows)
    compare(rows)
    ok = [r for r in rows if r["system"] == "trio-triggers sqlite" and r["n"] == 1000]
    if ok and "error" not in ok[0]:
        keeps_up = ok[0]["fires_per_s"] >= 0.99 * 1000 and ok[0]["p99"] < 100
        print(
            f"\ngoal (N=1000 on SQLite keeps up, p99 < 100 ms): {'met' if keeps_up else 'NOT met'}"
        )
    local = [r for r in rows if r["system"] == "trio-triggers LocalRunner" and r["n"] == 100]
    if local and "error" not in local[0]:
        within = local[0]["done_p99"] <= 2 * local[0]["p99"]
        print(
            f"goal (N=100 LocalRunner: completion p99 within 2x launch p99): "
            f"{'met' if within else 'NOT met'} ({local[0]['done_p99']:.1f} ms vs "
            f"{local[0]['p99']:.1f} ms)"
        )
    postgres_section(counts, seconds, warmup, aps_python)


def postgres_section(
    counts: list[int], seconds: float, warmup: float, aps_python: Path | None
) -> None:
    """PostgreSQL rows (ours and APScheduler's SQLAlchemy store) when TT_POSTGRES_DSN is set."""
    from _fanout_postgres import compare_postgres, postgres_rows

    pg_rows = postgres_rows(counts, seconds, warmup, aps_python)
    if pg_rows:
        print()
        print_table(pg_rows)
        compare_postgres(pg_rows)


def measure_env(command: list[str], extra_env: dict[str, str]) -> dict[str, Any]:
    env = dict(os.environ, **extra_env)
    completed = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if completed.returncode != 0:
        return {"error": completed.stderr.strip().splitlines()[-1:] or ["failed"]}
    data: dict[str, Any] = json.loads(completed.stdout.strip().splitlines()[-1])
    return data


if __name__ == "__main__":
    main()
