"""The simulation's write-fault world: runs executed by real ``LocalRunner`` processes.

With ``SimConfig(local_runner=True)`` the schedulers launch through the product's own runner:
a front :class:`~trio_triggers.LocalRunner` (``start``/``inspect``/``cancel``, not serving, as
the scheduler's process uses it) and ``owners`` serving LocalRunner processes that execute the
flows, stop at random (gracefully: a stop is a cancelled ``serve``) and restart under a new
owner identity. Their run store fails writes **before** the transaction (nothing written) and
**after** its commit (the write landed, the answer was lost), and now and then cuts one process
off the store for a while. A process can also be stopped right after one of its
``claim_and_own`` calls committed, while the answer is still on its way (as a cancelled call
into a worker thread returns): the stop then races the claim.

Checks made here (docs/simulation.md, "Write faults"):

* W1, a live owner leaves no run ``running`` without a worker for longer than a bound;
* W2, the ledger and the run agree: a boundary recorded ``failed`` before a run existed
  (its reservation as run id) has no run with its idempotency key;
* W3, a reservation whose claimant is alive is one the claimant is still working on (its
  launch task holds it) for no longer than a bound;
* W4, a process that stopped while it could reach its store leaves no run ``running``
  under its identity.
"""

from __future__ import annotations

import contextlib
import itertools
from typing import TYPE_CHECKING, Any

import trio

from .._errors import RunStoreError, TriggerError
from .._identities import idempotency_key, is_reservation
from .._local_runner import _TRANSIENT, LocalRunner, RunContext
from .._ownership import (
    HEARTBEAT_STALE_AFTER_MS,
    Activated,
    MemoryRunStore,
    OwnerId,
    lease_liveness,
)
from ._faults import RUN_STORE_READS, Fault, FaultKind, FaultyRunStore, partition_fault

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from .._clock import WallClock
    from .._ownership import LivenessEvidence, RunRow
    from .._scheduler import Scheduler
    from ._runner import RunState, StartRequestLike
    from ._sim_draws import Draws
    from ._sim_trace import Trace

__all__ = ["LOCAL_BUGS", "LocalWorldRunner", "plant_runner_bugs", "plant_scheduler_bugs"]

#: The planted bugs of this world: each one restores a behaviour the write-fault rule forbids.
LOCAL_BUGS = frozenset(
    {
        "outcome_write_once",
        "create_answer_trusted",
        "claim_answer_trusted",
        "compensation_swallowed",
    }
)

#: W1's bound: the lease's staleness, the longest partition and room for the repair's retries.
ORPHAN_BOUND_S = 150.0
#: W3's bound: a compensation's retries reach 5 s apart; a minute is many of them.
RESERVATION_BOUND_S = 60.0
_ACTIVE = frozenset({"pending", "running", "suspended"})
_CHECK_EVERY_S = 5.0


class _Process:
    def __init__(self, label: str, owner: OwnerId, runner: LocalRunner) -> None:
        self.label = label
        self.owner = owner
        self.runner = runner
        self.scope: trio.CancelScope | None = None


class _LaggingAnswers:
    """A process's view of the run store whose ``claim_and_own`` answers late, and whose
    process may be stopped between the commit and the answer."""

    def __init__(self, inner: FaultyRunStore, world: LocalWorldRunner, label: str) -> None:
        self._inner = inner
        self._world = world
        self._label = label

    async def claim_and_own(self, *args: Any, **kwargs: Any) -> Any:
        answer = await self._inner.claim_and_own(*args, **kwargs)
        world = self._world
        if isinstance(answer, Activated) and world.stop_on_claim():
            world.stop(self._label, "while its claim's answer was on its way")
        with trio.CancelScope(shield=True):
            await trio.sleep(0.01)  # the answer on its way back
        await trio.lowlevel.checkpoint()  # a stop is delivered here
        return answer

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class LocalWorldRunner:
    """The scheduler's :class:`~trio_triggers.Runner`: LocalRunner processes on one run store."""

    def __init__(
        self,
        trace: Trace,
        draws: Draws,
        clock: WallClock,
        owners: int,
        bugs: frozenset[str],
    ) -> None:
        self.trace = trace
        self.draws = draws
        self.clock = clock
        self.bugs = bugs
        self.owners = owners
        self.inner = MemoryRunStore(clock=clock)
        self.store = FaultyRunStore(self.inner, decide=self.decide, record=False)
        self.lease = lease_liveness(HEARTBEAT_STALE_AFTER_MS / 1000)
        self.flow_ids: list[str] = []
        self.front: LocalRunner | None = None
        self.processes: dict[str, _Process] = {}
        self.partitioned: dict[str, tuple[float, float]] = {}
        self.executing: dict[str, str] = {}
        self.orphans: dict[str, float] = {}
        self.runs: dict[str, str] = {}
        self.duplicate_starts = 0
        self.reservations: dict[str, str] = {}
        self.held_since: dict[str, tuple[str, float]] = {}
        self._numbers = itertools.count(1)

    # ------------------------------------------------------------------ faults

    def decide(self, caller: str, method: str, args: tuple[Any, ...]) -> Fault | None:
        if self.draws.quiet:
            return None
        cut = partition_fault(self.partitioned, caller)
        if cut is not None:
            return cut
        rng = self.draws.rng
        if rng.random() >= self.draws.config.run_store_fault_rate:
            return None
        if method in RUN_STORE_READS:
            self.trace.counts["local.fault.read"] += 1
            return Fault(kind="fail_before")
        kind: FaultKind = "fail_before" if rng.random() < 0.5 else "fail_after"
        self.trace.counts[f"local.fault.{kind}"] += 1
        return Fault(kind=kind)

    def stop_on_claim(self) -> bool:
        draws = self.draws
        return not draws.quiet and draws.rng.random() < draws.config.stop_on_claim_rate

    # ------------------------------------------------------------------ the processes

    def register_flows(self, flow_ids: list[str]) -> None:
        self.flow_ids = sorted(set(flow_ids))
        self.front = self._runner(
            self.store.view("runner"),
            OwnerId(host_id="host-front", pid=99, nonce="front"),
            "front",
        )

    def _flows(self, label: str) -> Mapping[str, Callable[[Any, RunContext], Any]]:
        async def flow(value: Any, run: RunContext) -> str:
            rng = self.draws.rng
            duration = rng.uniform(1, 12)
            fails = rng.random() < 0.1
            self.executing[run.run_id] = label
            self.trace.counts["local.executions"] += 1
            try:
                await trio.sleep(duration)
            finally:
                if self.executing.get(run.run_id) == label:
                    del self.executing[run.run_id]
            if fails:
                raise RuntimeError("the flow failed")
            return "ok"

        return dict.fromkeys(self.flow_ids, flow)

    def _runner(self, store: Any, owner: OwnerId, label: str) -> LocalRunner:
        runner = LocalRunner(
            store,
            self._flows(label),
            clock=self.clock,
            owner=owner,
            concurrency=8,
            poll_interval=5.0,
            cancel_poll_interval=5.0,
            liveness=self.liveness,
        )
        runner._new_run_id = lambda: f"run-{next(self._numbers)}"  # type: ignore[method-assign]
        plant_runner_bugs(self.bugs, runner)
        return runner

    async def liveness(self, expected_owner: OwnerId, context: Any) -> bool:
        """The default check's shape: alive while the lease is fresh, or while the owner's
        process lives (what ``same_host_pid_probe`` sees of a process on this host)."""
        if await self.lease(expected_owner, context):
            return True
        return any(process.owner == expected_owner for process in self.processes.values())

    def stop(self, label: str, why: str) -> None:
        process = self.processes.get(label)
        if process is None or process.scope is None or process.scope.cancel_called:
            return
        self.trace.counts["local.stops"] += 1
        self.trace.event(f"STOP {label} ({why})")
        process.scope.cancel()

    async def serve(self) -> None:
        async with trio.open_nursery() as nursery:
            for index in range(self.owners):
                nursery.start_soon(self._process, index)
            nursery.start_soon(self._watch)

    async def _process(self, index: int) -> None:
        draws = self.draws
        rng = draws.rng
        rate = draws.config.crashes_per_day / 86_400.0
        generation = 0
        while True:
            generation += 1
            label = f"w{index}.{generation}"
            owner = OwnerId(host_id=f"host-w{index}", pid=100 + index, nonce=f"g{generation}")
            view = _LaggingAnswers(self.store.view(label), self, label)
            process = _Process(label, owner, self._runner(view, owner, label))
            self.processes[label] = process
            self.trace.event(f"START {label}")
            with trio.CancelScope() as scope:
                process.scope = scope
                async with trio.open_nursery() as nursery:
                    await nursery.start(process.runner.serve)
                    if not draws.quiet and rng.random() < draws.config.partition_rate:
                        begin = trio.current_time() + rng.uniform(0, 600)
                        length = rng.uniform(20, 60)
                        self.partitioned[label] = (begin, begin + length)
                        self.trace.counts["local.partitions"] += 1
                    if draws.quiet or rate <= 0:
                        await trio.sleep_forever()
                    with trio.move_on_after(rng.expovariate(rate)):
                        await draws.quiet_event.wait()
                    if draws.quiet:
                        await trio.sleep_forever()
                    self.stop(label, "lifetime over")
            del self.processes[label]
            self._check_stopped(label, owner)
            self.trace.event(f"EXIT {label}")
            if not draws.quiet:
                with trio.move_on_after(rng.uniform(0, 120)):
                    await draws.quiet_event.wait()

    def _partitioned_lately(self, label: str) -> bool:
        window = self.partitioned.get(label)
        return window is not None and window[0] - 5 <= trio.current_time()

    def _check_stopped(self, label: str, owner: OwnerId) -> None:
        """W4: a process that stopped while it could reach its store left nothing running."""
        self.trace.checks["W4"] += 1
        if self._partitioned_lately(label):
            return
        for row in self.inner._rows.values():
            if row.status == "running" and row.owner == owner:
                self.trace.violated(
                    "W4", f"{label} stopped and left {row.run_id} running under its identity"
                )

    # ------------------------------------------------------------------ the Runner protocol

    async def start(self, request: StartRequestLike) -> str:
        assert self.front is not None
        draws = self.draws
        if not draws.quiet and draws.rng.random() < draws.config.runner_fault_rate:
            await trio.lowlevel.checkpoint()
            self.trace.counts["local.refused"] += 1
            raise TriggerError("runner", f"start of {request.idempotency_key} refused")
        run_id = await self.front.start(request)  # type: ignore[arg-type]
        key = request.idempotency_key
        if key in self.runs:
            self.duplicate_starts += 1
        self.runs[key] = run_id
        return run_id

    async def inspect(self, run_id: str) -> RunState:
        assert self.front is not None
        return await self.front.inspect(run_id)

    async def cancel(self, run_id: str) -> None:
        assert self.front is not None
        await self.front.cancel(run_id)

    # ------------------------------------------------------------------ truth for the checks

    def state_of(self, run_id: str) -> RunState:
        row = self.inner._rows.get(run_id)
        if row is None:
            return "missing"
        if row.status in _ACTIVE:
            return "active"
        state: RunState = row.status  # type: ignore[assignment]
        return state

    def stopped_for(self, run_id: str) -> float | None:
        row = self.inner._rows.get(run_id)
        if row is None or row.finished_at_ms is None:
            return None
        return (self.clock.now_ms() - row.finished_at_ms) / 1000

    def row_count(self) -> int:
        return len(self.inner._rows)

    def limit_remaining(self, seconds: float) -> None:
        pass  # flows are short; they end by themselves

    def run_of_key(self, key: str) -> RunRow | None:
        for row in self.inner._rows.values():
            if row.idempotency_key == key:
                return row
        return None

    # ------------------------------------------------------------------ the checks

    def check_failed_record(self, trigger_id: str, occurrence: int, run_id: str | None) -> None:
        """W2: ``failed`` with the reservation as run id only when no run has the key."""
        if not is_reservation(run_id):
            return
        self.trace.checks["W2"] += 1
        key = idempotency_key(trigger_id, occurrence)
        row = self.run_of_key(key)
        if row is not None:
            self.trace.violated(
                "W2", f"{key} recorded failed before a run existed, but {row.run_id} has its key"
            )

    def saw_claim(self, caller: str, answer: Any) -> None:
        """Remember who was granted each reservation (for W3)."""
        claim = getattr(answer, "claim", answer)
        reservation = getattr(claim, "reservation_id", None)
        if isinstance(reservation, str):
            self.reservations[reservation] = caller

    async def _watch(self) -> None:
        while True:
            await trio.sleep(_CHECK_EVERY_S)
            self._check_orphans()
            if self.check_reservations is not None:
                await self.check_reservations()

    check_reservations: Callable[[], Any] | None = None

    def _check_orphans(self) -> None:
        """W1: a live owner's ``running`` run without a worker is settled within a bound."""
        now = trio.current_time()
        live = {process.owner: process for process in self.processes.values()}
        seen: set[str] = set()
        self.trace.checks["W1"] += 1
        for row in self.inner._rows.values():
            if row.status != "running" or row.owner not in live:
                continue
            process = live[row.owner]
            if row.run_id in process.runner.running:
                continue
            seen.add(row.run_id)
            since = self.orphans.setdefault(row.run_id, now)
            if now - since > ORPHAN_BOUND_S:
                self.trace.violated(
                    "W1",
                    f"{row.run_id} running under live {process.label} with no worker "
                    f"for {now - since:.0f} s",
                )
        for run_id in list(self.orphans):
            if run_id not in seen:
                del self.orphans[run_id]

    def check_held(
        self, trigger_id: str, holder: str | None, claimant_working: Callable[[str], bool | None]
    ) -> None:
        """W3: a live claimant keeps working on the reservation it holds the trigger with."""
        now = trio.current_time()
        self.trace.checks["W3"] += 1
        if holder is None or not is_reservation(holder):
            self.held_since.pop(trigger_id, None)
            return
        claimant = self.reservations.get(holder)
        working = None if claimant is None else claimant_working(claimant)
        if working is None or working:
            self.held_since.pop(trigger_id, None)
            return
        first = self.held_since.get(trigger_id)
        if first is None or first[0] != holder:
            self.held_since[trigger_id] = (holder, now)
            return
        if now - first[1] > RESERVATION_BOUND_S:
            self.trace.violated(
                "W3",
                f"{trigger_id} held by {claimant}'s reservation for {now - first[1]:.0f} s "
                "while its claimant works on nothing for it",
            )


# --------------------------------------------------------------------------- planted bugs


def plant_runner_bugs(bugs: frozenset[str], runner: LocalRunner) -> None:
    """Restore, on one runner, the behaviour a planted write-fault bug names."""
    if "outcome_write_once" in bugs:
        _plant_outcome_write_once(runner)
    if "create_answer_trusted" in bugs:
        _plant_create_answer_trusted(runner)
    if "claim_answer_trusted" in bugs:
        _plant_claim_answer_trusted(runner)


def _plant_outcome_write_once(runner: LocalRunner) -> None:
    """One attempt at the outcome, one at the hand-back, and no repair of what is left."""

    async def finish(run_id: str, result: Any, output_json: str | None) -> bool:
        return await runner._finish_once(run_id, result, output_json)

    async def hand_back(run_id: str) -> bool:
        with (
            trio.CancelScope(shield=True),
            trio.move_on_after(5.0),
            contextlib.suppress(RunStoreError),
        ):
            await runner._store.transition_owned(run_id, runner.owner, "suspended")
        return False

    async def repair(run_id: str) -> None:
        await trio.lowlevel.checkpoint()

    runner._finish = finish  # type: ignore[method-assign]
    runner._hand_back = hand_back  # type: ignore[method-assign]
    runner._repair_orphan = repair  # type: ignore[method-assign]
    runner._unsettled = _Forgetful()


class _Forgetful(dict[str, Any]):
    """An outcome store that keeps nothing (the planted runner writes each outcome once)."""

    def __setitem__(self, key: str, value: Any) -> None:
        pass


def _plant_create_answer_trusted(runner: LocalRunner) -> None:
    """``start`` concludes from ``create``'s exception that no run exists."""
    import msgspec

    async def start(request: Any) -> str:
        try:
            outcome = await runner._store.create(
                runner._new_run_id(),
                "null",
                flow_id=request.flow_id,
                input_json=msgspec.json.encode(request.input).decode(),
                idempotency_key=request.idempotency_key,
            )
        except RunStoreError as exc:
            raise TriggerError("runner", "could not create the run") from exc
        return outcome.row.run_id

    runner.start = start  # type: ignore[method-assign]


def _plant_claim_answer_trusted(runner: LocalRunner) -> None:
    """``claim_and_own`` unshielded: a claim that commits during a stop is lost."""

    async def claim_and_own(
        row: RunRow, now: int, evidence: LivenessEvidence | None
    ) -> RunRow | None:
        try:
            outcome = await runner._store.claim_and_own(
                row.run_id, row, runner.owner, now, evidence
            )
        except RunStoreError as exc:
            if exc.code in _TRANSIENT:
                return None
            raise
        return row if isinstance(outcome, Activated) else None

    runner._claim_and_own = claim_and_own  # type: ignore[method-assign]


def plant_scheduler_bugs(bugs: frozenset[str], scheduler: Scheduler) -> None:
    """``compensation_swallowed``: one attempt at each compensation, its failure swallowed."""
    if "compensation_swallowed" not in bugs:
        return

    async def compensate(
        work: str, write: Callable[[], Any], settled: Any, trigger_id: str, extra: Any, **_: Any
    ) -> None:
        with contextlib.suppress(Exception):  # the planted bug: the failure is swallowed
            await write()

    scheduler._compensate = compensate  # type: ignore[method-assign]
