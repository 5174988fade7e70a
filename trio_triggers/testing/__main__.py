"""``python -m trio_triggers.testing --seeds N --days D [--store memory|sqlite]``.

Runs seeds ``start .. start+N-1`` (in ``--jobs`` processes; the verdicts do not depend on it),
prints one line per failing seed (and, with
``--verbose``, per seed), then a summary with the simulated speed in trigger-days per wall
second. Exit status 1 if any seed broke an invariant. ``--planted`` instead runs each planted
bug's world with and without its bug and prints how often the bug was caught (exit status 1 if
one was caught in fewer than 19 seeds of 20, or a world broke an invariant without its bug).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import itertools
import logging
import sys
import time
from typing import TYPE_CHECKING

import msgspec

from ._invariants import SimulationViolation
from ._sim_worlds import CATCH_AT_LEAST, CATCH_SEEDS, PLANTED_WORLDS
from ._simulate import SimConfig, SimReport, simulate

if TYPE_CHECKING:
    from collections.abc import Iterator


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
    parser.add_argument(
        "--manual-fires",
        type=float,
        default=0.0,
        metavar="PER_DAY",
        help="manual fires ('run now') per simulated day (default 0)",
    )
    parser.add_argument("--seed", type=int, default=None, help="run exactly this one seed")
    parser.add_argument("--report", action="store_true", help="print each report as JSON")
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument(
        "--jobs", type=int, default=1, help="run seeds in this many processes (default 1)"
    )
    parser.add_argument(
        "--planted",
        action="store_true",
        help="run each planted bug's world (--seeds seeds from --start, default 20 from 0), with "
        "and without its bug, and print how often the bug was caught",
    )
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


def _planted(args: argparse.Namespace) -> int:
    """Each planted bug's catch rate over the seeds, and its world's verdict without it."""
    short = 0
    for bug in sorted(PLANTED_WORLDS):
        world = PLANTED_WORLDS[bug]
        buggy = msgspec.structs.replace(world.config, planted_bugs=(bug,))
        seeds = range(args.start, args.start + args.seeds)
        caught: list[str] = []
        missed: list[int] = []
        dirty: list[int] = []
        began = time.perf_counter()
        for seed in seeds:
            try:
                simulate(seed, buggy)
                missed.append(seed)
            except SimulationViolation as exc:
                caught.append(exc.violation.invariant)
                if exc.violation.invariant not in world.invariants:
                    dirty.append(seed)
            try:
                simulate(seed, world.config)
            except SimulationViolation:
                dirty.append(seed)
        wall = time.perf_counter() - began
        needed = -(-CATCH_AT_LEAST * len(seeds) // CATCH_SEEDS)
        if len(caught) < needed or dirty:
            short += 1
        by = ", ".join(f"{inv} x{caught.count(inv)}" for inv in sorted(set(caught)))
        print(
            f"{bug}: caught {len(caught)}/{len(seeds)} ({by or 'never'}); missed {missed}; "
            f"unexpected {dirty}; {wall:.1f} s",
            flush=True,
        )
    return 1 if short else 0


_Outcome = tuple[int, SimReport | None, str | None]


def _one(seed: int, config: SimConfig) -> _Outcome:
    """One seed's outcome: its report, or the violation's text (what a worker sends back)."""
    try:
        return seed, simulate(seed, config), None
    except SimulationViolation as exc:
        return seed, None, str(exc)


def _quiet_worker() -> None:
    logger = logging.getLogger("trio_triggers")
    logger.addHandler(logging.NullHandler())
    logger.propagate = False


def _outcomes(seeds: list[int], config: SimConfig, jobs: int) -> Iterator[_Outcome]:
    """Each seed's outcome, in seed order; ``jobs`` > 1 runs seeds in that many processes.

    A world is a function of its seed alone, so the outcomes do not depend on ``jobs``.
    """
    if jobs <= 1 or len(seeds) <= 1:
        for seed in seeds:
            yield _one(seed, config)
        return
    with concurrent.futures.ProcessPoolExecutor(jobs, initializer=_quiet_worker) as pool:
        yield from pool.map(_one, seeds, itertools.repeat(config), chunksize=1)


def _run(args: argparse.Namespace) -> int:
    if args.planted:
        return _planted(args)
    config = SimConfig(
        days=args.days,
        store=args.store,
        run_store=args.run_store,
        manual_fires_per_day=args.manual_fires,
    )
    if args.schedulers is not None:
        config = msgspec.structs.replace(config, schedulers=args.schedulers)
    if args.triggers is not None:
        config = msgspec.structs.replace(config, triggers=args.triggers)
    seeds = [args.seed] if args.seed is not None else range(args.start, args.start + args.seeds)
    failures = 0
    done = 0
    trigger_days = 0.0
    began = time.perf_counter()
    for seed, report, failure in _outcomes(list(seeds), config, args.jobs):
        done += 1
        if failure is not None:
            failures += 1
            print(f"seed {seed}: FAILED\n{failure}", flush=True)
            continue
        assert report is not None
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
