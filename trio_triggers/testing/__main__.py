"""``python -m trio_triggers.testing --seeds N --days D [--store memory|sqlite]``.

Runs seeds ``start .. start+N-1`` one after another, prints one line per failing seed (and, with
``--verbose``, per seed), then a summary with the simulated speed in trigger-days per wall
second. Exit status 1 if any seed broke an invariant.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time

import msgspec

from ._invariants import SimulationViolation
from ._simulate import SimConfig, simulate


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m trio_triggers.testing", description="Deterministic simulations."
    )
    parser.add_argument("--seeds", type=int, default=20, help="how many seeds (default 20)")
    parser.add_argument("--start", type=int, default=0, help="first seed (default 0)")
    parser.add_argument("--days", type=float, default=7.0, help="simulated days per seed")
    parser.add_argument("--store", choices=("memory", "sqlite"), default="memory")
    parser.add_argument("--schedulers", type=int, default=None)
    parser.add_argument("--triggers", type=int, default=None)
    parser.add_argument("--run-store", action="store_true", help="runs are owned run-store rows")
    parser.add_argument("--seed", type=int, default=None, help="run exactly this one seed")
    parser.add_argument("--report", action="store_true", help="print each report as JSON")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    # The scheduler logs every injected failure; a simulation wants only the verdicts.
    logger = logging.getLogger("trio_triggers")
    saved = logger.propagate
    null = logging.NullHandler()
    logger.addHandler(null)
    logger.propagate = False
    try:
        return _run(args)
    finally:
        logger.removeHandler(null)
        logger.propagate = saved


def _run(args: argparse.Namespace) -> int:
    config = SimConfig(days=args.days, store=args.store, run_store=args.run_store)
    if args.schedulers is not None:
        config = msgspec.structs.replace(config, schedulers=args.schedulers)
    if args.triggers is not None:
        config = msgspec.structs.replace(config, triggers=args.triggers)
    seeds = [args.seed] if args.seed is not None else range(args.start, args.start + args.seeds)
    failures = 0
    done = 0
    trigger_days = 0.0
    began = time.perf_counter()
    for seed in seeds:
        try:
            report = simulate(seed, config)
        except SimulationViolation as exc:
            failures += 1
            print(f"seed {seed}: FAILED\n{exc}", flush=True)
            continue
        finally:
            done += 1
        trigger_days += report.trigger_days
        if args.report:
            print(report.to_json().decode(), flush=True)
        elif args.verbose:
            print(f"seed {seed}: ok ({report.trace_lines} trace lines)", flush=True)
    wall = time.perf_counter() - began
    speed = trigger_days / wall if wall > 0 else 0.0
    print(
        f"{done} seeds x {args.days:g} days ({args.store}): {failures} failed; "
        f"wall {wall:.1f} s; {speed:.1f} simulated trigger-days per wall second",
        flush=True,
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
