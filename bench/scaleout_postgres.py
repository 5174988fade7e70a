#!/usr/bin/env python
"""Scale-out on PostgreSQL: 1, 2 and 3 scheduler processes sharing N every-second triggers.

For each process count K (1, 2, 3 by default) a fresh schema on the server named by
``TT_POSTGRES_DSN`` gets N triggers firing every second (``* * * * * *``, ``overlap="skip"``),
registered with ``register_many``; then K processes are started side by side, each serving
``open_scheduler`` on ``open_postgres_trigger_store`` with a ``NoopRunner`` (run id = idempotency
key, inspection answers completed) for a warm-up and a measured window. Each process counts the
launches whose occurrence falls in the window. The script prints, per K, each process's share of
the launches, the total fires per second against the N expected, and the CPU each process used.

Goal (the scale issue): with three processes no process takes more than 50% of the claims, and
the total keeps up with N.

    TT_POSTGRES_DSN=postgresql://... .venv/bin/python bench/scaleout_postgres.py [--n 5000]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from _fanout_postgres import fresh_schema, with_search_path  # noqa: E402  (bench/ on the path)


def _occurrence_of(idempotency_key: str) -> int:
    iso = idempotency_key.split(":", 1)[1]
    return round(datetime.datetime.fromisoformat(iso).timestamp() * 1000)


def worker(dsn: str, start_at: float, warmup: float, seconds: float, host: str) -> dict[str, Any]:
    import trio

    import trio_triggers as tt
    from trio_triggers.postgres import open_postgres_trigger_store

    window = (int((start_at + warmup) * 1000), int((start_at + warmup + seconds) * 1000))
    launched: list[int] = []

    async def start(request: tt.StartRequest) -> str:
        launched.append(_occurrence_of(request.idempotency_key))
        await trio.lowlevel.checkpoint()
        return request.idempotency_key

    async def main() -> dict[str, Any]:
        clock = tt.SystemWallClock()
        options = tt.SchedulerOptions(
            host=host, poll_interval=1, run_poll_interval=1, concurrency=16
        )
        async with open_postgres_trigger_store(dsn, clock=clock, pool_size=8) as store:
            await trio.sleep(max(0.0, start_at - time.time()))
            async with (
                tt.open_scheduler(
                    store, tt.NoopRunner(start=start), options=options, clock=clock
                ) as scheduler,
                trio.open_nursery() as nursery,
            ):
                await nursery.start(scheduler.serve)
                await trio.sleep(max(0.0, start_at + warmup - time.time()))
                cpu = time.process_time()
                await trio.sleep(seconds + 1.5)
                cpu = time.process_time() - cpu
                nursery.cancel_scope.cancel()
        inside = sum(1 for o in launched if window[0] <= o < window[1])
        return {"host": host, "launches": inside, "cpu_s": round(cpu, 2)}

    return trio.run(main)


def run(dsn: str, n: int, processes: int, warmup: float, seconds: float) -> dict[str, Any]:
    import trio

    import trio_triggers as tt
    from trio_triggers.postgres import open_postgres_trigger_store

    with fresh_schema(dsn) as schema:
        scoped = with_search_path(dsn, schema)

        async def register() -> None:
            async with open_postgres_trigger_store(scoped) as store:
                await store.register_many(
                    [
                        tt.Trigger(
                            id=f"t{i:05d}",
                            flow_id="noop",
                            input=None,
                            cron="* * * * * *",
                            timezone="UTC",
                        )
                        for i in range(n)
                    ]
                )

        trio.run(register)
        start_at = time.time() + 3.0  # every process imports and opens its pool first
        children = [
            subprocess.Popen(
                [
                    sys.executable,
                    __file__,
                    "--worker",
                    scoped,
                    str(start_at),
                    str(warmup),
                    str(seconds),
                    f"proc-{k}",
                ],
                stdout=subprocess.PIPE,
                text=True,
            )
            for k in range(processes)
        ]
        results = []
        for child in children:
            out, _ = child.communicate(timeout=warmup + seconds + 120)
            results.append(json.loads(out.strip().splitlines()[-1]))
    total = sum(r["launches"] for r in results)
    return {
        "processes": processes,
        "n": n,
        "fires_per_s": round(total / seconds, 1),
        "shares": [round(r["launches"] / total, 3) if total else 0.0 for r in results],
        "cpu_s": [r["cpu_s"] for r in results],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--n", type=int, default=5000)
    parser.add_argument("--processes", type=int, nargs="*", default=[1, 2, 3])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--worker", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        dsn, start_at, warmup, seconds, host = args.worker
        result = worker(dsn, float(start_at), float(warmup), float(seconds), host)
        print(json.dumps(result), flush=True)
        return
    dsn = os.environ.get("TT_POSTGRES_DSN", "")
    if not dsn.startswith("postgresql://"):
        raise SystemExit("set TT_POSTGRES_DSN to a postgresql:// URI")
    print(f"scale-out on PostgreSQL: {args.n} every-second triggers, {args.seconds:g} s window")
    print(f"{'processes':>9}  {'fires/s':>9}  {'expected':>8}  shares of the launches (CPU s)")
    for processes in args.processes:
        row = run(dsn, args.n, processes, args.warmup, args.seconds)
        shares = ", ".join(
            f"{share:.0%} ({cpu:g})" for share, cpu in zip(row["shares"], row["cpu_s"], strict=True)
        )
        print(f"{processes:>9}  {row['fires_per_s']:>9}  {args.n:>8}  {shares}")
    print("goal: with 3 processes no share above 50%, total keeping up with N")


if __name__ == "__main__":
    main()
