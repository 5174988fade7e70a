"""The planted bugs' worlds: where each known bug matters, and how often it must be caught.

Each planted bug (:data:`~trio_triggers.testing._sim_plant.PLANTED_BUGS`) has one world here,
made to contend where that bug bites. The CI test (``tests/simulation/test_simulate.py``) runs
:data:`CATCH_SEEDS` consecutive seeds of each world with its bug and requires at least
:data:`CATCH_AT_LEAST` catches, by one of the invariants the world names;
``python -m trio_triggers.testing --planted`` (``nox -s simulate_planted``) prints the rates.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import msgspec

from .._declarations import Trigger
from ._sim_draws import SimConfig

if TYPE_CHECKING:
    from .._declarations import Overlap

__all__ = [
    "AUDITED",
    "CATCH_AT_LEAST",
    "CATCH_SEEDS",
    "EVERY_MINUTE",
    "PLANTED_WORLDS",
    "SUPERSEDING",
    "PlantedWorld",
    "write_fault_world",
]

#: How many consecutive seeds each planted bug's world runs, and how many must catch it.
CATCH_SEEDS: Final = 20
CATCH_AT_LEAST: Final = 19


class PlantedWorld(msgspec.Struct, frozen=True):
    """A planted bug's world (without the bug) and the invariants that may report the bug."""

    config: SimConfig
    invariants: frozenset[str]


def _trigger(i: int, cron: str, overlap: Overlap) -> Trigger:
    return Trigger(
        id=f"t{i}",
        flow_id=f"flow-{i}",
        input={"n": i},
        cron=cron,
        timezone="UTC",
        overlap=overlap,
        catch_up="all",
        max_catch_up=1000,
        enabled=True,
    )


#: Three audited triggers (catch-up ``all``: no boundary may be lost) firing every hour or two,
#: one per overlap policy. A drawn world may get only a daily audited trigger, whose three
#: boundaries in a short world rarely meet the fault a bug needs.
AUDITED = (
    _trigger(0, "0 * * * *", "skip"),
    _trigger(1, "30 * * * *", "buffer-one"),
    _trigger(2, "15 */2 * * *", "supersede"),
)
#: Three hourly ``supersede`` triggers: every claim displaces a predecessor.
SUPERSEDING = tuple(_trigger(i, f"{i * 20} * * * *", "supersede") for i in range(3))


#: The write-fault world's triggers: every minute, so that a short world launches hundreds of
#: runs through the LocalRunner (catch-up ``all``: no boundary may be lost). ``skip`` and
#: ``buffer-one`` only: a supersede backlog is left to the other worlds.
EVERY_MINUTE = (
    _trigger(0, "* * * * *", "skip"),
    _trigger(1, "* * * * *", "buffer-one"),
    _trigger(2, "* * * * *", "skip"),
)


def write_fault_world(**changes: object) -> SimConfig:
    """Two schedulers launching through LocalRunner processes whose run store fails writes
    before and after their commit (docs/simulation.md, "Write faults"); ``changes`` replace
    fields."""
    base = SimConfig(
        days=0.06,
        schedulers=2,
        local_runner=True,
        declarations=EVERY_MINUTE,
        poll_interval=60,
        run_poll_interval=5,
        store_fault_rate=0.1,
        store_hangs=False,
        runner_fault_rate=0.1,
        run_store_fault_rate=0.3,
        crashes_per_day=6,
        quiet_hours=0.25,
        backfills_per_day=0,
        edits_per_day=0,
        jumps_per_day=0,
    )
    return msgspec.structs.replace(base, **changes)


def _alone_on_failing_store(
    *, days: float, crashes_per_day: float, store_fault_rate: float = 0.2
) -> SimConfig:
    """A lone scheduler on the audited triggers whose store fails often but never hangs (a hang
    would stall the only scheduler until the quiet phase): where the bugs of a failed store call
    bite, with nobody else to cover for them."""
    return SimConfig(
        days=days,
        schedulers=1,
        store_fault_rate=store_fault_rate,
        store_hangs=False,
        crashes_per_day=crashes_per_day,
        declarations=AUDITED,
    )


#: Each planted bug, the world where it matters, and the invariants that may report it. Each
#: world is made to contend where its bug bites (docs/simulation.md, "Proving the checkers"):
#: a lone scheduler whose store fails often but never hangs (a hang would stall the only
#: scheduler until the quiet phase), edits landing inside a tick's store calls, crashes right
#: after a reservation is granted.
PLANTED_WORLDS: Final[dict[str, PlantedWorld]] = {
    "watermark_before_dispatch": PlantedWorld(
        _alone_on_failing_store(days=1.5, crashes_per_day=0), frozenset({"T20"})
    ),
    "claim_past_failed_claim": PlantedWorld(
        # A failed tick now pauses before the next (docs/scheduler.md), so fewer ticks meet a
        # failing claim than when they were retried at once: the store fails more often here.
        _alone_on_failing_store(days=3, crashes_per_day=8, store_fault_rate=0.3),
        frozenset({"T20"}),
    ),
    "skip_revision_fence": PlantedWorld(
        SimConfig(
            days=2,
            edits_per_day=48,
            edit_on_boundaries=True,
            store_latency=0.05,
            declarations=AUDITED,
        ),
        frozenset({"T7"}),
    ),
    # A dropped predecessor is seen by the step check of ``active_run`` (T10) when that call
    # released the reservation, by the predecessor check (T20) when a claim did.
    "drop_predecessor": PlantedWorld(
        SimConfig(
            days=3,
            crash_after_reserve_rate=0.5,
            edits_per_day=96,
            edit_on_boundaries=True,
            declarations=SUPERSEDING,
        ),
        frozenset({"T10", "T20"}),
    ),
    "cancel_runs_on_exit": PlantedWorld(
        # (No backfills: the world's task interleaving, which the bug's catch depends on,
        # stays the one it was tuned with.)
        SimConfig(days=3, crashes_per_day=8, backfills_per_day=0),
        frozenset({"T23", "T22"}),
    ),
    "ignore_heartbeat_failures": PlantedWorld(
        SimConfig(days=2, run_store=True, declarations=AUDITED),
        frozenset({"O18"}),
    ),
    "attention_not_moved": PlantedWorld(
        SimConfig(days=2, store="memory", declarations=AUDITED), frozenset({"T35"})
    ),
    # Several schedulers claiming the same boundaries: the listing tick (every scheduler claims
    # every due row; the indexed tick's takes keep them apart).
    # Manual fires several times an hour: their results are recorded all the time.
    "manual_moves_cursor": PlantedWorld(
        SimConfig(days=2, store="memory", manual_fires_per_day=48, declarations=AUDITED),
        frozenset({"T37"}),
    ),
    # The write-fault world's bugs (W1-W4): each restores a behaviour the rule forbids.
    "outcome_write_once": PlantedWorld(write_fault_world(), frozenset({"W1", "W4"})),
    "create_answer_trusted": PlantedWorld(write_fault_world(), frozenset({"W2"})),
    # Refused starts whose ``failed`` record fails: both common here.
    "compensation_swallowed": PlantedWorld(
        write_fault_world(days=0.2, store_fault_rate=0.35, runner_fault_rate=0.4),
        frozenset({"W3"}),
    ),
    "claim_answer_trusted": PlantedWorld(
        write_fault_world(stop_on_claim_rate=0.3), frozenset({"W4"})
    ),
    "stale_ledger_under_lock": PlantedWorld(
        SimConfig(days=2, store="memory", schedulers=3, listing=True, declarations=AUDITED),
        frozenset({"T36"}),
    ),
}
