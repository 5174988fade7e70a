"""Store wrappers that record calls and inject faults, for both store protocols.

A :class:`FaultyTriggerStore` wraps any :class:`~trio_triggers.TriggerStore` and a
:class:`FaultyRunStore` any :class:`~trio_triggers.RunStore`.  Each call can be made to

* fail **before** its transaction (nothing is written, the caller sees the store's failure),
* fail **after** its transaction committed (the write happened, the caller still sees a failure:
  the "lost acknowledgement" every distributed system has),
* be **slow** (a Trio sleep before the call), or
* **hang** until it is cancelled or :meth:`Blocker.release` d.

Faults come from explicit scripts (:meth:`fail_next`, :meth:`block`) or from a ``decide``
callback (the simulator draws them from its seeded random generator).  An optional
:class:`CallObserver` sees every call that reaches the inner store just before and just after it
runs; with ``serialize=True`` those calls run one at a time behind a lock shared by every view of
the wrapper, so the observer's snapshots are exactly the state before and after that one
transaction.  (Store methods are atomic anyway, so serialising them loses no interleaving that
the contract allows.)
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar, final

import msgspec
import trio

from .._errors import RunStoreError, TriggerError
from .._ownership import HEARTBEAT_STALE_AFTER_MS
from .._store._engine import EngineStore
from .._store._protocol import NO_TRIGGER_WRITE_METHODS, TriggerStore
from .._wake import notify_registered

if TYPE_CHECKING:
    import builtins

    from .._declarations import Overlap, RegisteredTrigger, Trigger
    from .._ownership import _models as ownership
    from .._ownership._owner import OwnerId
    from .._store._attention import DueRow
    from .._store._models import (
        Claim,
        Dropped,
        Held,
        HistoryPage,
        HistoryQuery,
        Listed,
        ManualFire,
        PendingClaim,
        Result,
        Resumed,
        ResumePoint,
        SchedulerHeartbeat,
    )

__all__ = [
    "TRIGGER_STORE_READS",
    "Blocker",
    "CallObserver",
    "Fault",
    "FaultKind",
    "FaultyRunStore",
    "FaultyTriggerStore",
    "IndexedFaultyTriggerStore",
    "InjectedFault",
    "StoreCall",
    "partition_fault",
]

T = TypeVar("T")

FaultKind = Literal["fail_before", "fail_after", "slow", "hang"]

#: Trigger-store methods that write no declaration, held state or ledger row (their injected
#: failures say ``trigger store read failed``): the reads and ``due``, whose take writes only
#: ``attention_at_ms``, which no transition check reads (the simulator checks the index itself).
TRIGGER_STORE_READS = NO_TRIGGER_WRITE_METHODS
#: Run-store methods that never write.
RUN_STORE_READS = frozenset({"get", "find_claimable", "list_runs"})


class InjectedFault(Exception):
    """The cause chained under every failure a wrapper injects."""


class Fault(msgspec.Struct, frozen=True, kw_only=True):
    """One injected fault. ``error`` replaces the default store failure for the ``fail_*`` kinds."""

    kind: FaultKind
    delay: float = 0.0
    error: Exception | None = None


def partition_fault(partitioned: dict[str, tuple[float, float]], caller: str) -> Fault | None:
    """The fault a network partition gives ``caller`` now: every call inside its window
    ``[start, end)`` (Trio time) fails before reaching the store; a window that has ended is
    forgotten. No random draw: a partition is decided when it is drawn, not per call."""
    window = partitioned.get(caller)
    if window is None:
        return None
    now = trio.current_time()
    if window[0] <= now < window[1]:
        return Fault(kind="fail_before")
    if now >= window[1]:
        del partitioned[caller]
    return None


class StoreCall(msgspec.Struct, kw_only=True):
    """One recorded call: what was asked, by whom, which fault it met and how it ended."""

    seq: int
    caller: str
    method: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    fault: FaultKind | None = None
    reached: bool = False
    answer: Any = None
    error: BaseException | None = None
    done: bool = False


class CallObserver(Protocol):
    """Sees each call that reaches the inner store, right before and right after it runs."""

    async def before(self, call: StoreCall) -> None: ...

    async def after(self, call: StoreCall) -> None: ...


DecideFn = Callable[[str, str, tuple[Any, ...]], Fault | None]


@final
class Blocker:
    """Holds every call of one method until :meth:`release`; see :meth:`_FaultingBase.block`."""

    def __init__(self, method: str) -> None:
        self.method = method
        self.waiting: int = 0
        self._event = trio.Event()

    @property
    def released(self) -> bool:
        return self._event.is_set()

    def release(self) -> None:
        self._event.set()

    async def wait(self) -> None:
        self.waiting += 1
        try:
            await self._event.wait()
        finally:
            self.waiting -= 1


class _Shared:
    """State shared by every view of one wrapper."""

    def __init__(
        self, decide: DecideFn | None, observer: CallObserver | None, serialize: bool, record: bool
    ) -> None:
        self.decide = decide
        self.observer = observer
        self.lock: trio.Lock | None = trio.Lock() if serialize else None
        self.record = record
        self.calls: list[StoreCall] = []
        self.seq = itertools.count(1)
        self.scripted: dict[str, list[Fault]] = {}
        self.blockers: dict[str, Blocker] = {}
        self.enabled = True
        self.hang_release = trio.Event()


class _FaultingBase:
    _shared: _Shared
    caller: str

    def _init(
        self,
        *,
        decide: DecideFn | None,
        observer: CallObserver | None,
        serialize: bool,
        record: bool,
        caller: str,
    ) -> None:
        self._shared = _Shared(decide, observer, serialize, record)
        self.caller = caller

    # -- scripting ------------------------------------------------------------------------
    @property
    def calls(self) -> list[StoreCall]:
        """Every call made through any view, in order (when recording is on)."""
        return self._shared.calls

    def calls_of(self, method: str) -> list[StoreCall]:
        return [call for call in self._shared.calls if call.method == method]

    def fail_next(
        self,
        method: str,
        n: int = 1,
        error: Exception | None = None,
        *,
        after_commit: bool = False,
    ) -> None:
        """Make the next ``n`` calls of ``method`` fail (after their commit if asked)."""
        kind: FaultKind = "fail_after" if after_commit else "fail_before"
        self._shared.scripted.setdefault(method, []).extend(
            Fault(kind=kind, error=error) for _ in range(n)
        )

    def block(self, method: str) -> Blocker:
        """Hold every call of ``method`` (before it reaches the store) until released."""
        blocker = Blocker(method)
        self._shared.blockers[method] = blocker
        return blocker

    def release_hangs(self) -> None:
        """End every injected hang (present and future) with the method's failure."""
        self._shared.hang_release.set()

    def set_faults_enabled(self, enabled: bool) -> None:
        """Switch the ``decide`` callback on or off (scripted faults always apply)."""
        self._shared.enabled = enabled

    # -- the call path ----------------------------------------------------------------------
    def _failure(self, method: str, fault: Fault) -> Exception:
        raise NotImplementedError

    def _pick(self, method: str, args: tuple[Any, ...]) -> Fault | None:
        shared = self._shared
        queue = shared.scripted.get(method)
        if queue:
            return queue.pop(0)
        if shared.decide is not None and shared.enabled:
            return shared.decide(self.caller, method, args)
        return None

    async def _call(
        self,
        method: str,
        fn: Callable[..., Awaitable[T]],
        args: tuple[Any, ...],
        kwargs: dict[str, Any] | None = None,
    ) -> T:
        shared = self._shared
        kw = kwargs or {}
        fault = self._pick(method, args)
        call = StoreCall(
            seq=next(shared.seq),
            caller=self.caller,
            method=method,
            args=args,
            kwargs=kw,
            fault=fault.kind if fault is not None else None,
        )
        if shared.record:
            shared.calls.append(call)
        try:
            blocker = shared.blockers.get(method)
            if blocker is not None and not blocker.released:
                await blocker.wait()
            if fault is not None:
                if fault.kind == "slow":
                    await trio.sleep(fault.delay)
                elif fault.kind == "hang":
                    # Hangs until cancelled, or until release_hangs() (then fails).
                    await shared.hang_release.wait()
                    raise self._failure(method, fault)
                elif fault.kind == "fail_before":
                    await trio.lowlevel.checkpoint()
                    raise self._failure(method, fault)
            answer = await self._reach(call, fn, args, kw)
            if fault is not None and fault.kind == "fail_after":
                raise self._failure(method, fault)
            return answer
        except BaseException as exc:
            if call.error is None:
                call.error = exc
            raise
        finally:
            call.done = True

    async def _reach(
        self,
        call: StoreCall,
        fn: Callable[..., Awaitable[T]],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> T:
        shared = self._shared
        if shared.lock is None and shared.observer is None:
            call.reached = True
            answer = await fn(*args, **kwargs)
            call.answer = answer
            return answer
        if shared.lock is not None:
            await shared.lock.acquire()
        try:
            # Shielded: once the transaction has started it runs to its end (the contract says a
            # cancelled call either commits completely or not at all); the caller then sees its
            # cancellation at its next checkpoint.
            with trio.CancelScope(shield=True):
                if shared.observer is not None:
                    await shared.observer.before(call)
                call.reached = True
                try:
                    answer = await fn(*args, **kwargs)
                except Exception as exc:
                    call.error = exc
                    if shared.observer is not None:
                        await shared.observer.after(call)
                    raise
                call.answer = answer
                if shared.observer is not None:
                    await shared.observer.after(call)
            return answer
        finally:
            if shared.lock is not None:
                shared.lock.release()


class FaultyTriggerStore(_FaultingBase):
    """A :class:`~trio_triggers.TriggerStore` wrapper that records calls and injects faults.

    ``rewrite_listing(fn)`` makes ``list()`` answer ``fn(listing)`` (``triggers.md`` §18.2 case
    10).  ``view(caller)`` returns another wrapper over the same store, sharing the faults,
    records and lock, whose calls are tagged with ``caller`` (one per scheduler in a simulation).
    """

    def __init__(
        self,
        inner: TriggerStore,
        *,
        decide: DecideFn | None = None,
        observer: CallObserver | None = None,
        serialize: bool = False,
        record: bool = True,
        caller: str = "caller",
    ) -> None:
        self.inner = inner
        self._rewrite: Callable[[builtins.list[Listed]], builtins.list[Listed]] | None = None
        self._init(
            decide=decide, observer=observer, serialize=serialize, record=record, caller=caller
        )

    def view(self, caller: str) -> FaultyTriggerStore:
        clone = object.__new__(type(self))
        clone.__dict__.update(self.__dict__)
        clone.caller = caller
        return clone

    def rewrite_listing(
        self, fn: Callable[[builtins.list[Listed]], builtins.list[Listed]] | None
    ) -> None:
        self._rewrite = fn

    def _failure(self, method: str, fault: Fault) -> Exception:
        if fault.error is not None:
            return fault.error
        what = "read" if method in TRIGGER_STORE_READS else "write"
        err = TriggerError("store", f"trigger store {what} failed")
        err.__cause__ = InjectedFault(f"injected {fault.kind} fault in {method}")
        return err

    async def register(self, trigger: Trigger) -> RegisteredTrigger:
        answer: RegisteredTrigger = await self._call("register", self.inner.register, (trigger,))
        # The inner store woke the schedulers opened on *it*; this wrapper is a store object of
        # its own, so it wakes the schedulers opened on it (the store owns the wake-up).
        notify_registered(self)
        return answer

    async def get(self, trigger_id: str) -> RegisteredTrigger | None:
        return await self._call("get", self.inner.get, (trigger_id,))

    async def list(self) -> list[Listed]:
        answer: list[Listed] = await self._call("list", self.inner.list, ())
        if self._rewrite is not None:
            answer = self._rewrite(answer)
        return answer

    async def list_enabled(self) -> builtins.list[RegisteredTrigger]:
        return await self._call("list_enabled", self.inner.list_enabled, ())

    async def claim_fire(
        self,
        trigger_id: str,
        occurrence: int,
        *,
        expected_revision: int,
        resume_buffered: bool = False,
        dropped: Dropped | None = None,
    ) -> Claim:
        return await self._call(
            "claim_fire",
            self.inner.claim_fire,
            (trigger_id, occurrence),
            {
                "expected_revision": expected_revision,
                "resume_buffered": resume_buffered,
                "dropped": dropped,
            },
        )

    async def claim_pending(
        self, trigger_id: str, *, expected_revision: int
    ) -> PendingClaim | None:
        return await self._call(
            "claim_pending",
            self.inner.claim_pending,
            (trigger_id,),
            {"expected_revision": expected_revision},
        )

    async def record_result(self, result: Result) -> None:
        await self._call("record_result", self.inner.record_result, (result,))

    async def restore_pending(self, trigger_id: str, occurrence: int, reservation_id: str) -> None:
        await self._call(
            "restore_pending", self.inner.restore_pending, (trigger_id, occurrence, reservation_id)
        )

    async def set_pending(self, trigger_id: str, occurrence: int) -> None:
        await self._call("set_pending", self.inner.set_pending, (trigger_id, occurrence))

    async def active_run(self, trigger_id: str) -> str | None:
        return await self._call("active_run", self.inner.active_run, (trigger_id,))

    async def active_occurrence(self, trigger_id: str, run_id: str) -> int | None:
        return await self._call(
            "active_occurrence", self.inner.active_occurrence, (trigger_id, run_id)
        )

    async def clear_active(self, trigger_id: str, run_id: str) -> None:
        await self._call("clear_active", self.inner.clear_active, (trigger_id, run_id))

    async def history(self, query: HistoryQuery | None = None) -> HistoryPage:
        return await self._call("history", self.inner.history, (query,))

    async def prune_fires(self, older_than: int) -> int:
        return await self._call("prune_fires", self.inner.prune_fires, (older_than,))

    async def inspect(self, trigger_id: str) -> Held:
        return await self._call("inspect", self.inner.inspect, (trigger_id,))

    async def heartbeat(self, host: str) -> None:
        await self._call("heartbeat", self.inner.heartbeat, (host,))

    async def last_heartbeat(self) -> SchedulerHeartbeat | None:
        return await self._call("last_heartbeat", self.inner.last_heartbeat, ())

    # Operator state: methods of the built-in stores, outside the TriggerStore contract.

    async def pause(
        self, trigger_id: str, *, note: str | None = None, by: str | None = None
    ) -> RegisteredTrigger:
        answer: RegisteredTrigger = await self._call(
            "pause", self._engine().pause, (trigger_id,), {"note": note, "by": by}
        )
        return answer

    async def resume(self, trigger_id: str, *, point: ResumePoint) -> Resumed:
        answer: Resumed = await self._call(
            "resume", self._engine().resume, (trigger_id,), {"point": point}
        )
        notify_registered(self)  # as register: this wrapper's own schedulers wake
        return answer

    async def claim_manual(
        self,
        trigger_id: str,
        *,
        key: str | None = None,
        input: object = msgspec.UNSET,
        overlap: Overlap | None = None,
        by: str | None = None,
    ) -> ManualFire:
        inner = getattr(self.inner, "claim_manual", None)  # a built-in store, or a wrapper of one
        if inner is None:
            raise TypeError(f"{type(self.inner).__name__} has no manual fires")
        answer: ManualFire = await self._call(
            "claim_manual",
            inner,
            (trigger_id,),
            {"key": key, "input": input, "overlap": overlap, "by": by},
        )
        return answer

    async def start_backfill(
        self,
        trigger_id: str,
        *,
        start: int,
        end: int,
        max_boundaries: int | None = None,
        overlap: Overlap | None = None,
        by: str | None = None,
    ) -> RegisteredTrigger:
        answer: RegisteredTrigger = await self._call(
            "start_backfill",
            self._engine().start_backfill,
            (trigger_id,),
            {
                "start": start,
                "end": end,
                "max_boundaries": max_boundaries,
                "overlap": overlap,
                "by": by,
            },
        )
        notify_registered(self)  # as register: this wrapper's own schedulers wake
        return answer

    async def cancel_backfill(self, trigger_id: str) -> RegisteredTrigger:
        answer: RegisteredTrigger = await self._call(
            "cancel_backfill", self._engine().cancel_backfill, (trigger_id,)
        )
        return answer

    async def backfill_step(
        self, trigger_id: str, occurrence: int, *, expected_revision: int
    ) -> Claim:
        answer: Claim = await self._call(
            "backfill_step",
            self._engine().backfill_step,
            (trigger_id, occurrence),
            {"expected_revision": expected_revision},
        )
        return answer

    @property
    def keeps_operator_state(self) -> bool:
        """Whether the wrapped store has ``pause`` and ``resume`` (the built-in stores do)."""
        return isinstance(self.inner, EngineStore)

    def _engine(self) -> EngineStore:
        inner = self.inner
        if not isinstance(inner, EngineStore):
            raise TypeError(f"{type(inner).__name__} keeps no operator state")
        return inner


@final
class FaultyRunStore(_FaultingBase):
    """A :class:`~trio_triggers.RunStore` wrapper that records calls and injects faults.

    Injected failures are ``RunStoreError("persistence_failed", <method>, ...)``.
    """

    def __init__(
        self,
        inner: ownership.RunStore,
        *,
        decide: DecideFn | None = None,
        observer: CallObserver | None = None,
        serialize: bool = False,
        record: bool = True,
        caller: str = "caller",
    ) -> None:
        self.inner = inner
        self._init(
            decide=decide, observer=observer, serialize=serialize, record=record, caller=caller
        )

    def view(self, caller: str) -> FaultyRunStore:
        clone = object.__new__(FaultyRunStore)
        clone.__dict__.update(self.__dict__)
        clone.caller = caller
        return clone

    def _failure(self, method: str, fault: Fault) -> Exception:
        if fault.error is not None:
            return fault.error
        err = RunStoreError("persistence_failed", method, "injected fault")
        err.__cause__ = InjectedFault(f"injected {fault.kind} fault in {method}")
        return err

    async def create(
        self,
        run_id: str,
        state_json: str,
        *,
        flow_id: str | None = None,
        input_json: str | None = None,
        idempotency_key: str | None = None,
    ) -> ownership.Created | ownership.Existing:
        return await self._call(
            "create",
            self.inner.create,
            (run_id, state_json),
            {"flow_id": flow_id, "input_json": input_json, "idempotency_key": idempotency_key},
        )

    async def create_owned(
        self,
        run_id: str,
        state_json: str,
        *,
        owner: OwnerId,
        flow_id: str | None = None,
        input_json: str | None = None,
        idempotency_key: str | None = None,
    ) -> ownership.Created | ownership.Existing:
        """The inner store's ``create_owned``, planned and recorded as a ``create`` (it is
        one, made by a runner with room to execute the run)."""
        inner: Any = self.inner
        return await self._call(
            "create",
            inner.create_owned,
            (run_id, state_json),
            {
                "owner": owner,
                "flow_id": flow_id,
                "input_json": input_json,
                "idempotency_key": idempotency_key,
            },
        )

    async def get(self, run_id: str) -> ownership.RunRow:
        return await self._call("get", self.inner.get, (run_id,))

    async def claim(
        self, run_id: str, expected: ownership.Snapshotish, claimant: OwnerId, now_ms: int
    ) -> ownership.ClaimOutcome:
        return await self._call("claim", self.inner.claim, (run_id, expected, claimant, now_ms))

    async def activate(
        self, run_id: str, claimant: OwnerId, claimed_at_ms: int, expected: ownership.Snapshotish
    ) -> ownership.Activated | ownership.ClaimLost | ownership.SnapshotChanged:
        return await self._call(
            "activate", self.inner.activate, (run_id, claimant, claimed_at_ms, expected)
        )

    async def abandon_claim(
        self, run_id: str, claimant: OwnerId, claimed_at_ms: int
    ) -> ownership.Abandoned | ownership.ClaimLost:
        return await self._call(
            "abandon_claim", self.inner.abandon_claim, (run_id, claimant, claimed_at_ms)
        )

    async def claim_and_own(
        self,
        run_id: str,
        expected: ownership.Snapshotish,
        owner: OwnerId,
        now_ms: int,
        evidence: Any = None,
    ) -> ownership.ClaimAndOwnOutcome:
        return await self._call(
            "claim_and_own", self.inner.claim_and_own, (run_id, expected, owner, now_ms, evidence)
        )

    async def steal(
        self,
        run_id: str,
        expected: ownership.Snapshotish,
        claimant: OwnerId,
        now_ms: int,
        evidence: Any,
    ) -> ownership.StealOutcome:
        return await self._call(
            "steal", self.inner.steal, (run_id, expected, claimant, now_ms, evidence)
        )

    async def recover_claim(
        self,
        run_id: str,
        stale_claimant: OwnerId,
        claimed_at_ms: int,
        observer: OwnerId,
        now_ms: int,
        evidence: Any,
    ) -> (
        ownership.Recovered
        | ownership.NotFound
        | ownership.ClaimFresh
        | ownership.ClaimChanged
        | ownership.LivenessUnconfirmed
    ):
        return await self._call(
            "recover_claim",
            self.inner.recover_claim,
            (run_id, stale_claimant, claimed_at_ms, observer, now_ms, evidence),
        )

    async def heartbeat(
        self, run_id: str, owner: OwnerId, now_ms: int
    ) -> ownership.Updated | ownership.FenceLost | ownership.NotFound:
        return await self._call("heartbeat", self.inner.heartbeat, (run_id, owner, now_ms))

    async def reconfirm(
        self, run_id: str, owner: OwnerId, now_ms: int
    ) -> ownership.Updated | ownership.FenceLost | ownership.NotFound:
        return await self._call("reconfirm", self.inner.reconfirm, (run_id, owner, now_ms))

    async def transition_owned(
        self,
        run_id: str,
        owner: OwnerId,
        to_status: ownership.RunStatus,
        *,
        state_json: str | None = None,
        result_json: str | None = None,
        error: str | None = None,
        guard: ownership.TransitionGuard | None = None,
        output_json: str | None = None,
    ) -> ownership.Transitioned | ownership.FenceLost | ownership.NotFound | ownership.GuardFailed:
        return await self._call(
            "transition_owned",
            self.inner.transition_owned,
            (run_id, owner, to_status),
            {
                "state_json": state_json,
                "result_json": result_json,
                "error": error,
                "guard": guard,
                "output_json": output_json,
            },
        )

    async def retry_owned(
        self,
        run_id: str,
        owner: OwnerId,
        *,
        retry_at_ms: int,
        attempt_json: str,
        state_json: str | None = None,
    ) -> ownership.Transitioned | ownership.FenceLost | ownership.NotFound | ownership.GuardFailed:
        """The inner store's ``retry_owned`` (a write; faults as for ``transition_owned``)."""
        inner: Any = self.inner
        return await self._call(
            "retry_owned",
            inner.retry_owned,
            (run_id, owner),
            {"retry_at_ms": retry_at_ms, "attempt_json": attempt_json, "state_json": state_json},
        )

    async def request_cancel(
        self, run_id: str, now_ms: int
    ) -> (
        ownership.CancelRequested
        | ownership.AlreadyRequested
        | ownership.Terminal
        | ownership.NotFound
    ):
        return await self._call("request_cancel", self.inner.request_cancel, (run_id, now_ms))

    async def acknowledge_cancel(self, run_id: str, owner: OwnerId, now_ms: int) -> bool:
        return await self._call(
            "acknowledge_cancel", self.inner.acknowledge_cancel, (run_id, owner, now_ms)
        )

    # -- the local runner's additions (reads) -------------------------------------------------
    @property
    def stale_after_ms(self) -> int:
        """The inner store's staleness cutoff (what a :class:`~trio_triggers.LocalRunner`
        derives its takeover check from)."""
        value = getattr(self.inner, "stale_after_ms", None)
        return value if isinstance(value, int) else HEARTBEAT_STALE_AFTER_MS

    async def find_claimable(
        self, now_ms: int, *, limit: int | None = 100
    ) -> builtins.list[ownership.RunRow]:
        """The inner store's ``find_claimable`` (a read; faults as for ``get``)."""
        finder = getattr(self.inner, "find_claimable", None)
        if finder is None:
            raise TypeError(f"{type(self.inner).__name__} cannot list claimable runs")
        return await self._call("find_claimable", finder, (now_ms,), {"limit": limit})

    async def list_runs(self, **query: Any) -> builtins.list[ownership.RunRow]:
        """The inner store's ``list_runs`` (a read), for checks that look at every run."""
        lister = getattr(self.inner, "list_runs", None)
        if lister is None:
            raise TypeError(f"{type(self.inner).__name__} cannot list runs")
        return await self._call("list_runs", lister, (), query)


class IndexedFaultyTriggerStore(FaultyTriggerStore):
    """A :class:`FaultyTriggerStore` that also passes on the attention-index reads
    (``due``, ``next_attention``, ``holding``), so a scheduler on it takes the indexed tick.

    The inner store must have them (every built-in store does).
    """

    async def due(self, now: int, *, limit: int = 1024, hold_ms: int = 0) -> builtins.list[DueRow]:
        inner: Any = self.inner
        return await self._call("due", inner.due, (now,), {"limit": limit, "hold_ms": hold_ms})

    async def next_attention(self) -> int | None:
        inner: Any = self.inner
        return await self._call("next_attention", inner.next_attention, ())

    async def holding(self) -> builtins.list[DueRow]:
        inner: Any = self.inner
        return await self._call("holding", inner.holding, ())
