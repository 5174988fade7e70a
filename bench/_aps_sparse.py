"""APScheduler 4.0.0a6 side of bench/sparse.py (runs inside bench/.venv-apscheduler).

Usage: python _aps_sparse.py {trio-memory|asyncio-sqlite} M SECONDS WARMUP BUDGET DBPATH
Registers 10 every-second schedules and M daily ones laid out by ``sparse.idle_times`` (the
same layout as ours), then prints one JSON object in the shape of ``sparse.run_ours``.
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
from sparse import (
    HOT_COUNT,
    exceeded,
    hot_id,
    idle_id,
    idle_times,
    keep_free_s,
    summarise_hot,
)

hot_launches: list[tuple[float, float]] = []  # (launch wall time s, lateness ms)
idle_launches: list[float] = []


async def hot_job() -> None:
    now = datetime.now(UTC)
    fire = current_job.get().scheduled_fire_time
    if fire is not None:
        hot_launches.append((now.timestamp(), (now - fire).total_seconds() * 1000))


async def idle_job() -> None:
    idle_launches.append(time.time())


async def run(
    kind: str, m: int, seconds: float, warmup: float, budget: float, db_path: str
) -> dict[str, Any]:
    if kind == "asyncio-sqlite":
        from apscheduler.datastores.sqlalchemy import SQLAlchemyDataStore

        store: Any = SQLAlchemyDataStore(f"sqlite+aiosqlite:///{db_path}")
    else:
        store = MemoryDataStore()
    async with AsyncScheduler(store, max_concurrent_jobs=100) as scheduler:
        await scheduler.configure_task("hot", func=hot_job, max_running_jobs=None)
        await scheduler.configure_task("idle", func=idle_job, max_running_jobs=None)
        layout = idle_times(m, time.time(), keep_free_s(budget, warmup, seconds))
        total = m + HOT_COUNT
        registered = 0
        started = time.perf_counter()
        for i in range(HOT_COUNT):
            trigger = CronTrigger(second="*", timezone="UTC")
            await scheduler.add_schedule("hot", trigger, id=hot_id(i))
            registered += 1
        for i, (hour, minute, second) in enumerate(layout):
            trigger = CronTrigger(hour=hour, minute=minute, second=second, timezone="UTC")
            await scheduler.add_schedule("idle", trigger, id=idle_id(i))
            registered += 1
            if time.perf_counter() - started > budget:
                break
        register_s = time.perf_counter() - started
        print("phase: registered", flush=True)
        if register_s > budget:
            return exceeded(register_s, registered, total, "add_schedule")
        await scheduler.start_in_background()
        await anyio.sleep(warmup)
        cpu0 = time.process_time()
        t0 = time.time()
        await anyio.sleep(seconds)
        t1 = time.time()
        cpu1 = time.process_time()
        await scheduler.stop()
    fires, lateness = summarise_hot(hot_launches, t0, t1)
    return {
        "hot_fires": fires,
        "lateness_ms": lateness,
        "idle_fires": len(idle_launches),
        "window_s": t1 - t0,
        "cpu_s": cpu1 - cpu0,
        "register_s": register_s,
        "register_method": "add_schedule",
        "peak_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
    }


def main() -> None:
    kind, m, seconds, warmup, budget, db_path = sys.argv[1:7]
    backend = "trio" if kind == "trio-memory" else "asyncio"
    result = anyio.run(
        run, kind, int(m), float(seconds), float(warmup), float(budget), db_path, backend=backend
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
