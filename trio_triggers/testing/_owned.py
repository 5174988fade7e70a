"""The simulation's run-store world: runs are rows, executed by owners under ``hold_lease``.

The runner creates a run row per idempotency key (``create`` deduplicates durably) and hands
it to one of ``owners`` worker slots. A worker claims it with ``claim_and_own``, runs the body
under ``hold_lease`` and finishes with ``transition_owned``. Workers crash (their scope is
cancelled, rows stay ``running`` with a stale stamp) and are partitioned from the store (every
call of one owner fails for a while, so its lease lapses); a reaper takes such runs over with
``lease-expired`` evidence once the stamp is more than the stale cutoff old.

Checks made here: O18 (an owner whose writes failed has stopped its body before a peer takes the
run over), O19 (``last_confirmed_ms`` never decreases), O21 (``on_lapse`` at most once, exactly
for a lapse) and O24 (``hold_lease`` exits normally only after the body returned).
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any, Literal

import trio

from .._errors import LeaseLost, RunStoreError, TriggerError
from .._ownership._liveness import LivenessEvidence
from .._ownership._memory import MemoryRunStore
from .._ownership._models import Activated, Created, RunRow
from .._ownership._owner import HEARTBEAT_STALE_AFTER_MS, OwnerId
from ._faults import Fault, FaultyRunStore, StoreCall, partition_fault
from ._run_checks import RunGrants, check_run_transition
from ._runner import RunPlan, RunState, StartRequestLike

if TYPE_CHECKING:
    from .._clock import WallClock
    from .._ownership._lease import Lease
    from ._sim_draws import Draws
    from ._sim_plant import LeaseHolder
    from ._sim_trace import Trace

__all__ = ["OwnedRunner"]

_ACTIVE = frozenset({"pending", "running", "suspended"})


class _Slot:
    def __init__(self, index: int) -> None:
        self.index = index
        self.generation = 0
        self.owner: OwnerId | None = None
        self.nursery: trio.Nursery | None = None
        self.scope: trio.CancelScope | None = None


class OwnedRunner:
    """A :class:`~trio_triggers.Runner` over a run store, with simulated run owners."""

    def __init__(
        self, trace: Trace, draws: Draws, clock: WallClock, owners: int, hold: LeaseHolder
    ) -> None:
        self.trace = trace
        self.draws = draws
        self.hold = hold
        self.clock = clock
        self.inner = MemoryRunStore(clock=clock)
        self.store = FaultyRunStore(
            self.inner, decide=self.decide, observer=self, serialize=True, record=False
        )
        self.runner_view = self.store.view("runner")
        self.grants = RunGrants()
        self.plans: dict[str, RunPlan] = {}
        self.deadlines: dict[str, float] = {}
        self.cancel_events: dict[str, trio.Event] = {}
        self.executing: dict[str, OwnerId] = {}
        self.alive: set[tuple[str, str]] = set()
        self.partitioned: dict[str, tuple[float, float]] = {}
        self.slots = [_Slot(i) for i in range(owners)]
        self.duplicate_starts = 0
        self.runs: dict[str, str] = {}
        self.starts = 0
        self._pre: dict[int, RunRow | None] = {}
        self.avoid: dict[str, OwnerId] = {}
        self._nursery: trio.Nursery | None = None
        self._ready_send, self._ready_recv = trio.open_memory_channel[str](math.inf)

    # ------------------------------------------------------------------ faults and checks

    def decide(self, caller: str, method: str, args: tuple[Any, ...]) -> Fault | None:
        if self.draws.quiet:
            return None
        cut = partition_fault(self.partitioned, caller)
        if cut is not None:
            return cut
        if self.draws.rng.random() >= self.draws.config.store_fault_rate:
            return None
        self.trace.counts["run_store.fault"] += 1
        return Fault(kind="fail_before" if self.draws.rng.random() < 0.6 else "fail_after")

    def _row(self, run_id: Any) -> RunRow | None:
        if not isinstance(run_id, str):
            return None
        return self.inner._rows.get(run_id)

    async def before(self, call: StoreCall) -> None:
        self._pre[call.seq] = self._row(call.args[0] if call.args else None)

    async def after(self, call: StoreCall) -> None:
        pre = self._pre.pop(call.seq, None)
        post = self._row(call.args[0] if call.args else None)
        self.trace.checks["O1"] += 1
        found = check_run_transition(
            method=call.method,
            args=call.args,
            answer=call.answer,
            error=call.error,
            pre=pre,
            post=post,
            grants=self.grants,
            now=self.clock.now_ms(),
        )
        for inv in ("O2", "O3", "O4", "O5", "O6", "O7", "O9", "O10", "O13", "O16", "O17"):
            self.trace.checks[inv] += 1
        for inv in ("O25", "O26", "O27", "O28"):
            self.trace.checks[inv] += 1
        if found:
            self.trace.fail(found[0])
        # O18: a takeover finds the displaced owner's body already stopped.
        if (
            call.method == "claim_and_own"
            and isinstance(call.answer, Activated)
            and pre is not None
            and pre.owner is not None
            and pre.owner != call.args[2]
        ):
            self.trace.checks["O18"] += 1
            if (pre.run_id, pre.owner.nonce + pre.owner.host_id) in self.alive:
                self.trace.violated(
                    "O18",
                    f"{pre.run_id}: taken over by {call.args[2].host_id} while the body of "
                    f"{pre.owner.host_id}/{pre.owner.nonce} still runs",
                )
        if call.method != "heartbeat" or call.error is not None:
            answer = f"!{type(call.error).__name__}" if call.error is not None else call.answer
            self.trace.event(f"{call.caller} run.{call.method}({call.args[0]!r}) -> {answer!r}")

    # ------------------------------------------------------------------ the Runner protocol

    async def start(self, request: StartRequestLike) -> str:
        await trio.lowlevel.checkpoint()
        self.starts += 1
        plan = self.draws.plan(request, 0)
        plan = RunPlan(
            start=plan.start,
            start_delay=plan.start_delay,
            duration=self.draws.rng.uniform(20, 200),
            outcome=plan.outcome,
        )
        key = request.idempotency_key
        if plan.start == "refuse":
            raise TriggerError("runner", f"start of {key} refused")
        if plan.start == "hang":
            await trio.sleep_forever()
        try:
            out = await self.runner_view.create(
                f"run-{self.starts}",
                "{}",
                flow_id=request.flow_id,
                input_json=json.dumps(request.input, sort_keys=True),
                idempotency_key=key,
            )
        except RunStoreError as exc:
            raise TriggerError("runner", f"start of {key} failed") from exc
        row = out.row
        if isinstance(out, Created):
            self.plans[row.run_id] = plan
            assert plan.duration is not None
            self.deadlines[row.run_id] = trio.current_time() + plan.duration
            self.runs[key] = row.run_id
            self._ready_send.send_nowait(row.run_id)
        else:
            self.duplicate_starts += 1
            if row.status == "pending" and row.run_id not in self.executing:
                self._ready_send.send_nowait(row.run_id)
        if plan.start == "hang_after_create":
            await trio.sleep_forever()
        if plan.start == "late":
            await trio.sleep(plan.start_delay)
        return row.run_id

    def _state(self, row: RunRow) -> RunState:
        if row.status in _ACTIVE:
            return "active"
        plan = self.plans.get(row.run_id)
        if plan is not None and plan.outcome == "missing":
            return "missing"
        state: RunState = row.status  # type: ignore[assignment]
        return state

    async def inspect(self, run_id: str) -> RunState:
        await trio.lowlevel.checkpoint()
        fault = self.draws.inspect_fault(run_id)
        if fault == "hang":
            await trio.sleep_forever()
        if fault == "fail":
            raise TriggerError("runner", f"inspection of {run_id} failed")
        try:
            row = await self.runner_view.get(run_id)
        except RunStoreError as exc:
            if exc.code == "not_found_row":
                return "missing"
            raise TriggerError("runner", f"inspection of {run_id} failed") from exc
        return self._state(row)

    async def cancel(self, run_id: str) -> None:
        await trio.lowlevel.checkpoint()
        fault = self.draws.cancel_fault(run_id)
        if fault == "hang":
            await trio.sleep_forever()
        if fault == "fail":
            raise TriggerError("runner", f"cancel of {run_id} failed")
        try:
            await self.runner_view.request_cancel(run_id, self.clock.now_ms())
        except RunStoreError as exc:
            raise TriggerError("runner", f"cancel of {run_id} failed") from exc
        self.cancel_events.setdefault(run_id, trio.Event()).set()

    # ------------------------------------------------------------------ truth for the checks

    def state_of(self, run_id: str) -> RunState:
        row = self._row(run_id)
        return "missing" if row is None else self._state(row)

    def stopped_for(self, run_id: str) -> float | None:
        row = self._row(run_id)
        if row is None or row.finished_at_ms is None:
            return None
        return (self.clock.now_ms() - row.finished_at_ms) / 1000

    def row_count(self) -> int:
        """How many run rows the world created."""
        return len(self.inner._rows)

    def limit_remaining(self, seconds: float) -> None:
        pass  # owned runs are short; they end by themselves

    # ------------------------------------------------------------------ owners

    async def serve(self) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            for slot in self.slots:
                nursery.start_soon(self._slot, slot)
            nursery.start_soon(self._dispatch)

    async def _dispatch(self) -> None:
        async for run_id in self._ready_recv:
            self.hand_out(run_id)

    def hand_out(self, run_id: str, delay: float = 0.0) -> None:
        avoid = {self.executing.get(run_id), self.avoid.get(run_id)}
        live = [slot for slot in self.slots if slot.nursery is not None and slot.owner not in avoid]
        if not live:
            self._later(run_id, 30.0)
            return
        slot = live[self.draws.rng.randrange(len(live))]
        assert slot.nursery is not None
        slot.nursery.start_soon(self._execute, slot, run_id, delay)

    def _later(self, run_id: str, delay: float) -> None:
        async def later() -> None:
            await trio.sleep(delay)
            self.hand_out(run_id)

        assert self._nursery is not None
        self._nursery.start_soon(later)

    async def _slot(self, slot: _Slot) -> None:
        rate = self.draws.config.crashes_per_day / 86_400.0
        while True:
            slot.generation += 1
            slot.owner = OwnerId(
                host_id=f"host-w{slot.index}", pid=100 + slot.index, nonce=f"g{slot.generation}"
            )
            with trio.CancelScope() as scope:
                slot.scope = scope
                async with trio.open_nursery() as nursery:
                    slot.nursery = nursery
                    if self.draws.quiet or rate <= 0:
                        await trio.sleep_forever()
                    with trio.move_on_after(self.draws.rng.expovariate(rate)):
                        await self.draws.quiet_event.wait()
                    if self.draws.quiet:
                        await trio.sleep_forever()
                    self.trace.event(f"CRASH owner {slot.owner.host_id}/{slot.owner.nonce}")
                    self.trace.counts["owner_crashes"] += 1
                    slot.nursery = None
                    nursery.cancel_scope.cancel()
            slot.nursery = None
            # Every run this owner was executing is now orphaned: a peer takes it over later.
            for run_id, owner in sorted(self.executing.items()):
                if owner == slot.owner:
                    del self.executing[run_id]
                    self._later(run_id, HEARTBEAT_STALE_AFTER_MS / 1000 + 1)
            if not self.draws.quiet:
                with trio.move_on_after(self.draws.rng.uniform(0, 600)):
                    await self.draws.quiet_event.wait()

    async def _execute(self, slot: _Slot, run_id: str, delay: float) -> None:
        if delay:
            await trio.sleep(delay)
        owner = slot.owner
        assert owner is not None
        if self.executing.get(run_id) == owner:
            return
        caller = f"{owner.host_id}/{owner.nonce}"
        store = self.store.view(caller)
        try:
            row = await store.get(run_id)
        except RunStoreError:
            self._later(run_id, 10.0)
            return
        if row.status not in _ACTIVE:
            return
        now = self.clock.now_ms()
        evidence = None
        if row.status == "running":
            assert row.owner is not None
            if row.owner == owner:
                # Our own earlier attempt left it (its body has ended): let a peer take over.
                self.avoid[run_id] = owner
                self._later(run_id, HEARTBEAT_STALE_AFTER_MS / 1000 + 1)
                return
            if row.heartbeat_at_ms is not None and row.heartbeat_at_ms >= now - (
                HEARTBEAT_STALE_AFTER_MS
            ):
                wait = (row.heartbeat_at_ms + HEARTBEAT_STALE_AFTER_MS + 1 - now) / 1000
                self._later(run_id, max(wait, 1.0))
                return
            evidence = LivenessEvidence(
                expected_owner=row.owner, checked_at_ms=now, kind="lease-expired"
            )
        try:
            got = await store.claim_and_own(run_id, row, owner, now, evidence)
        except RunStoreError:
            self._later(run_id, 10.0)
            return
        if not isinstance(got, Activated):
            if run_id not in self.executing:
                self._later(run_id, 15.0)
            return
        self.executing[run_id] = owner
        if not self.draws.quiet and self.draws.rng.random() < self.draws.config.partition_rate:
            # Cut this owner off the store for a while, starting somewhere inside the run.
            begin = trio.current_time() + self.draws.rng.uniform(0, 30)
            length = self.draws.rng.uniform(25, 90)
            self.partitioned[caller] = (begin, begin + length)
            self.trace.counts["owner_partitions"] += 1
            self.trace.event(
                f"PARTITION {caller} from +{begin - trio.current_time():.1f} s for {length:.1f} s"
            )
            self._later(run_id, begin - trio.current_time() + HEARTBEAT_STALE_AFTER_MS / 1000 + 1)
        await self._own(store, run_id, owner)

    async def _own(self, store: FaultyRunStore, run_id: str, owner: OwnerId) -> None:
        me = (run_id, owner.nonce + owner.host_id)
        lapses = 0
        body_returned = False

        async def on_lapse(unconfirmed: int) -> None:
            nonlocal lapses
            lapses += 1

        hold = self.hold
        self.alive.add(me)
        lost: LeaseLost | None = None
        try:
            try:
                async with hold(store, run_id, owner, clock=self.clock, on_lapse=on_lapse) as lease:
                    await self._body(store, run_id, owner, lease)
                    body_returned = True
            except LeaseLost as exc:
                lost = exc
            except RunStoreError:
                pass
        finally:
            self.alive.discard(me)
            if self.executing.get(run_id) == owner:
                del self.executing[run_id]
        self.trace.checks["O21"] += 1
        self.trace.checks["O24"] += 1
        if lapses > 1 or (lapses == 1) != (lost is not None and lost.reason == "lapsed"):
            self.trace.violated(
                "O21", f"{run_id}: on_lapse called {lapses} times, loop ended with {lost}"
            )
        if lost is not None or not body_returned:
            row = self._row(run_id)
            if row is not None and row.status in _ACTIVE:
                self._later(run_id, HEARTBEAT_STALE_AFTER_MS / 1000 + 1)

    async def _body(self, store: FaultyRunStore, run_id: str, owner: OwnerId, lease: Lease) -> None:
        event = self.cancel_events.setdefault(run_id, trio.Event())
        deadline = self.deadlines.get(run_id, trio.current_time())
        last = lease.last_confirmed_ms
        while trio.current_time() < deadline and not event.is_set():
            with trio.move_on_after(min(5.0, max(deadline - trio.current_time(), 0.0))):
                await event.wait()
            self.trace.checks["O19"] += 1
            if lease.last_confirmed_ms < last:
                self.trace.violated(
                    "O19", f"{run_id}: last_confirmed_ms fell {last} -> {lease.last_confirmed_ms}"
                )
            last = lease.last_confirmed_ms
        row = self._row(run_id)
        plan = self.plans.get(run_id)
        status: Literal["completed", "failed", "cancelled"] = "completed"
        if event.is_set() or (row is not None and row.cancel_requested_at_ms is not None):
            await store.acknowledge_cancel(run_id, owner, self.clock.now_ms())
            status = "cancelled"
        elif plan is not None and plan.outcome in ("failed", "cancelled"):
            status = plan.outcome
        await store.transition_owned(
            run_id,
            owner,
            status,
            result_json="{}" if status == "completed" else None,
            error=None if status == "completed" else f"run {status}",
        )
