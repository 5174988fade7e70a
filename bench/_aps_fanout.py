"""APScheduler 4.0.0a6 side of bench/fanout.py (runs inside bench/.venv-apscheduler).

Usage: python _aps_fanout.py {trio-memory|asyncio-sqlite} N SECONDS WARMUP DBPATH
Prints one JSON object: fires, lateness samples summary, CPU seconds, peak RSS.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from datetime import UTC, datetime
from typing import Any

import anyio
from apscheduler import AsyncScheduler, current_job
from apscheduler.datastores.memory import MemoryDataStore
from apscheduler.triggers.cron import CronTrigger

launches: list[tuple[float, float]] = []  # (launch wall time s, lateness ms)
completions: list[tuple[float, float]] = []  # (job end wall time s, lateness ms)


async def job() -> None:
    info = current_job.get()
    now = datetime.now(UTC)
    fire = info.scheduled_fire_time
    if fire is not None:
        launches.append((now.timestamp(), (now - fire).total_seconds() * 1000))
        await anyio.lowlevel.checkpoint()
        end = datetime.now(UTC)
        completions.append((end.timestamp(), (end - fire).total_seconds() * 1000))


async def run(kind: str, n: int, seconds: float, warmup: float, db_path: str) -> dict[str, Any]:
    if kind == "asyncio-sqlite":
        from apscheduler.datastores.sqlalchemy import SQLAlchemyDataStore

        store: Any = SQLAlchemyDataStore(f"sqlite+aiosqlite:///{db_path}")
    else:
        store = MemoryDataStore()
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
        cpu0 = time.process_time()
        t0 = time.time()
        await anyio.sleep(seconds)
        t1 = time.time()
        cpu1 = time.process_time()
        await scheduler.stop()
    window = [late for at, late in launches if t0 <= at < t1]
    return {
        "fires": len(window),
        "lateness_ms": window,
        "completion_ms": [late for at, late in completions if t0 <= at < t1],
        "window_s": t1 - t0,
        "cpu_s": cpu1 - cpu0,
        "peak_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        "setup_s": setup_s,
    }


def main() -> None:
    kind, n, seconds, warmup, db_path = sys.argv[1:6]
    backend = "trio" if kind == "trio-memory" else "asyncio"
    result = anyio.run(run, kind, int(n), float(seconds), float(warmup), db_path, backend=backend)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
