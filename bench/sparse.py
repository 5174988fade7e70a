#!/usr/bin/env python
"""Sparse benchmark: M idle daily triggers plus 10 hot ones, trio-triggers vs APScheduler 4.0.0a6.

Workload "sparse": M idle triggers, each firing once a day (6-field cron ``S M H * * *``) at a
time of day derived from its index so that the M times are spread evenly over the 24 hours,
plus 10 "hot" triggers firing every second (``* * * * * *``). The idle times are laid out
relative to the worker's own wall clock so that none of them is due between the start of
registration and the end of the run (the registration budget, the warm-up, the window and a
margin are kept free); a fire of an idle trigger is counted and reported as an anomaly.

For each M (1 000, 10 000, 100 000 by default) and each system, a fresh process registers the
M + 10 triggers, runs on the real clock for a warm-up (2 s) and a measured window (10 s), and
reports:

* hot fires per second achieved (out of 10);
* dispatch lateness p50 / p99 of the hot fires = the moment the runner's start (APScheduler:
  the job function) is called minus the occurrence;
* CPU seconds per served second = process CPU time over the window / the window's length;
* registration time of the M + 10 triggers and the rate it makes (registrations per second),
  for ours also the time of registering the same declarations again (nothing changed, so
  nothing is written), and the process's peak RSS;
* afterwards, ``trio-triggers run --config`` on a config of the largest M triggers
  (``--config-sync N`` to choose): the time to its ``-- serving`` line on the first start and
  on a restart with nothing changed.

Systems measured in the same run:

* ``trio-triggers``: SQLite trigger store on a fresh temp file, through the public API
  (``open_sqlite_trigger_store``, ``open_scheduler``, ``NoopRunner(start=...)``, ``serve``);
  triggers are registered one by one with ``store.register``, or in one call with
  ``store.register_many`` when the store has it;
* ``APScheduler trio/memory``: APScheduler 4.0.0a6 ``AsyncScheduler`` on Trio with the
  in-memory data store;
* ``APScheduler asyncio/sqlite``: the same with ``SQLAlchemyDataStore`` over aiosqlite on asyncio.

Each system gets a registration budget per M (``--budget``, 120 s); when it is exceeded the
worker stops and the row says "registration exceeded budget" instead of measuring. Every worker
also runs under a subprocess timeout. APScheduler is installed by this script into
``bench/.venv-apscheduler`` (pip), so the project's own environment never sees it.

    .venv/bin/python bench/sparse.py                       # full run, several minutes
    .venv/bin/python bench/sparse.py --quick               # smoke: M=1000, 3 s, ours + APS memory
    .venv/bin/python bench/sparse.py --ours-only --m 100000 --seconds 5
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
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

HOT_COUNT = 10
DAY_S = 86_400
# Seconds kept free of idle occurrences after the worker starts, beyond the registration
# budget, the warm-up and the window (process start-up, scheduler start, shutdown).
IDLE_MARGIN_S = 120
# Extra seconds a worker may take beyond budget + warm-up + window before it is killed.
TIMEOUT_SLACK_S = 180

OURS = "trio-triggers sqlite"
APS_MEMORY = "APScheduler trio/memory"
APS_SQLITE = "APScheduler asyncio/sqlite"
APS_KINDS = {APS_MEMORY: "trio-memory", APS_SQLITE: "asyncio-sqlite"}
SHORT = {OURS: "ours", APS_MEMORY: "APS mem", APS_SQLITE: "APS sqlite"}


# --------------------------------------------------------------------------- shared layout


def idle_times(m: int, now_s: float, keep_free_s: float) -> list[tuple[int, int, int]]:
    """(hour, minute, second) UTC of each of the M idle triggers.

    The times are spread evenly over the part of the day that lies outside
    ``[now_s, now_s + keep_free_s]`` (in seconds of the UTC day), so no idle trigger is due
    while the benchmark runs. This module imports only the standard library, so the
    APScheduler worker imports this function too and both systems get the same layout.
    """
    free_from = math.ceil(keep_free_s) + 1
    span = DAY_S - free_from
    if span <= 0:
        raise ValueError(f"cannot keep {keep_free_s:g} s free of idle occurrences in a day")
    base = math.floor(now_s) % DAY_S
    times: list[tuple[int, int, int]] = []
    for i in range(m):
        of_day = (base + free_from + (i * span) // m) % DAY_S
        times.append((of_day // 3600, (of_day // 60) % 60, of_day % 60))
    return times


def keep_free_s(budget: float, warmup: float, seconds: float) -> float:
    return budget + warmup + seconds + IDLE_MARGIN_S


def idle_id(i: int) -> str:
    return f"idle{i:06d}"


def hot_id(i: int) -> str:
    return f"hot{i:02d}"


def summarise_hot(hot: list[tuple[float, float]], t0: float, t1: float) -> tuple[int, list[float]]:
    """Hot fires whose launch falls in [t0, t1): the count and their lateness in ms."""
    window = [late for at, late in hot if t0 <= at < t1]
    return len(window), window


# --------------------------------------------------------------------------- our worker


def _occurrence_s(idempotency_key: str) -> float:
    # The key is "<trigger id>:<ISO occurrence>", e.g. "hot03:2025-01-01T00:00:07Z". It is parsed
    # after the run, not inside the runner's start, so the parse is not counted as lateness.
    iso = idempotency_key.split(":", 1)[1]
    return datetime.datetime.fromisoformat(iso).timestamp()  # "...Z" is UTC (3.11+)


def run_ours(m: int, seconds: float, warmup: float, budget: float, db_path: str) -> dict[str, Any]:
    import trio

    import trio_triggers

    clock = trio_triggers.SystemWallClock()
    hot_starts: list[tuple[float, str]] = []  # (wall time s of the start call, key)
    idle_starts: list[float] = []

    async def start(request: trio_triggers.StartRequest) -> str:
        now = time.time()
        if request.flow_id == "hot":
            hot_starts.append((now, request.idempotency_key))
        else:
            idle_starts.append(now)
        await trio.lowlevel.checkpoint()
        return request.idempotency_key

    def triggers() -> list[trio_triggers.Trigger]:
        made = [
            trio_triggers.Trigger(
                id=hot_id(i), flow_id="hot", input=None, cron="* * * * * *", timezone="UTC"
            )
            for i in range(HOT_COUNT)
        ]
        layout = idle_times(m, time.time(), keep_free_s(budget, warmup, seconds))
        for i, (hour, minute, second) in enumerate(layout):
            made.append(
                trio_triggers.Trigger(
                    id=idle_id(i),
                    flow_id="idle",
                    input=None,
                    cron=f"{second} {minute} {hour} * * *",
                    timezone="UTC",
                )
            )
        return made

    async def main() -> dict[str, Any]:
        async with trio_triggers.open_sqlite_trigger_store(db_path, clock=clock) as store:
            to_register = triggers()
            method = "register"
            started = time.perf_counter()
            register_many = getattr(store, "register_many", None)
            if register_many is not None:
                method = "register_many"
                await register_many(to_register)
                registered = len(to_register)
            else:
                registered = 0
                for trigger in to_register:
                    await store.register(trigger)
                    registered += 1
                    if time.perf_counter() - started > budget:
                        break
            register_s = time.perf_counter() - started
            print("phase: registered", flush=True)
            if register_s > budget:
                return exceeded(register_s, registered, m + HOT_COUNT, method)
            # The same declarations again, as a restart re-applying its config does: nothing
            # changed, so nothing is written and no revision moves.
            again = time.perf_counter()
            if register_many is not None:
                await register_many(to_register)
            reregister_s = time.perf_counter() - again
            options = trio_triggers.SchedulerOptions(poll_interval=1, run_poll_interval=1)
            runner = trio_triggers.NoopRunner(start=start)
            async with (
                trio_triggers.open_scheduler(store, runner, options=options, clock=clock) as s,
                trio.open_nursery() as nursery,
            ):
                await nursery.start(s.serve)
                await trio.sleep(warmup)
                cpu0 = time.process_time()
                t0 = time.time()
                await trio.sleep(seconds)
                t1 = time.time()
                cpu1 = time.process_time()
                hot = [(at, (at - _occurrence_s(key)) * 1000) for at, key in hot_starts]
                fires, lateness = summarise_hot(hot, t0, t1)
                result = {
                    "hot_fires": fires,
                    "lateness_ms": lateness,
                    "idle_fires": len(idle_starts),
                    "window_s": t1 - t0,
                    "cpu_s": cpu1 - cpu0,
                    "register_s": register_s,
                    "reregister_s": reregister_s,
                    "register_method": method,
                    "peak_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                }
                # Print now: with the inline executor a scheduler tick in progress cannot be
                # cancelled, so at large M shutdown can wait minutes for it; the result is
                # already complete and the orchestrator takes it even if the teardown is
                # then cut short by the subprocess timeout.
                print(json.dumps(result), flush=True)
                nursery.cancel_scope.cancel()
        return result

    result: dict[str, Any] = trio.run(main)
    return result


def exceeded(register_s: float, registered: int, total: int, method: str) -> dict[str, Any]:
    return {
        "exceeded": True,
        "register_s": register_s,
        "registered": registered,
        "total": total,
        "register_method": method,
        "peak_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
    }


# --------------------------------------------------------------------------- config sync


def write_config(directory: Path, m: int) -> Path:
    """A config of ``m`` daily triggers (distinct times of day) on one command flow."""
    lines = ['[flows.noop]\ncommand = ["true"]\n']
    for i in range(m):
        of_day = i * DAY_S // m
        hour, minute, second = of_day // 3600, (of_day // 60) % 60, of_day % 60
        lines.append(
            f'[[triggers]]\nid = "{idle_id(i)}"\nflow = "noop"\n'
            f'cron = "{second} {minute} {hour} * * *"\ntimezone = "UTC"\n'
        )
    path = directory / "triggers.toml"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def time_to_serving(config: Path, timeout: float) -> tuple[float, str]:
    """Seconds from starting ``trio-triggers run --config`` to its ``-- serving`` line (the
    config read, validated and synced to the store), and that line."""
    command = [sys.executable, "-m", "trio_triggers.cli", "run", "--config", str(config)]
    command += ["--for", "0.1s", "--quiet"]
    started = time.perf_counter()
    process = subprocess.Popen(
        command, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, cwd=config.parent
    )
    ready, line = float("nan"), ""
    assert process.stderr is not None
    for text in process.stderr:
        if text.startswith("-- serving"):
            ready, line = time.perf_counter() - started, text.strip()
    process.wait(timeout=timeout)
    return ready, line


def measure_config_sync(m: int, timeout: float) -> dict[str, Any]:
    """``trio-triggers run`` on an M-trigger config: the first start (registers all of them)
    and a restart with nothing changed, each timed to its ``-- serving`` line."""
    with tempfile.TemporaryDirectory(prefix="sparse-config-") as tmp:
        config = write_config(Path(tmp), m)
        first, _ = time_to_serving(config, timeout)
        again, line = time_to_serving(config, timeout)
    return {"m": m, "first_s": first, "unchanged_s": again, "line": line}


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


def measure(command: list[str], timeout: float, extra_env: dict[str, str]) -> dict[str, Any]:
    """Run one worker; answer its JSON line, or an ``error`` / ``timeout`` description."""
    env = dict(os.environ, **extra_env)
    try:
        completed = subprocess.run(
            command, capture_output=True, text=True, env=env, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout if isinstance(exc.stdout, str) else (exc.stdout or b"").decode()
        done = [line for line in out.splitlines() if line.startswith("{")]
        if done:  # measured, then killed while shutting down
            late: dict[str, Any] = json.loads(done[-1])
            late["teardown_timed_out"] = True
            return late
        registered = "phase: registered" in out
        return {"timeout": timeout, "registered_before_timeout": registered}
    if completed.returncode != 0:
        tail = completed.stderr.strip().splitlines()[-1:] or [f"exit {completed.returncode}"]
        return {"error": " ".join(tail)}
    lines = [line for line in completed.stdout.strip().splitlines() if line.startswith("{")]
    if not lines:
        return {"error": "worker printed no result"}
    data: dict[str, Any] = json.loads(lines[-1])
    return data


def summarise(name: str, m: int, data: dict[str, Any], budget: float) -> dict[str, Any]:
    row: dict[str, Any] = {"system": name, "m": m}
    if "error" in data:
        row["error"] = data["error"]
        return row
    if "timeout" in data:
        if data["registered_before_timeout"]:
            row["error"] = f"worker killed by the {data['timeout']:g} s timeout after registering"
        else:
            row["exceeded"] = f"registration exceeded budget ({budget:g} s; worker timed out)"
        return row
    row["register_s"] = float(data["register_s"])
    if row["register_s"] > 0:
        row["register_per_s"] = (m + HOT_COUNT) / row["register_s"]
    if data.get("reregister_s") is not None:
        row["reregister_s"] = float(data["reregister_s"])
    row["register_method"] = data.get("register_method", "")
    row["rss_mb"] = int(data["peak_rss_kb"]) / 1024
    if data.get("exceeded"):
        row["exceeded"] = (
            f"registration exceeded budget ({budget:g} s; {data['registered']} of "
            f"{data['total']} registered in {row['register_s']:.1f} s)"
        )
        return row
    lateness = [float(x) for x in data["lateness_ms"]]
    window = float(data["window_s"])
    row.update(
        fires_per_s=int(data["hot_fires"]) / window if window else 0.0,
        p50=percentile(lateness, 0.50),
        p99=percentile(lateness, 0.99),
        cpu_per_s=float(data["cpu_s"]) / window if window else float("nan"),
        idle_fires=int(data["idle_fires"]),
        window_s=window,
        teardown_timed_out=bool(data.get("teardown_timed_out", False)),
    )
    return row


METRICS: list[tuple[str, str, str]] = [
    # (row key, label, format)
    ("fires_per_s", f"hot fires/s (of {HOT_COUNT})", "{:.2f}"),
    ("p50", "lateness p50 ms", "{:.1f}"),
    ("p99", "lateness p99 ms", "{:.1f}"),
    ("cpu_per_s", "CPU s per served s", "{:.3f}"),
    ("window_s", "window s (actual)", "{:.1f}"),
    ("register_s", f"registration s (M+{HOT_COUNT})", "{:.2f}"),
    ("register_per_s", "registrations/s", "{:.0f}"),
    ("reregister_s", "same again, unchanged s", "{:.2f}"),
    ("rss_mb", "peak RSS MB", "{:.1f}"),
]


def cell(row: dict[str, Any] | None, key: str, fmt: str) -> str:
    if row is None:
        return "-"
    if "error" in row:
        return "error"
    value = row.get(key)
    if value is None:
        return "exceeded" if "exceeded" in row else "-"
    if isinstance(value, float) and math.isnan(value):
        return "n/a"
    return fmt.format(value)


def ratio(mine: dict[str, Any] | None, theirs: dict[str, Any] | None, key: str) -> str:
    if mine is None or theirs is None:
        return "-"
    a, b = mine.get(key), theirs.get(key)
    if a is None or b is None or math.isnan(a) or math.isnan(b):
        return "-"
    if b == 0:
        return "inf" if a else "1.00"
    return f"{a / b:.2f}"


def print_table(m: int, rows: list[dict[str, Any]], systems: list[str]) -> None:
    by_system = {r["system"]: r for r in rows if r["m"] == m}
    others = [s for s in systems if s != OURS]
    columns = [SHORT[s] for s in systems] + [f"ours/{SHORT[s]}" for s in others]
    print(f"M = {m} idle daily triggers + {HOT_COUNT} hot every-second triggers")
    header = f"{'':<26}" + "".join(f"{c:>16}" for c in columns)
    print(header)
    print("-" * len(header))
    mine = by_system.get(OURS)
    for key, label, fmt in METRICS:
        cells = [cell(by_system.get(s), key, fmt) for s in systems]
        cells += ["" if key == "window_s" else ratio(mine, by_system.get(s), key) for s in others]
        print(f"{label:<26}" + "".join(f"{c:>16}" for c in cells))
    for system in systems:
        row = by_system.get(system)
        if row is None:
            continue
        if "error" in row:
            print(f"  {system}: error: {row['error']}")
        elif "exceeded" in row:
            print(f"  {system}: {row['exceeded']}")
        else:
            if row.get("idle_fires"):
                print(f"  {system}: WARNING {row['idle_fires']} idle trigger(s) fired in the run")
            if row.get("teardown_timed_out"):
                print(f"  {system}: measured, then killed by the timeout while shutting down")
    if mine is not None and mine.get("register_method"):
        print(f"  ours registered with store.{mine['register_method']}")
    print()


GOAL = (
    "goal: at M=100000 hot triggers keep up (10/s) with p99 < 50 ms, CPU per served second "
    "within 2x of the M=1000 figure, registration under 10 s"
)


def judge_goal(rows: list[dict[str, Any]]) -> str:
    ours = {r["m"]: r for r in rows if r["system"] == OURS}
    big, small = ours.get(100_000), ours.get(1000)
    if big is None or small is None:
        return "not evaluated (needs ours at M=1000 and M=100000)"
    if "error" in big or "error" in small:
        return "not evaluated (a worker failed)"
    if "exceeded" in big:
        return "NOT met (registration exceeded budget at M=100000)"
    if "exceeded" in small:
        return "not evaluated (registration exceeded budget at M=1000)"
    checks = [
        (big["fires_per_s"] >= 0.99 * HOT_COUNT, f"hot fires/s {big['fires_per_s']:.2f}"),
        (big["p99"] < 50, f"p99 {big['p99']:.1f} ms"),
        (
            big["cpu_per_s"] <= 2 * small["cpu_per_s"],
            f"CPU/s {big['cpu_per_s']:.3f} vs 2x {small['cpu_per_s']:.3f}",
        ),
        (big["register_s"] < 10, f"registration {big['register_s']:.1f} s"),
    ]
    failed = [text for ok, text in checks if not ok]
    if not failed:
        return "met (" + "; ".join(text for _, text in checks) + ")"
    return "NOT met (" + "; ".join(failed) + ")"


def without_nan(value: Any) -> Any:
    """``value`` with every NaN float replaced by ``None`` (strict JSON has no NaN)."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: without_nan(v) for k, v in value.items()}
    if isinstance(value, list):
        return [without_nan(v) for v in value]
    return value


def parse_counts(text: str) -> list[int]:
    counts = [int(part.replace("_", "")) for part in text.split(",") if part.strip()]
    if not counts or any(c < 0 for c in counts):
        raise argparse.ArgumentTypeError("expected a comma-separated list of counts")
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--m", type=parse_counts, default=None, help="idle counts, e.g. 1000,10000")
    parser.add_argument("--seconds", type=float, default=None, help="measured window (10 s)")
    parser.add_argument("--warmup", type=float, default=2.0, help="warm-up before the window")
    parser.add_argument(
        "--budget", type=float, default=120.0, help="registration budget per M and system (s)"
    )
    parser.add_argument(
        "--quick", action="store_true", help="smoke: M=1000, 3 s, ours + APScheduler memory"
    )
    parser.add_argument("--ours-only", action="store_true", help="skip APScheduler (no pip)")
    parser.add_argument("--json", action="store_true", help="also print the results as JSON")
    parser.add_argument(
        "--config-sync",
        type=int,
        default=None,
        help="also time `trio-triggers run` on a config of this many triggers (default: the "
        "largest M; 0 skips it)",
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()

    counts: list[int] = args.m or ([1000] if args.quick else [1000, 10_000, 100_000])
    seconds: float = args.seconds or (3.0 if args.quick else 10.0)
    warmup: float = args.warmup
    budget: float = args.budget

    if args.worker == "ours":
        result = run_ours(counts[0], seconds, warmup, budget, os.environ["SPARSE_DB"])
        if result.get("exceeded"):
            print(json.dumps(result))  # a measured result was printed at the window's end
        return

    systems = [OURS]
    if not args.ours_only:
        systems.append(APS_MEMORY)
        if not args.quick:
            systems.append(APS_SQLITE)
    aps_python = ensure_apscheduler() if len(systems) > 1 else None
    timeout = budget + warmup + seconds + TIMEOUT_SLACK_S

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="sparse-") as tmp:
        for m in counts:
            for system in systems:
                print(f"measuring {system} M={m} ...", flush=True)
                started = time.perf_counter()
                if system == OURS:
                    db = str(Path(tmp) / f"ours-{m}.sqlite")
                    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "ours"]
                    cmd += ["--m", str(m), "--seconds", str(seconds), "--warmup", str(warmup)]
                    cmd += ["--budget", str(budget)]
                    data = measure(cmd, timeout, {"SPARSE_DB": db})
                else:
                    assert aps_python is not None
                    kind = APS_KINDS[system]
                    db = str(Path(tmp) / f"aps-{kind}-{m}.sqlite")
                    cmd = [str(aps_python), str(HERE / "_aps_sparse.py"), kind, str(m)]
                    cmd += [str(seconds), str(warmup), str(budget), db]
                    data = measure(cmd, timeout, {})
                rows.append(summarise(system, m, data, budget))
                print(f"  done in {time.perf_counter() - started:.1f} s", flush=True)

    sync_m = args.config_sync if args.config_sync is not None else max(counts)
    sync: dict[str, Any] | None = None
    if sync_m > 0:
        print(f"measuring trio-triggers run on a {sync_m}-trigger config ...", flush=True)
        sync = measure_config_sync(sync_m, timeout)

    print()
    print(
        f"sparse workload: M idle daily triggers + {HOT_COUNT} every-second triggers, SQLite "
        f"store for ours; {seconds:g} s window after {warmup:g} s warm-up; registration budget "
        f"{budget:g} s"
    )
    print("lateness = start call - occurrence (hot fires in the window); CPU s per served s =")
    print("process CPU seconds in the window / window seconds; ratios are ours / theirs")
    print()
    for m in counts:
        print_table(m, rows, systems)
    if sync is not None:
        print(
            f"trio-triggers run --config (M = {sync['m']} triggers, SQLite): to '-- serving' "
            f"{sync['first_s']:.2f} s on first start (all registered), "
            f"{sync['unchanged_s']:.2f} s on a restart with nothing changed"
        )
        print()
    print(GOAL)
    print(f"  -> {judge_goal(rows)}")
    if args.json:
        payload = {
            "workload": "sparse",
            "seconds": seconds,
            "warmup": warmup,
            "budget": budget,
            "hot": HOT_COUNT,
            "rows": rows,
            "config_sync": sync,
            "goal": judge_goal(rows),
        }
        print(json.dumps(without_nan(payload), allow_nan=False))


if __name__ == "__main__":
    main()
