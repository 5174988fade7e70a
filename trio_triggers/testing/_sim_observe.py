"""The simulator's observers: what the checkers see of every store and runner call.

:class:`StoreObserver` is the fault-injecting trigger store's observer: before a call it checks
what a scheduler asks (T18, T23, T30, the results of T21/T22/T29), after it the exact
transition (``_invariants.check_transition`` and T35/T36) and what the caller keeps in memory
(T17); it also traces the call and learns what the final checks need (declarations, grants,
failed claims, orphaned predecessors). :class:`RunnerObserver` checks every runner call a
scheduler makes (T19, T22-T24, T27) through the :class:`RecordingRunner` each scheduler is
given, and :class:`SerialTicks` is the scheduler hook that checks T26.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, Protocol, TypeVar

import trio

from .._cron import Cron
from .._errors import TriggerError
from .._identities import idempotency_key, is_reservation, reservation_occurrence
from .._scheduler._hook import SchedulerHook
from ._faults import TRIGGER_STORE_READS, StoreCall
from ._invariants import (
    Grants,
    StoreState,
    Violation,
    check_transition,
    claim_view,
    unfinished,
)

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from .._declarations import Backfill, RegisteredTrigger, Trigger
    from .._scheduler._core import Scheduler
    from .._scheduler._options import SchedulerOptions
    from .._store._models import Result
    from ._runner import RunState, StartRequestLike
    from ._sim_draws import SimConfig, SimWallClock
    from ._sim_trace import Trace
    from ._snapshots import AttentionReader

__all__ = [
    "CallerState",
    "RecordingRunner",
    "RunnerObserver",
    "SerialTicks",
    "SimRunner",
    "StoreObserver",
]


T = TypeVar("T")


class SimRunner(Protocol):
    """The world's runner (scripted, or over a run store), and the truth the checks read."""

    async def start(self, request: StartRequestLike) -> str: ...

    async def inspect(self, run_id: str) -> RunState: ...

    async def cancel(self, run_id: str) -> None: ...

    def state_of(self, run_id: str) -> RunState: ...

    def stopped_for(self, run_id: str) -> float | None: ...


class CallerState:
    """What the checkers remember of one scheduler instance (a caller ``s<slot>.<n>``)."""

    def __init__(self, scheduler: Scheduler | None) -> None:
        self.scheduler = scheduler
        self.closing = False
        self.granted_keys: set[str] = set()
        self.displaced: set[str] = set()
        self.lost: dict[str, tuple[str, int, bool]] = {}
        self.cancelled_ok: set[str] = set()
        self.watermarks: dict[str, int] = {}
        self.last_inspect: dict[str, RunState] = {}
        self.last_start: dict[str, str] = {}
        self.pending_retry: set[str] = set()
        self.ticking = 0
        self.last_list_ms: int | None = None


class RecordingRunner:
    """One scheduler's view of the runner: checks every call it makes (T19, T22-T24, T27)."""

    def __init__(self, observer: RunnerObserver, runner: SimRunner, caller: str) -> None:
        self._observer = observer
        self._runner = runner
        self._caller = caller

    async def start(self, request: StartRequestLike) -> str:
        key = request.idempotency_key
        return await self._observed("start", key, lambda: self._runner.start(request))

    async def inspect(self, run_id: str) -> RunState:
        return await self._observed("inspect", run_id, lambda: self._runner.inspect(run_id))

    async def cancel(self, run_id: str) -> None:
        await self._observed("cancel", run_id, lambda: self._runner.cancel(run_id))

    async def _observed(self, what: str, arg: str, call: Callable[[], Awaitable[T]]) -> T:
        await trio.lowlevel.checkpoint_if_cancelled()
        observer = self._observer
        observer.runner_call(self._caller, what, arg)
        began = trio.current_time()
        try:
            answer = await call()
        except BaseException as exc:
            observer.runner_done(self._caller, what, arg, began, exc, None)
            raise
        observer.runner_done(self._caller, what, arg, began, None, answer)
        return answer


class RunnerObserver:
    """Checks every runner call a scheduler makes (see :class:`RecordingRunner`)."""

    def __init__(
        self, trace: Trace, options: SchedulerOptions, callers: dict[str, CallerState]
    ) -> None:
        self.trace = trace
        self.counts = trace.counts
        self.checks = trace.checks
        self.violated = trace.violated
        self.options = options
        self.callers = callers

    def runner_call(self, caller: str, what: str, arg: str) -> None:
        cs = self.callers.get(caller)
        self.counts[f"runner.{what}"] += 1
        if cs is None:
            return
        if cs.closing and what in ("start", "cancel"):
            self.violated("T23", f"{caller} called runner.{what}({arg!r}) after scope exit")
        if what in ("inspect", "cancel"):
            self.checks["T24"] += 1
            if is_reservation(arg):
                self.violated("T24", f"{caller} passed reservation {arg!r} to runner.{what}")
        if what == "start":
            self.checks["T19"] += 1
            if arg not in cs.granted_keys:
                self.violated("T19", f"{caller} started {arg!r} without a granted claim for it")
        if what == "cancel":
            self.checks["T22"] += 1
            lost = cs.lost.get(arg)
            if arg not in cs.displaced and not (lost is not None and lost[2]):
                self.violated(
                    "T22", f"{caller} cancelled {arg!r}: not displaced by supersede, not a loser"
                )

    def runner_done(
        self,
        caller: str,
        what: str,
        arg: str,
        began: float,
        error: BaseException | None,
        answer: object,
    ) -> None:
        elapsed = trio.current_time() - began
        limit = {
            "start": self.options.start_timeout,
            "inspect": self.options.inspect_timeout,
            "cancel": self.options.cancel_timeout,
        }[what]
        assert isinstance(limit, int | float)
        self.checks["T27"] += 1
        if elapsed > limit + 1.0:
            self.violated("T27", f"{caller} runner.{what}({arg!r}) took {elapsed:.3f} s")
        cs = self.callers.get(caller)
        outcome = f"!{type(error).__name__}" if error is not None else repr(answer)
        self.trace.event(f"{caller} runner.{what}({arg!r}) -> {outcome}")
        if cs is not None and what == "start":
            if error is None:
                cs.last_start[arg] = "answered"
            elif isinstance(error, trio.Cancelled):
                cs.last_start[arg] = "cancelled (timed out or detached)"
            else:
                cs.last_start[arg] = "refused"
        if cs is not None and error is None:
            if what == "cancel":
                cs.cancelled_ok.add(arg)
            if what == "inspect":
                assert isinstance(answer, str)
                cs.last_inspect[arg] = answer  # type: ignore[assignment]


class SerialTicks(SchedulerHook):
    """T26: one scheduler's ticks never overlap; claims go through ``claims`` (a planted bug's
    hook, or the default)."""

    def __init__(self, trace: Trace, caller: str, cs: CallerState, claims: SchedulerHook):
        self._trace = trace
        self._caller = caller
        self._cs = cs
        self._claims = claims

    async def around_tick(self, tick: Callable[[], Awaitable[None]]) -> None:
        cs = self._cs
        cs.ticking += 1
        self._trace.checks["T26"] += 1
        if cs.ticking > 1:
            self._trace.violated("T26", f"{self._caller}: two ticks overlap")
        try:
            await tick()
        finally:
            cs.ticking -= 1

    async def around_claim(
        self,
        claim: Callable[[RegisteredTrigger, int], Awaitable[None]],
        trigger: RegisteredTrigger,
        occurrence: int,
    ) -> None:
        await self._claims.around_claim(claim, trigger, occurrence)


class StoreObserver:
    """Checks and traces every trigger-store call; remembers what the final checks need."""

    def __init__(
        self,
        trace: Trace,
        clock: SimWallClock,
        config: SimConfig,
        epoch: int,
        callers: dict[str, CallerState],
        runner: SimRunner,
    ) -> None:
        self.trace = trace
        self.counts = trace.counts
        self.checks = trace.checks
        self.violated = trace.violated
        self.clock = clock
        self.config = config
        self.epoch = epoch
        self.callers = callers
        self.runner = runner
        self.grants = Grants()
        self.parts: dict[str, StoreState] | None = None
        self.prev_part: StoreState | None = None
        self.declarations: dict[tuple[str, int], RegisteredTrigger] = {}
        self.crons: dict[tuple[str, str | None], Cron] = {}
        self.granted: dict[str, set[int]] = {}
        self.max_wall = 0
        self.spec_gap_orphans: set[str] = set()
        #: Set once the store is open: exact snapshots, and (T35) the attention index.
        self.snapshot: Callable[[str | None], StoreState] | None = None
        self.attention: AttentionReader | None = None
        #: T35: the live takes (trigger id -> the instant it was taken to, its exact instant).
        self.takes: dict[str, tuple[int, int | None]] = {}
        #: T40: each trigger's latest backfill, with the schedule it was started under.
        self.backfilled: dict[str, tuple[Backfill | None, str, str | None]] = {}

    async def before(self, call: StoreCall) -> None:
        now = self.clock.now_ms()
        self.max_wall = max(self.max_wall, now)
        if self.parts is None and self.snapshot is not None:
            self.parts = _split(self.snapshot(None))
        cs = self.callers.get(call.caller)
        if cs is None:
            return
        method = call.method
        if cs.closing and method not in TRIGGER_STORE_READS:
            self.violated("T23", f"{call.caller} started {method}{call.args!r} after scope exit")
        self.checks["T23"] += 1
        if method == "claim_fire":
            tid, occ = call.args[0], call.args[1]
            rev = int(call.kwargs.get("expected_revision", -1))
            decl = self.declarations.get((tid, rev))
            if decl is not None:
                self.checks["T18"] += 1
                self.checks["T30"] += 1
                if not decl.schedulable:
                    self.violated("T30", f"{call.caller} claimed {occ} of disabled {tid} r{rev}")
                if decl.resume_after is not None and occ <= decl.resume_after:
                    self.violated(
                        "T30",
                        f"{call.caller} claimed {tid}@{occ}, skipped by a resume from now "
                        f"(through {decl.resume_after})",
                    )
                cron = self.cron_of(decl)
                latest = cron.previous_at_or_before(self.max_wall)
                if occ > latest or cron.previous_at_or_before(occ) != occ:
                    self.violated(
                        "T18", f"{call.caller} claimed {tid}@{occ} early (latest {latest})"
                    )
        elif method == "backfill_step":
            tid = call.args[0]
            rev = int(call.kwargs.get("expected_revision", -1))
            decl = self.declarations.get((tid, rev))
            if decl is not None:
                self.checks["T30"] += 1
                if not decl.schedulable:
                    self.violated("T30", f"{call.caller} stepped a backfill of disabled {tid}")
        elif method == "claim_pending":
            tid = call.args[0]
            rev = int(call.kwargs.get("expected_revision", -1))
            decl = self.declarations.get((tid, rev))
            if decl is not None and not decl.schedulable:
                self.checks["T30"] += 1
                if tid not in cs.pending_retry:
                    self.violated("T30", f"{call.caller} claimed pending of disabled {tid}")
            cs.pending_retry.discard(tid)
        elif method == "record_result":
            self.check_result(call.caller, cs, call.args[0])
        elif method in ("list", "due"):
            cs.last_list_ms = now

    def check_result(self, caller: str, cs: CallerState, result: Result) -> None:
        key = idempotency_key(result.trigger_id, result.occurrence)
        if result.outcome == "failed" and is_reservation(result.run_id):
            self.checks["T21"] += 1
            last = cs.last_start.get(key)
            if last != "refused":
                self.violated("T21", f"{caller} recorded failed for {key}; its start was {last}")
        elif result.outcome in ("completed", "failed") and result.run_id is not None:
            self.checks["T29"] += 1
            truth = self.runner.state_of(result.run_id)
            want = (
                ("completed",)
                if result.outcome == "completed"
                else ("failed", "cancelled", "missing")
            )
            if truth not in want:
                self.violated(
                    "T29",
                    f"{caller} recorded {result.outcome} for {result.run_id} which is {truth}",
                )
        elif result.outcome == "superseded" and result.run_id is not None:
            self.checks["T22"] += 1
            if result.run_id not in cs.cancelled_ok:
                self.violated(
                    "T22", f"{caller} recorded superseded for {result.run_id} uncancelled"
                )

    def check_attention(self, call: StoreCall) -> None:
        """T35: every row's stored attention instant is its exact one, or a live take's.

        A ``due`` read that takes rows moves their instant to ``now + hold``; that instant
        stands while the row's exact instant is what it was at the take. Any other difference
        is a row the index hides or delays (or shows early).
        """
        if self.attention is None or self.config.listing:
            return
        method = call.method
        if call.error is None and method == "due":
            hold = int(call.kwargs.get("hold_ms", 0))
            if hold > 0:
                taken = [row.row.trigger_id for row in call.answer]
                before = self.attention(None)
                for trigger_id in taken:
                    self.takes[trigger_id] = (int(call.args[0]) + hold, before[trigger_id][1])
        scope = None if method in ("due", "prune_fires") else _scope_of(method, call.args)
        if method in TRIGGER_STORE_READS and method != "due":
            return
        for trigger_id, (stored, exact) in self.attention(scope).items():
            self.checks["T35"] += 1
            if stored == exact:
                continue
            take = self.takes.get(trigger_id)
            if take is not None and stored == take[0] and exact == take[1]:
                continue
            self.violated(
                "T35",
                f"after {call.caller}'s {method}: {trigger_id}'s attention instant is "
                f"{stored}, its exact one {exact} (take {take})",
            )

    def check_reservations(self, call: StoreCall, post: StoreState) -> None:
        """T36: while a reservation holds a trigger, its occurrence's ledger row is unfinished.

        A claim that decided on a stale ledger (the PostgreSQL bug of a joined read under a
        waited lock: ``docs/postgres.md``) records the occurrence ``skipped`` under the live
        reservation of the claimer it raced, which then can never launch under it.
        """
        for trigger_id, row in post.triggers.items():
            occurrence = reservation_occurrence(row.active_run_id)
            if occurrence is None:
                continue
            self.checks["T36"] += 1
            fire = post.ledger.get((trigger_id, occurrence))
            if not unfinished(fire):
                outcome = None if fire is None else fire.outcome
                self.violated(
                    "T36",
                    f"after {call.caller}'s {call.method}: {trigger_id} is held by the "
                    f"reservation of {occurrence}, whose ledger row is {outcome}",
                )

    def check_backfill_claim(self, call: StoreCall) -> None:
        """T18 for a backfill: what a step claims is a boundary of the schedule it claimed
        under, and in the past (a backfill never claims ahead of the clock)."""
        if call.method != "backfill_step" or call.error is not None or not call.answer.claimed:
            return
        tid, occ = call.args[0], call.args[1]
        self.counts["backfill.claims"] += 1
        decl = self.declarations.get((tid, int(call.kwargs.get("expected_revision", -1))))
        if decl is None:
            return
        self.checks["T18"] += 1
        cron = self.cron_of(decl)
        latest = cron.previous_at_or_before(self.max_wall)
        if occ > latest or cron.previous_at_or_before(occ) != occ:
            self.violated("T18", f"{call.caller}'s backfill claimed {tid}@{occ} (latest {latest})")

    def check_backfill_progress(self, call: StoreCall) -> None:
        """T39: a step that moves a backfill's progress moves it to the next boundary of the
        schedule it stepped under (or finishes it when that is past the interval's end)."""
        if call.method != "backfill_step" or call.error is not None or self.prev_part is None:
            return
        tid, occ = call.args[0], call.args[1]
        before = self.prev_part.triggers.get(tid)
        after = self.part(tid).triggers.get(tid)
        started = self.backfilled.get(tid)
        decl = self.declarations.get((tid, int(call.kwargs.get("expected_revision", -1))))
        if before is None or after is None or started is None or started[0] is None:
            return
        if before.backfill_next != occ or after.backfill_next == before.backfill_next:
            return
        if decl is None or after.backfill_done is None:
            return
        self.checks["T39"] += 1
        following = self.cron_of(decl).next(occ)
        want = following if following <= started[0].end else None
        if after.backfill_next != want:
            self.violated(
                "T39",
                f"{tid}: a backfill step of {occ} moved its progress to {after.backfill_next}, "
                f"not {want}",
            )

    async def after(self, call: StoreCall) -> None:
        self.check_attention(call)
        self.check_backfill_claim(call)
        cs = self.callers.get(call.caller)
        if call.method not in TRIGGER_STORE_READS and call.method != "heartbeat" and self.snapshot:
            self.check_step(call)
            self.check_backfill_progress(call)
        self.trace_call(call)
        self.learn(call, cs)
        if cs is not None:
            self.follow(call, cs)

    def check_step(self, call: StoreCall) -> None:
        """The step checks of one write: T1-T15, T37, T38 (``check_transition``) and T36."""
        assert self.parts is not None
        assert self.snapshot is not None
        scope = _scope_of(call.method, call.args)
        pre = self.part(scope)
        self.prev_part = pre
        post = self.snapshot(scope)
        self.check_reservations(call, post)
        found = check_transition(
            method=call.method,
            args=call.args,
            kwargs=call.kwargs,
            answer=call.answer,
            error=call.error,
            pre=pre,
            post=post,
            now=self.clock.now_ms(),
            grants=self.grants,
        )
        for inv in ("T1", "T2", "T3", "T4", "T5", "T6", "T7", "T8"):
            self.checks[inv] += 1
        for inv in ("T9", "T10", "T11", "T12", "T13", "T15", "T37", "T38", "T39"):
            self.checks[inv] += 1
        if scope is None:
            self.parts = _split(post)
        else:
            self.parts.pop(scope, None)
            self.parts.update(_split(post))
        if found:
            self.trace.fail(
                Violation(
                    invariant=found[0].invariant,
                    at_ms=found[0].at_ms,
                    detail=self.trace.norm(f"{call.caller}: {found[0].detail}"),
                )
            )

    def learn(self, call: StoreCall, cs: CallerState | None) -> None:
        """What the final checks need: declarations, grants, failed claims, orphans."""
        method = call.method
        if call.error is None and method in (
            "active_run",
            "claim_fire",
            "claim_pending",
            "claim_manual",
            "backfill_step",
        ):
            self.note_orphans(call)
        if call.error is None and method in ("register", "pause", "resume"):
            reg = call.answer.trigger if method == "resume" else call.answer
            self.declarations[(reg.id, reg.revision)] = reg
        if method == "start_backfill" and call.error is None:
            started: RegisteredTrigger = call.answer
            self.backfilled[started.id] = (started.backfill, started.cron, started.timezone)
        view = claim_view(method, call.args, call.answer) if call.error is None else None
        if view is not None and view.claimed:
            self.counts[f"claim.{view.action}"] += 1
            if view.action in ("fire", "supersede"):
                key = idempotency_key(view.trigger_id, view.occurrence)
                self.granted.setdefault(view.trigger_id, set()).add(view.occurrence)
                if cs is not None:
                    cs.granted_keys.add(key)
                    displaced = view.active_run_id
                    if view.action == "supersede" and displaced and not is_reservation(displaced):
                        cs.displaced.add(displaced)

    def follow(self, call: StoreCall, cs: CallerState) -> None:
        """What one scheduler instance learned from its call (for T21/T22), and T17."""
        method = call.method
        error = call.error
        mismatch = isinstance(error, TriggerError) and error.code == "revision_mismatch"
        if method == "claim_pending" and mismatch:
            cs.pending_retry.add(call.args[0])
        if method == "record_result":
            res: Result = call.args[0]
            if call.error is None:
                self.counts[f"result.{res.outcome}"] += 1
            if (
                res.outcome == "launched"
                and isinstance(call.error, TriggerError)
                and call.error.code == "stale_owner"
                and res.run_id is not None
            ):
                cs.lost[res.run_id] = (res.trigger_id, res.occurrence, False)
        if method == "inspect" and call.error is None:
            tid = call.args[0]
            holder = call.answer.active_run_id
            for run_id, (lt, lo, _seen) in list(cs.lost.items()):
                if (
                    lt == tid
                    and holder != run_id
                    and not (is_reservation(holder) and reservation_occurrence(holder) == lo)
                ):
                    cs.lost[run_id] = (lt, lo, True)
        # T17: the per-process watermark never decreases.
        sch = cs.scheduler
        if sch is not None and call.args and isinstance(call.args[0], str):
            tid = call.args[0]
            mark = sch.watermark(tid)
            self.checks["T17"] += 1
            old = cs.watermarks.get(tid)
            if old is not None and (mark is None or mark < old):
                self.violated("T17", f"{call.caller}: watermark of {tid} fell {old} -> {mark}")
            if mark is not None:
                cs.watermarks[tid] = mark

    def note_orphans(self, call: StoreCall) -> None:
        """T20: releasing a reservation never drops the launched predecessor it recorded.

        The contract (§10.2 step 3) restores a released reservation's recorded predecessor only
        under ``supersede``; after an edit away from ``supersede`` that would strand the
        predecessor's ``launched`` row (ticks reach runs only through the holder). Our decision
        restores it under any policy (docs/departures.md), so a drop is a violation.
        """
        tid = call.args[0]
        pre = self.prev_part
        post = self.part(tid)
        before = pre.triggers.get(tid) if pre is not None else None
        after = post.triggers.get(tid)
        if before is None or after is None or not is_reservation(before.active_run_id):
            return
        if after.active_run_id == before.active_run_id:
            return
        occ = reservation_occurrence(before.active_run_id)
        row = pre.ledger.get((tid, occ)) if pre is not None and occ is not None else None
        if row is None or row.run_id is None or is_reservation(row.run_id):
            return
        if after.active_run_id == row.run_id:
            return
        # A supersede claim carries the predecessor along: its new reservation's row names it
        # as the run it displaces (the claimant cancels it and records it superseded).
        new_occ = reservation_occurrence(after.active_run_id)
        carried = post.ledger.get((tid, new_occ)) if new_occ is not None else None
        if carried is not None and carried.run_id == row.run_id:
            return
        if any(r.run_id == row.run_id and r.outcome == "launched" for r in post.ledger.values()):
            self.spec_gap_orphans.add(row.run_id)
            self.violated("T20", f"{tid}: predecessor {row.run_id} dropped by {call.method}")

    def part(self, scope: str | None) -> StoreState:
        assert self.parts is not None
        if scope is not None:
            return self.parts.get(scope, _EMPTY)
        triggers: dict[str, Any] = {}
        ledger: dict[tuple[str, int], Any] = {}
        for piece in self.parts.values():
            triggers.update(piece.triggers)
            ledger.update(piece.ledger)
        return StoreState(triggers=triggers, ledger=ledger, claimed_at_known=True)

    def trace_call(self, call: StoreCall) -> None:
        method = call.method
        self.counts[f"store.{method}"] += 1
        if method in ("list", "heartbeat", "get", "list_enabled", "last_heartbeat"):
            return
        if method == "history":
            self.trace.event(f"{call.caller} history")
            return
        if method in ("due", "holding") and call.error is None:
            ids = [row.row.trigger_id for row in call.answer]
            self.trace.event(f"{call.caller} {method}{call.args!r}{_kw(call.kwargs)} -> {ids}")
            return
        outcome = f"!{call.error!r}" if call.error is not None else repr(call.answer)
        self.trace.event(f"{call.caller} {method}{call.args!r}{_kw(call.kwargs)} -> {outcome}")

    def cron_of(self, decl: Trigger) -> Cron:
        key = (decl.cron, decl.timezone)
        cron = self.crons.get(key)
        if cron is None:
            cron = Cron.parse(decl.cron, decl.timezone, now=self.epoch)
            self.crons[key] = cron
        return cron


_EMPTY: Final = StoreState(triggers={}, ledger={}, claimed_at_known=True)


def _scope_of(method: str, args: tuple[Any, ...]) -> str | None:
    """The one trigger a store call can touch, or ``None`` (it may touch all of them)."""
    if method == "register":
        return str(args[0].id)
    if method == "prune_fires" or not args or not isinstance(args[0], str):
        return None
    return args[0]


def _split(state: StoreState) -> dict[str, StoreState]:
    parts: dict[str, StoreState] = {}
    ledgers: dict[str, dict[tuple[str, int], Any]] = {tid: {} for tid in state.triggers}
    for key, row in state.ledger.items():
        ledgers.setdefault(key[0], {})[key] = row
    for tid, ledger in ledgers.items():
        trow = state.triggers.get(tid)
        parts[tid] = StoreState(
            triggers={} if trow is None else {tid: trow},
            ledger=ledger,
            claimed_at_known=state.claimed_at_known,
        )
    return parts


def _kw(kwargs: dict[str, Any]) -> str:
    if not kwargs:
        return ""
    return "{" + ", ".join(f"{k}={v!r}" for k, v in sorted(kwargs.items())) + "}"
