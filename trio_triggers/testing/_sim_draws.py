"""The simulator's dice: the world's configuration and every random draw made from its seed.

Everything random in a world comes from one ``random.Random(seed)``, drawn in a fixed order:
the epoch, the triggers, then (interleaved with the world's tasks, which Trio runs in an order
seeded by the same seed: :func:`seeded_trio_scheduler`) the faults, plans, crashes, edits and
jumps. After the chaos phase the world turns *quiet* (``Draws.quiet``, then ``quiet_event``):
from then on nothing draws a fault, a crash, an edit or a jump.
"""

from __future__ import annotations

import contextlib
import math
import random
from typing import TYPE_CHECKING, Any, Final, Literal

import msgspec
import trio

from .._declarations import CatchUp, Overlap, Trigger
from ._faults import TRIGGER_STORE_READS, Fault, FaultKind
from ._runner import RunPlan, StartRequestLike

if TYPE_CHECKING:
    import collections
    from collections.abc import Iterator

__all__ = [
    "DAY_S",
    "Draws",
    "H",
    "ManualFireDraw",
    "SimConfig",
    "SimWallClock",
    "seeded_trio_scheduler",
]

H: Final = 3_600_000
DAY_S: Final = 86_400.0

_EPOCHS: Final = (
    # Midnight UTC a couple of days before a DST transition (and one without any).
    1772755200000,  # 2026-03-06: America/New_York springs forward on 03-08
    1774396800000,  # 2026-03-25: Europe/Berlin springs forward on 03-29
    1775174400000,  # 2026-04-03: Australia/Sydney falls back on 04-05
    1761350400000,  # 2025-10-25: Europe/Berlin falls back on 10-26
    1761955200000,  # 2025-11-01: America/New_York falls back on 11-02
    1780272000000,  # 2026-06-01: no transition nearby
)
_ZONES: Final = ("UTC", "America/New_York", "Europe/Berlin", "Australia/Sydney", "Asia/Kolkata")
CRONS: Final = (
    "0 * * * *",
    "30 * * * *",
    "15 */2 * * *",
    "0 */3 * * *",
    "30 1 * * *",
    "0 2 * * *",
    "45 2 * * *",
    "0 9-17 * * 1-5",
)
OVERLAPS: Final[tuple[Overlap, ...]] = ("skip", "buffer-one", "supersede")
_CATCH_UPS: Final[tuple[CatchUp, ...]] = ("none", "one", "all")


class SimConfig(msgspec.Struct, frozen=True, kw_only=True):
    """The shape of a simulated world; rates are per simulated day unless named per call."""

    days: float = 7.0
    store: Literal["memory", "sqlite"] = "memory"
    schedulers: int = 2
    triggers: int = 3
    store_fault_rate: float = 0.01
    #: ``False``: a drawn store hang is a slow call instead (a world that must keep its only
    #: scheduler moving, to expose a planted bug, rather than wait out a hung call).
    store_hangs: bool = True
    #: Seconds every scheduler store call takes (0: instant); with ``edit_on_boundaries`` the
    #: edits then land inside a tick, between its reads and its claims.
    store_latency: float = 0.0
    runner_fault_rate: float = 0.02
    crashes_per_day: float = 1.0
    crash_on_call_rate: float = 0.0005
    #: The chance that a scheduler crashes right after a claim granted it a reservation
    #: (before it launches): the world where a released reservation's predecessor matters.
    crash_after_reserve_rate: float = 0.0
    edits_per_day: float = 2.0
    #: Whether the admin also pauses triggers (and resumes them, from a drawn point).
    pauses: bool = True
    #: Manual fires ("run now") per simulated day, each from a short-lived process that does
    #: not serve (as ``trio-triggers fire``): keys fresh, retried, another trigger's, or none;
    #: sometimes with an input or an overlap override; sometimes the process dies after the
    #: claim, before the launch.
    manual_fires_per_day: float = 0.0
    #: How many backfills the admin starts per simulated day, on triggers that are not
    #: audited (a few hours of past boundaries each; some cancelled, some refused). They are
    #: drawn from a stream of their own, so the other draws of a seed stay where they were.
    backfills_per_day: float = 3.0
    jumps_per_day: float = 0.5
    poll_interval: float = 3600.0
    run_poll_interval: float = 900.0
    fire_retention_days: float = 2.0
    quiet_hours: float = 2.0
    edit_on_boundaries: bool = False
    declarations: tuple[Trigger, ...] = ()
    run_store: bool = False
    owners: int = 2
    partition_rate: float = 0.15
    planted_bugs: tuple[str, ...] = ()
    trace_tail: int = 40
    #: ``True``: the schedulers take the reference listing tick instead of the indexed one.
    listing: bool = False
    #: ``True``: the write-fault world (``_sim_local``): runs are launched through a real
    #: ``LocalRunner`` and executed by ``owners`` LocalRunner processes whose run-store writes
    #: fail before and after their commit at ``run_store_fault_rate`` per call.
    local_runner: bool = False
    run_store_fault_rate: float = 0.1
    #: The chance that a LocalRunner process is stopped right after one of its
    #: ``claim_and_own`` calls committed, before the answer reaches it.
    stop_on_claim_rate: float = 0.02

    def describe(self, seed: int) -> str:
        fields = ", ".join(
            f"{name}={getattr(self, name)!r}"
            for name in self.__struct_fields__
            if getattr(self, name) != getattr(_DEFAULT_CONFIG, name)
        )
        return f"simulate({seed}, SimConfig({fields}))"


_DEFAULT_CONFIG: Final = SimConfig()


class SimWallClock:
    """Wall time = epoch + Trio time since creation + the sum of the jumps so far."""

    def __init__(self, epoch_ms: int) -> None:
        self._epoch = epoch_ms
        self._t0 = trio.current_time()
        self.offset_ms = 0

    def now_ms(self) -> int:
        return self._epoch + math.floor((trio.current_time() - self._t0) * 1000) + self.offset_ms


class ManualFireDraw(msgspec.Struct, frozen=True, kw_only=True):
    """One drawn manual fire: which trigger, its key, input and override, and whether its
    process dies right after the claim (before launching)."""

    trigger_id: str
    key: str | None
    input: Any = msgspec.UNSET
    overlap: Overlap | None = None
    dies_after_claim: bool = False


class Draws:
    """The seed's ``rng`` and every draw of the world from it; ``quiet`` once chaos ends.

    Drawn faults and plans are tallied in ``counts`` (the report's counts).
    """

    def __init__(self, seed: int, config: SimConfig, counts: collections.Counter[str]) -> None:
        self.config = config
        self.rng = random.Random(seed)
        self.counts = counts
        self.epoch = self.rng.choice(_EPOCHS) + self.rng.randrange(0, 24) * H
        self.quiet = False
        self.quiet_event = trio.Event()
        self.audited: set[str] = set()

    def plan(self, request: StartRequestLike, attempt: int) -> RunPlan:
        """How the scripted runner answers one start, and what becomes of the run."""
        rng = self.rng
        if self.quiet:
            return RunPlan(duration=rng.uniform(10, 600))
        r = rng.random()
        rate = self.config.runner_fault_rate
        mode: Literal["ok", "refuse", "hang", "late", "hang_after_create"] = "ok"
        delay = 0.0
        if r < rate * 0.4:
            mode = "refuse"
        elif r < rate * 0.5:
            mode = "hang"
        elif r < rate * 0.6:
            mode = "hang_after_create"
        elif r < rate:
            mode = "late"
            delay = rng.uniform(200, 400)
        d = rng.random()
        if d < 0.7:
            duration = rng.uniform(30, 900)
        elif d < 0.92:
            duration = rng.uniform(900, 4000)
        else:
            duration = rng.uniform(4000, 3 * 3600)
        o = rng.random()
        outcome: Literal["completed", "failed", "cancelled", "missing"] = "completed"
        if o < 0.08:
            outcome = "failed"
        elif o < 0.11:
            outcome = "cancelled"
        elif o < 0.15:
            outcome = "missing"
        self.counts[f"runner.plan.{mode}"] += 1
        return RunPlan(start=mode, start_delay=delay, duration=duration, outcome=outcome)

    def runner_fault(self, what: str) -> Literal["fail", "hang"] | None:
        if self.quiet or self.rng.random() >= self.config.runner_fault_rate:
            return None
        kind: Literal["fail", "hang"] = "fail" if self.rng.random() < 0.8 else "hang"
        self.counts[f"runner.fault.{what}.{kind}"] += 1
        return kind

    def inspect_fault(self, run_id: str) -> Literal["fail", "hang"] | None:
        return self.runner_fault("inspect")

    def cancel_fault(self, run_id: str) -> Literal["fail", "hang"] | None:
        return self.runner_fault("cancel")

    def store_fault(self, caller: str, method: str, args: tuple[Any, ...]) -> Fault | None:
        """A trigger-store fault for a scheduler's call (never for the admin's)."""
        if self.quiet or not caller.startswith("s"):
            return None
        rng = self.rng
        if rng.random() >= self.config.store_fault_rate:
            return None
        r = rng.random()
        kind: FaultKind
        delay = 0.0
        if r < 0.45:
            kind = "fail_before"
        elif r < 0.8:
            kind = "fail_after" if method not in TRIGGER_STORE_READS else "fail_before"
        elif r < 0.97 or not self.config.store_hangs:
            kind = "slow"
            delay = rng.uniform(0.05, 60.0)
        else:
            kind = "hang"
        self.counts[f"store.fault.{kind}"] += 1
        return Fault(kind=kind, delay=delay)

    def crash_after_call(self) -> bool:
        """Whether a scheduler crashes right after one of its store calls returned."""
        return not self.quiet and self.rng.random() < self.config.crash_on_call_rate

    def crash_after_reserve(self, method: str, answer: object) -> bool:
        """Whether a scheduler crashes right after a claim granted it a reservation."""
        rate = self.config.crash_after_reserve_rate
        if rate <= 0 or self.quiet or method not in ("claim_fire", "claim_pending", "claim_manual"):
            return False
        claim = getattr(answer, "claim", answer)
        if getattr(claim, "reservation_id", None) is None:
            return False
        return self.rng.random() < rate

    def manual_fire(self, trigger_ids: list[str], keys: dict[str, str]) -> ManualFireDraw:
        """A manual fire of a drawn trigger; ``keys`` maps each key used so far to its
        trigger (a retry reuses one of the trigger's keys; a conflict one of another's)."""
        rng = self.rng
        tid = rng.choice(trigger_ids)
        mine = sorted(k for k, t in keys.items() if t == tid)
        theirs = sorted(k for k, t in keys.items() if t != tid)
        r = rng.random()
        key: str | None
        if r < 0.25 and mine:
            key, kind = rng.choice(mine), "retry"
        elif r < 0.35 and theirs:
            key, kind = rng.choice(theirs), "conflict"
        elif r < 0.5:
            key, kind = None, "keyless"
        else:
            key, kind = f"key-{len(keys)}", "fresh"
            keys[key] = tid
        self.counts[f"manual.draw.{kind}"] += 1
        value: Any = {"manual": rng.randrange(1000)} if rng.random() < 0.5 else msgspec.UNSET
        overlap = rng.choice(OVERLAPS) if rng.random() < 0.3 else None
        return ManualFireDraw(
            trigger_id=tid,
            key=key,
            input=value,
            overlap=overlap,
            dies_after_claim=rng.random() < 0.15,
        )

    def triggers(self) -> list[Trigger]:
        """The world's declarations (``config.declarations``, or drawn); the *audited* ones
        (catch-up ``all`` with a large bound: no boundary may be lost) go to ``audited``."""
        rng = self.rng
        out: list[Trigger] = []
        if self.config.declarations:
            for trigger in self.config.declarations:
                if trigger.catch_up == "all" and trigger.max_catch_up >= 200:
                    self.audited.add(trigger.id)
                out.append(trigger)
            return out
        for i in range(self.config.triggers):
            audited = i == 0 or rng.random() < 0.3
            catch_up: CatchUp = "all" if audited else rng.choice(_CATCH_UPS)
            trigger = Trigger(
                id=f"t{i}",
                flow_id=f"flow-{i}",
                input={"n": i},
                cron=rng.choice(CRONS),
                timezone=rng.choice(_ZONES),
                overlap=rng.choice(OVERLAPS),
                catch_up=catch_up,
                max_catch_up=1000 if audited else rng.randrange(0, 6),
                enabled=True,
            )
            if audited:
                self.audited.add(trigger.id)
            out.append(trigger)
        return out


@contextlib.contextmanager
def seeded_trio_scheduler(seed: int) -> Iterator[None]:
    """Make the order in which Trio runs a batch of runnable tasks a function of ``seed``.

    The one place the simulator touches Trio's private run state, because there is no other
    way: Trio shuffles each batch of runnable tasks with a module-level ``Random`` and offers
    no public seed for it. In its deterministic mode (the one pytest-trio switches on under
    Hypothesis) it first sorts the batch by spawn order; seeding that ``Random`` then makes the
    interleaving a function of the seed.
    """
    from trio._core import _run

    saved = _run._ALLOW_DETERMINISTIC_SCHEDULING  # noqa: SLF001
    _run._r.seed(seed)  # noqa: SLF001
    _run._ALLOW_DETERMINISTIC_SCHEDULING = True  # type: ignore[misc]  # noqa: SLF001
    try:
        yield
    finally:
        _run._ALLOW_DETERMINISTIC_SCHEDULING = saved  # type: ignore[misc]  # noqa: SLF001
