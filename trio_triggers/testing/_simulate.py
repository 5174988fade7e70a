"""Deterministic simulation: schedulers, stores, runners and faults drawn from one seed.

``simulate(seed)`` builds a world and runs it for a simulated duration under
``trio.testing.MockClock(autojump_threshold=0)``:

* one trigger store (memory, or SQLite on a temporary file with the inline executor), wrapped
  in a :class:`~trio_triggers.testing.FaultyTriggerStore` that serialises calls and lets the
  checker see the exact state before and after every transaction;
* ``schedulers`` slots, each running ``open_scheduler(...)`` + ``serve``; a slot's scope is
  cancelled at random moments (a crash "mid-anything", including right after any store call
  returns) and a new scheduler starts in the slot later;
* a scripted runner whose runs take a drawn time, fail, get cancelled or vanish, and whose
  calls fail, hang or answer late; optionally the runs are real rows in a run store, executed
  by run owners under ``hold_lease`` who crash and are taken over after their lease expires;
* random edits of the declarations (policies, input, cron, enabled), wall-clock jumps, and
  time zones with DST transitions inside the simulated period.

After the chaos phase the faults stop, crashed schedulers restart, every run is allowed to end,
and the world runs quietly for longer than a reservation lease; then the final invariants are
checked.  The first violation stops the world and raises :class:`SimulationViolation` with the
seed and the tail of the trace.  The report is byte-identical for the same seed and
configuration: it contains counts and a digest of the whole trace, never raw uuids or host
time.

This module holds the choreography (scheduler slots, the admin, the clock jumps, the quiet
phase) and the entry points; the world's other parts each have a module of their own:
``_sim_draws`` (the configuration and every random draw), ``_sim_trace`` (the trace, the
tallies and the first violation), ``_sim_observe`` (the store and runner observers and their
call checks), ``_sim_checks`` (the final checks), ``_sim_plant`` (the planted bugs) and
``_owned`` (the run-store runner); the transition checks are ``_invariants``.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import math
import os
import random
import tempfile
from typing import TYPE_CHECKING, Any

import msgspec
import trio
import trio.testing

from .._clock import TrioWallClock
from .._errors import TriggerError
from .._identities import reservation_occurrence
from .._scheduler._core import open_scheduler
from .._scheduler._options import SchedulerOptions
from .._store._memory import MemoryTriggerStore
from .._store._sqlite_store import open_sqlite_trigger_store
from ._faults import Fault, FaultyTriggerStore, IndexedFaultyTriggerStore, StoreCall
from ._invariants import CATALOGUE, InvariantViolation, SimulationViolation, StoreState, Violation
from ._owned import OwnedRunner
from ._runner import ScriptedRunner
from ._sim_checks import check_ticking, final_checks
from ._sim_draws import (
    CRONS,
    DAY_S,
    OVERLAPS,
    Draws,
    H,
    SimConfig,
    SimWallClock,
    seeded_trio_scheduler,
)
from ._sim_local import LocalWorldRunner, plant_scheduler_bugs
from ._sim_observe import CallerState, RecordingRunner, RunnerObserver, SerialTicks, StoreObserver
from ._sim_plant import (
    cancel_owned_runs,
    check_planted_bugs,
    claim_hook,
    lease_holder,
    plant_store_bugs,
)
from ._sim_trace import Trace
from ._snapshots import MemorySnapshotter, memory_attention, sqlite_attention, sqlite_snapshot

if TYPE_CHECKING:
    from .._declarations import Overlap, RegisteredTrigger, Trigger
    from .._store._models import Result, ResumePoint
    from .._store._protocol import TriggerStore

__all__ = ["SimConfig", "SimReport", "simulate", "simulate_async"]

#: The names the checker tests use (``tests/simulation/test_checkers.py``).
_CallerState = CallerState


class SimReport(msgspec.Struct, frozen=True, kw_only=True):
    """What a simulation did; byte-identical (``to_json``) for one seed and configuration."""

    seed: int
    days: float
    store: str
    schedulers: int
    epoch_ms: int
    triggers: list[str]
    counts: dict[str, int]
    checks: dict[str, int]
    trace_lines: int
    trace_sha256: str
    final_state_sha256: str

    def to_json(self) -> bytes:
        return msgspec.json.encode(self)

    @property
    def trigger_days(self) -> float:
        return self.days * len(self.triggers)


class _World:
    """One simulated world: its parts (see the module docstring) and the choreography that
    runs them: scheduler slots that crash and restart, the admin's edits, the clock jumps, the
    quiet phase and the final checks."""

    def __init__(self, seed: int, config: SimConfig) -> None:
        self.bugs = check_planted_bugs(config.planted_bugs)
        self.seed = seed
        self.config = config
        counts: collections.Counter[str] = collections.Counter()
        self.draws = Draws(seed, config, counts)
        self.epoch = self.draws.epoch
        self.wall = SimWallClock(self.epoch)
        self.trace = Trace(config.trace_tail, self.wall, counts)
        self.options = SchedulerOptions(
            poll_interval=config.poll_interval,
            run_poll_interval=config.run_poll_interval,
            fire_retention=config.fire_retention_days * DAY_S,
        )
        self.callers: dict[str, CallerState] = {}
        self.scopes: dict[str, trio.CancelScope] = {}
        self.runner: ScriptedRunner | OwnedRunner | LocalWorldRunner
        if config.local_runner:
            # Runs launched through real LocalRunner processes on a run store whose writes
            # fail before and after their commit (the write-fault world, W1-W4).
            clock = TrioWallClock(self.epoch)
            self.runner = LocalWorldRunner(self.trace, self.draws, clock, config.owners, self.bugs)
        elif config.run_store:
            # The run world keeps its own clock: wall jumps happen on the schedulers' host.
            clock = TrioWallClock(self.epoch)
            hold = lease_holder(self.bugs)
            self.runner = OwnedRunner(self.trace, self.draws, clock, config.owners, hold)
        else:
            draws = self.draws
            self.runner = ScriptedRunner(
                plan=draws.plan, inspect_fault=draws.inspect_fault, cancel_fault=draws.cancel_fault
            )
        self.observer = StoreObserver(
            self.trace, self.wall, config, self.epoch, self.callers, self.runner
        )
        self.runners = RunnerObserver(self.trace, self.options, self.callers)
        self.quiet_start = 0
        self.trigger_ids: list[str] = []
        self.raw_store: TriggerStore | None = None

    @property
    def violation(self) -> Violation | None:
        return self.trace.violation

    @property
    def declarations(self) -> dict[tuple[str, int], RegisteredTrigger]:
        return self.observer.declarations

    # ------------------------------------------------------------------ the observers

    def decide(self, caller: str, method: str, args: tuple[Any, ...]) -> Fault | None:
        """The trigger store's faults: drawn, and slowed by the configured latency."""
        fault = self.draws.store_fault(caller, method, args)
        latency = self.config.store_latency
        if fault is None and latency > 0 and caller.startswith("s"):
            fault = Fault(kind="slow", delay=latency)
        return fault

    async def before(self, call: StoreCall) -> None:
        await self.observer.before(call)

    async def after(self, call: StoreCall) -> None:
        await self.observer.after(call)
        lost = call.fault == "fail_after"  # (the failure is raised after this observer)
        if isinstance(self.runner, LocalWorldRunner) and call.error is None:
            if not lost:
                # (A claim whose answer was lost is not the caller's to work on: the lease's.)
                self.runner.saw_claim(call.caller, call.answer)
            if call.method == "record_result" and call.args[0].outcome == "failed":
                result = call.args[0]
                self.runner.check_failed_record(result.trigger_id, result.occurrence, result.run_id)
        # A crash right after a store call returned (the caller never sees the answer used).
        if call.caller in self.scopes and self.draws.crash_after_call():
            self.crash(call.caller, f"after {call.method}")
        elif (
            call.caller in self.scopes
            and call.error is None
            and self.draws.crash_after_reserve(call.method, call.answer)
        ):
            self.crash(call.caller, f"after a reservation from {call.method}")

    def check_result(self, caller: str, cs: CallerState, result: Result) -> None:
        self.observer.check_result(caller, cs, result)

    def claimant_working(self, caller: str, trigger_id: str, reservation: str) -> bool | None:
        """Whether live scheduler ``caller`` still works on ``reservation`` (``None``: it is
        not alive, so the reservation's lease is what frees the trigger).

        It does while it owns the reservation, and also while a launch task of its own runs
        for the reservation's occurrence: once the run is started that task owns the run id
        and is still writing ``launched`` (retried while the store fails), which is what turns
        the reservation into the run."""
        cs = self.callers.get(caller)
        if caller not in self.scopes or cs is None or cs.closing or cs.scheduler is None:
            return None
        owned = cs.scheduler.owned()
        if any(entry.run_id == reservation for entry in owned.values()):
            return True
        entry = owned.get(trigger_id)
        return (
            entry is not None
            and entry.scope is not None
            and entry.occurrence == reservation_occurrence(reservation)
        )

    async def check_reservations(self) -> None:
        """W3, every few seconds: each trigger's holder, read from the unwrapped store."""
        runner = self.runner
        store = self.raw_store
        if not isinstance(runner, LocalWorldRunner) or store is None:
            return
        for tid in self.trigger_ids:
            held = await store.inspect(tid)
            holder = held.active_run_id
            reservation = holder or ""

            def working(caller: str, tid: str = tid, reservation: str = reservation) -> bool | None:
                return self.claimant_working(caller, tid, reservation)

            runner.check_held(tid, holder, working)

    def runner_call(self, caller: str, what: str, arg: str) -> None:
        self.runners.runner_call(caller, what, arg)

    def runner_done(
        self,
        caller: str,
        what: str,
        arg: str,
        began: float,
        error: BaseException | None,
        answer: object,
    ) -> None:
        self.runners.runner_done(caller, what, arg, began, error, answer)

    # ------------------------------------------------------------------ the choreography

    def crash(self, caller: str, why: str) -> None:
        scope = self.scopes.get(caller)
        cs = self.callers.get(caller)
        if scope is None or cs is None or cs.closing:
            return
        cs.closing = True
        self.trace.counts["crashes"] += 1
        self.trace.event(f"CRASH {caller} ({why})")
        scope.cancel()

    async def admin(self, store: FaultyTriggerStore) -> None:
        rng = self.draws.rng
        rate = self.config.edits_per_day / DAY_S
        disabled_until: dict[str, float] = {}
        paused_until: dict[str, float] = {}
        while True:
            wait = rng.expovariate(rate) if rate > 0 else math.inf
            if self.config.edit_on_boundaries:
                # Land the edit in the same instant as the ticks of a boundary, so that it
                # races the schedulers' listings and claims (stale revisions are then common).
                now_ms = self.wall.now_ms()
                latency = self.config.store_latency
                if latency > 0:
                    offset = rng.random() * 4 * latency  # inside the tick's calls
                else:
                    offset = 0 if rng.random() < 0.5 else 0.001
                wait = (H - now_ms % H) / 1000 + offset
            with trio.move_on_after(wait):
                await self.draws.quiet_event.wait()
            now_t = trio.current_time()
            if self.draws.quiet:
                for tid in sorted(disabled_until):
                    await self.edit(store, tid, enabled=True)
                for tid in sorted(paused_until):
                    await self.resume(store, tid)
                return
            for tid in sorted(disabled_until):
                if disabled_until[tid] <= now_t:
                    del disabled_until[tid]
                    await self.edit(store, tid, enabled=True)
            for tid in sorted(paused_until):
                if paused_until[tid] <= now_t:
                    del paused_until[tid]
                    await self.resume(store, tid)
            tid = rng.choice(self.trigger_ids)
            if tid in disabled_until or tid in paused_until:
                continue
            r = rng.random()
            # (A planted bug's own store wrapper may keep no operator state: no pauses there.)
            if r < 0.1 and self.config.pauses and store.keeps_operator_state:
                paused_until[tid] = now_t + rng.uniform(600, 4 * 3600)
                self.trace.counts["pauses"] += 1
                self.trace.event(f"PAUSE {tid}")
                await store.pause(tid, note="simulated", by="admin")
            elif r < 0.25:
                disabled_until[tid] = now_t + rng.uniform(600, 4 * 3600)
                await self.edit(store, tid, enabled=False)
            elif r < 0.55:
                await self.edit(store, tid, overlap=rng.choice(OVERLAPS))
            elif r < 0.8 or tid in self.draws.audited:  # audited triggers keep their cron
                await self.edit(store, tid, input={"n": rng.randrange(1000)})
            else:
                await self.edit(store, tid, cron=rng.choice(CRONS))

    def backfill_candidates(self, store: FaultyTriggerStore) -> list[str]:
        """The triggers the admin may backfill: none when backfills are off, or the store keeps
        no operator state, or every trigger is audited (the backfiller task is then not even
        started, so such a world interleaves its tasks exactly as it did before backfills)."""
        if self.config.backfills_per_day <= 0 or not store.keeps_operator_state:
            return []
        return [tid for tid in self.trigger_ids if tid not in self.draws.audited]

    async def backfiller(self, store: FaultyTriggerStore) -> None:
        """The admin's backfills (T39, T40): a few hours of past boundaries of a trigger that is
        not audited (its catch-up check counts every row), under its policy or buffer-one;
        now and then a running one is cancelled instead. Refusals (a trigger paused past its
        progress, a bound, a clock jump) are counted."""
        rng = random.Random(self.seed * 7919 + 17)  # a stream of its own
        rate = self.config.backfills_per_day / DAY_S
        candidates = self.backfill_candidates(store)
        while not self.draws.quiet:
            with trio.move_on_after(rng.expovariate(rate)):
                await self.draws.quiet_event.wait()
            if self.draws.quiet:
                return
            tid = rng.choice(candidates)
            current = await store.get(tid)
            if current is not None and current.backfill is not None and current.backfill.running:
                if rng.random() < 0.5:
                    self.trace.counts["backfill.cancelled"] += 1
                    self.trace.event(f"BACKFILL {tid} cancelled")
                    await store.cancel_backfill(tid)
                continue
            end = self.wall.now_ms() - math.floor(rng.uniform(0, 12) * H)
            start = end - math.floor(rng.uniform(0, 6) * H)
            overlap: Overlap | None = rng.choice((None, "buffer-one"))
            bound = rng.choice((None, None, 3))
            try:
                await store.start_backfill(
                    tid, start=start, end=end, max_boundaries=bound, overlap=overlap, by="admin"
                )
            except TriggerError as error:
                self.trace.counts[f"backfill.refused.{error.path}"] += 1
                continue
            self.trace.counts["backfills"] += 1
            self.trace.event(f"BACKFILL {tid} [{start}, {end}] overlap {overlap}")

    async def resume(self, store: FaultyTriggerStore, tid: str) -> None:
        """Resume ``tid``: an audited trigger (no boundary may be lost) under its policy, any
        other from a point drawn at random."""
        point: ResumePoint = "policy"
        if tid not in self.draws.audited and self.draws.rng.random() < 0.5:
            point = "now"
        resumed = await store.resume(tid, point=point)
        self.trace.event(f"RESUME {tid} from {point} (skipped {resumed.skipped})")

    async def edit(self, store: FaultyTriggerStore, tid: str, **changes: Any) -> None:
        current = await store.get(tid)
        assert current is not None
        updated = msgspec.structs.replace(current.declaration, **changes)
        self.trace.counts["edits"] += 1
        self.trace.event(f"EDIT {tid} {sorted(changes.items())!r}")
        await store.register(updated)

    async def jumper(self) -> None:
        rng = self.draws.rng
        rate = self.config.jumps_per_day / DAY_S
        while not self.draws.quiet:
            wait = rng.expovariate(rate) if rate > 0 else math.inf
            with trio.move_on_after(wait):
                await self.draws.quiet_event.wait()
            if self.draws.quiet:
                return
            if rng.random() < 0.7:
                jump = math.floor(rng.uniform(60, 1800) * 1000)
            else:
                jump = -math.floor(rng.uniform(30, 600) * 1000)
            self.wall.offset_ms += jump
            self.trace.counts["clock_jumps"] += 1
            self.trace.event(f"JUMP {jump} ms")

    async def slot(self, index: int, faulty: FaultyTriggerStore) -> None:
        rng = self.draws.rng
        rate = self.config.crashes_per_day / DAY_S
        generation = 0
        while True:
            caller = f"s{index}.{generation}"
            generation += 1
            store = faulty.view(caller)
            runner = RecordingRunner(self.runners, self.runner, caller)
            options = msgspec.structs.replace(self.options, host=caller)
            cs = CallerState(None)
            self.callers[caller] = cs
            self.trace.event(f"START {caller}")
            self.trace.counts["scheduler_starts"] += 1
            hook = SerialTicks(self.trace, caller, cs, claim_hook(self.bugs, self.wall))
            with trio.CancelScope() as scope:
                self.scopes[caller] = scope
                try:
                    async with open_scheduler(
                        store, runner, options=options, clock=self.wall, _hook=hook
                    ) as sch:
                        cs.scheduler = sch
                        plant_scheduler_bugs(self.bugs, sch)
                        try:
                            async with trio.open_nursery() as nursery:
                                await nursery.start(sch.serve)
                                if self.draws.quiet or rate <= 0:
                                    await trio.sleep_forever()
                                await trio.sleep(rng.expovariate(rate))
                                if not self.draws.quiet:
                                    self.crash(caller, "lifetime over")
                                else:
                                    await trio.sleep_forever()
                        finally:
                            await cancel_owned_runs(self.bugs, sch, runner.cancel)
                except BaseExceptionGroup as group:
                    self.trace.violated("T34", f"{caller} raised an exception group {group!r}")
                except Exception as exc:
                    self.trace.violated("T28", f"{caller} serve ended with {exc!r}")
            self.scopes.pop(caller, None)
            self.trace.event(f"EXIT {caller}")
            if not self.draws.quiet:
                with trio.move_on_after(rng.uniform(0, 3 * 3600)):
                    await self.draws.quiet_event.wait()

    async def firer(self, faulty: FaultyTriggerStore) -> None:
        """Manual fires ("run now") at drawn moments, each from a process of its own that does
        not serve, as ``trio-triggers fire`` runs: it claims through a scheduler that launches
        and leaves (the serving schedulers adopt the run), or dies right after the claim (the
        lease re-arms the fire for them). Refusals are expected: a paused or disabled trigger,
        another trigger's key, an injected store or runner failure."""
        rate = self.config.manual_fires_per_day / DAY_S
        if not hasattr(faulty.inner, "claim_manual"):
            return
        keys: dict[str, str] = {}
        number = 0
        while True:
            with trio.move_on_after(self.draws.rng.expovariate(rate)):
                await self.draws.quiet_event.wait()
            if self.draws.quiet:
                return
            drawn = self.draws.manual_fire(self.trigger_ids, keys)
            caller = f"s-fire.{number}"
            number += 1
            await self.fire_now(faulty, caller, drawn)

    async def fire_now(self, faulty: FaultyTriggerStore, caller: str, drawn: Any) -> None:
        store = faulty.view(caller)
        runner = RecordingRunner(self.runners, self.runner, caller)
        cs = CallerState(None)
        self.callers[caller] = cs
        self.trace.counts["manual.fires"] += 1
        self.trace.event(f"FIRE {caller} {drawn!r}")
        options = msgspec.structs.replace(self.options, host=caller)
        with trio.CancelScope() as scope:
            self.scopes[caller] = scope
            try:
                async with open_scheduler(store, runner, options=options, clock=self.wall) as sch:
                    cs.scheduler = sch
                    if drawn.dies_after_claim:
                        await store.claim_manual(
                            drawn.trigger_id, key=drawn.key, input=drawn.input, by=caller
                        )
                        self.crash(caller, "after its manual claim, before launching")
                        await trio.sleep_forever()
                    fired = await sch.fire(
                        drawn.trigger_id,
                        key=drawn.key,
                        input=drawn.input,
                        overlap=drawn.overlap,
                        by=caller,
                    )
                    self.trace.counts[f"manual.{fired.action or 'repeated'}"] += 1
            except TriggerError as error:
                self.trace.counts[f"manual.refused.{error.code}"] += 1
            except Exception as exc:
                self.trace.violated("T28", f"{caller} fire ended with {exc!r}")
        cs.closing = True
        self.scopes.pop(caller, None)
        self.trace.event(f"EXIT {caller}")

    async def open_store(self, stack: contextlib.AsyncExitStack) -> TriggerStore:
        """The world's trigger store (closed by ``stack``); the observer gets its readers."""
        obs = self.observer
        if self.config.store == "memory":
            memory = MemoryTriggerStore(clock=self.wall)
            obs.snapshot = MemorySnapshotter(memory)
            obs.attention = memory_attention(memory)
            return memory
        tmp = tempfile.TemporaryDirectory(prefix="tt-sim-")
        stack.callback(tmp.cleanup)
        path = os.path.join(tmp.name, "sim.sqlite")
        store = await stack.enter_async_context(open_sqlite_trigger_store(path, clock=self.wall))
        obs.snapshot, close_reader = sqlite_snapshot(path)
        stack.callback(close_reader)
        obs.attention, close_attention = sqlite_attention(path)
        stack.callback(close_attention)
        return store

    def quiet_down(self, faulty: FaultyTriggerStore) -> None:
        """The end of the chaos: no more faults, crashes, edits or jumps; hung calls return."""
        self.quiet_start = self.wall.now_ms()
        self.draws.quiet = True
        self.trace.event("QUIET")
        faulty.set_faults_enabled(False)
        faulty.release_hangs()
        self.runner.limit_remaining(600.0)
        self.draws.quiet_event.set()

    async def run(self) -> SimReport:
        config = self.config
        obs = self.observer
        async with contextlib.AsyncExitStack() as stack:
            store = await self.open_store(stack)
            inner = plant_store_bugs(self.bugs, store)
            wrapper = FaultyTriggerStore if config.listing else IndexedFaultyTriggerStore
            faulty = wrapper(inner, decide=self.decide, observer=self, serialize=True, record=False)
            admin = faulty.view("admin")
            triggers = self.draws.triggers()
            self.trigger_ids = [t.id for t in triggers]
            for trigger in triggers:
                await admin.register(trigger)
            self.raw_store = inner
            if isinstance(self.runner, LocalWorldRunner):
                self.runner.register_flows([t.flow_id for t in triggers])
                self.runner.check_reservations = self.check_reservations
            with trio.CancelScope() as world_scope:
                self.trace.stop_scope = world_scope
                async with trio.open_nursery() as nursery:
                    if isinstance(self.runner, OwnedRunner | LocalWorldRunner):
                        nursery.start_soon(self.runner.serve)
                    nursery.start_soon(self.admin, admin)
                    if self.backfill_candidates(admin):
                        nursery.start_soon(self.backfiller, admin)
                    nursery.start_soon(self.jumper)
                    if config.manual_fires_per_day > 0:  # (no task at all otherwise: the
                        nursery.start_soon(self.firer, faulty)  # drawn worlds stay the same)
                    async with trio.open_nursery() as slots:
                        for index in range(config.schedulers):
                            slots.start_soon(self.slot, index, faulty)
                        await trio.sleep(config.days * DAY_S)
                        self.quiet_down(faulty)
                        await trio.sleep(config.quiet_hours * 3600)
                        check_ticking(obs, set(self.scopes))
                        for caller in sorted(self.callers):
                            self.callers[caller].closing = True
                        slots.cancel_scope.cancel()
                    await final_checks(
                        obs,
                        admin,
                        audited=self.draws.audited,
                        quiet_start=self.quiet_start,
                    )
                    nursery.cancel_scope.cancel()
            if self.trace.violation is not None:
                raise SimulationViolation(
                    self.seed,
                    self.trace.violation,
                    list(self.trace.tail),
                    config.describe(self.seed),
                )
            assert obs.snapshot is not None
            final = obs.snapshot(None)
        digest = hashlib.sha256(self.trace.norm(repr(_canonical(final))).encode()).hexdigest()
        self.trace.counts["runner.duplicate_starts"] = self.runner.duplicate_starts
        if isinstance(self.runner, OwnedRunner | LocalWorldRunner):
            self.trace.counts["run_store.rows"] = self.runner.row_count()
        self.trace.counts["runner.runs"] = len(self.runner.runs)
        return SimReport(
            seed=self.seed,
            days=config.days,
            store=config.store,
            schedulers=config.schedulers,
            epoch_ms=self.epoch,
            triggers=[_describe(t) for t in triggers],
            counts=dict(sorted(self.trace.counts.items())),
            checks={info.id: self.trace.checks.get(info.id, 0) for info in CATALOGUE},
            trace_lines=self.trace.lines,
            trace_sha256=self.trace.hash.hexdigest(),
            final_state_sha256=digest,
        )


def _describe(t: Trigger) -> str:
    return f"{t.id} {t.cron!r} {t.timezone} {t.overlap} {t.catch_up}/{t.max_catch_up}"


def _canonical(state: StoreState) -> tuple[Any, ...]:
    return (
        sorted(state.triggers.items()),
        sorted(state.ledger.items()),
    )


def _check_clock() -> None:
    clock = trio.lowlevel.current_clock()
    if not isinstance(clock, trio.testing.MockClock) or clock.autojump_threshold != 0:
        raise RuntimeError(
            "simulate_async must run under trio.testing.MockClock(autojump_threshold=0) "
            "(use the autojump_clock fixture, or the synchronous simulate())"
        )


async def simulate_async(seed: int, config: SimConfig | None = None) -> SimReport:
    """Run one simulated world inside the current Trio run (which must use an autojump
    ``MockClock``); return its report or raise :class:`SimulationViolation`."""
    _check_clock()
    with seeded_trio_scheduler(seed):
        world = _World(seed, config if config is not None else SimConfig())
        try:
            return await world.run()
        except InvariantViolation as exc:
            raise SimulationViolation(
                seed, exc.violation, list(world.trace.tail), world.config.describe(seed)
            ) from None


def simulate(seed: int, config: SimConfig | None = None, **overrides: Any) -> SimReport:
    """Run one simulated world in its own ``trio.run`` under ``MockClock(autojump_threshold=0)``.

    ``overrides`` replace fields of ``config`` (for example ``simulate(7, days=1)``).
    """
    base = config if config is not None else SimConfig()
    if overrides:
        base = msgspec.structs.replace(base, **overrides)

    async def main() -> SimReport:
        return await simulate_async(seed, base)

    return trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
