"""The simulator's planted bugs: known mistakes behind test-only switches.

``SimConfig(planted_bugs=(...))`` switches them on, to prove that the checkers catch them
(``docs/simulation.md``, "Proving the checkers"). None of them edits library code: they wrap
the trigger store (:func:`plant_store_bugs`), give the scheduler a
:class:`~trio_triggers._scheduler._hook.SchedulerHook` (:func:`claim_hook`), cancel the runs
of a closing scheduler (:func:`cancel_owned_runs`), or swap the run owners' lease holder
(:func:`lease_holder`).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Final

import trio

from .._cron import Cron
from .._errors import RunStoreError, TriggerError
from .._identities import is_reservation, reservation_occurrence
from .._ownership._lease import hold_lease
from .._ownership._models import Updated
from .._scheduler._hook import NO_HOOK, SchedulerHook
from .._store._memory import MemoryTriggerStore

if TYPE_CHECKING:
    from .._clock import WallClock
    from .._declarations import RegisteredTrigger
    from .._ownership._owner import OwnerId
    from .._scheduler._core import Scheduler
    from .._store._models import Result
    from .._store._protocol import TriggerStore
    from ._faults import FaultyRunStore

__all__ = [
    "PLANTED_BUGS",
    "LeaseHolder",
    "cancel_owned_runs",
    "check_planted_bugs",
    "claim_hook",
    "lease_holder",
    "plant_store_bugs",
]

#: Test-only switches that plant known bugs, to prove the checkers catch them.
PLANTED_BUGS: Final = frozenset(
    {
        "watermark_before_dispatch",
        "skip_revision_fence",
        "cancel_runs_on_exit",
        "ignore_heartbeat_failures",
        "attention_not_moved",
        "stale_ledger_under_lock",
        "drop_predecessor",
        "claim_past_failed_claim",
        "manual_moves_cursor",
        # The write-fault world's (_sim_local): each restores a behaviour its rule forbids.
        "outcome_write_once",
        "create_answer_trusted",
        "claim_answer_trusted",
        "compensation_swallowed",
    }
)


def check_planted_bugs(bugs: tuple[str, ...]) -> frozenset[str]:
    """The planted bugs as a set; ``ValueError`` for a name that is not one."""
    unknown = sorted(set(bugs) - PLANTED_BUGS)
    if unknown:
        raise ValueError(f"unknown planted bugs: {unknown}")
    return frozenset(bugs)


# --------------------------------------------------------------------------- the store


def plant_store_bugs(bugs: frozenset[str], store: TriggerStore) -> TriggerStore:
    """``store``, wrapped by the planted store bugs that apply to it."""
    inner = store
    if "skip_revision_fence" in bugs:
        inner = _FenceSkippingStore(inner)
    if "attention_not_moved" in bugs and isinstance(store, MemoryTriggerStore):
        inner = _StaleIndexStore(store)
    if "stale_ledger_under_lock" in bugs and isinstance(store, MemoryTriggerStore):
        inner = _StaleLedgerStore(store)
    if "drop_predecessor" in bugs and isinstance(store, MemoryTriggerStore):
        inner = _PredecessorDroppingStore(store)
    if "manual_moves_cursor" in bugs and isinstance(store, MemoryTriggerStore):
        inner = _ManualCursorStore(store)
    return inner


class _WrappedStore:
    """A store wrapper for a planted bug: everything not overridden goes to ``_inner``."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _ManualCursorStore(_WrappedStore):
    """Planted bug: recording a manual fire's result moves the trigger's cursor to the fire's
    instant, as a boundary's result does (the one thing a manual fire must never do)."""

    _inner: MemoryTriggerStore

    async def record_result(self, result: Result) -> None:
        await self._inner.record_result(result)
        tables = self._inner._raw_tables()  # noqa: SLF001 (the bug edits the store's tables)
        fire = tables.fires.get(result.trigger_id, {}).get(result.occurrence)
        row = tables.triggers.get(result.trigger_id)
        if fire is None or row is None or fire.get("manual_key") is None:
            return
        cursor = row.get("last_fired_at_ms")
        if not isinstance(cursor, int) or cursor < result.occurrence:
            row["last_fired_at_ms"] = result.occurrence


class _StaleLedgerStore(_WrappedStore):
    """Planted bug: a claim reads the trigger row as it is but the ledger as it was before
    a concurrent claim of the same occurrence (what one PostgreSQL statement joining the ledger
    under a waited row lock did, READ COMMITTED). Emulated on the memory store: a claim of an
    occurrence whose own reservation holds the trigger runs with that ledger row hidden, then
    the row is put back carrying what the claim wrote to it."""

    _inner: MemoryTriggerStore

    async def claim_fire(
        self,
        trigger_id: str,
        occurrence: int,
        *,
        expected_revision: int,
        resume_buffered: bool = False,
        dropped: Any = None,
    ) -> Any:
        tables = self._inner._raw_tables()  # noqa: SLF001 (the bug edits the store's tables)
        row = tables.triggers.get(trigger_id)
        fires = tables.fires.get(trigger_id, {})
        hidden = None
        if (
            row is not None
            and reservation_occurrence(_text_or_none(row.get("active_run_id"))) == occurrence
            and occurrence in fires
            and fires[occurrence]["outcome"] is None
        ):
            hidden = fires.pop(occurrence)
        try:
            return await self._inner.claim_fire(
                trigger_id,
                occurrence,
                expected_revision=expected_revision,
                resume_buffered=resume_buffered,
                dropped=dropped,
            )
        finally:
            if hidden is not None:
                written = fires.get(occurrence)
                if written is not None:
                    hidden.update({k: v for k, v in written.items() if k == "outcome"})
                fires[occurrence] = hidden


def _text_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


class _PredecessorDroppingStore(_WrappedStore):
    """Planted bug: a released reservation's recorded predecessor is restored only under
    ``supersede`` (the contract's §10.2 step 3 read literally). After an edit away from
    ``supersede`` the launched predecessor is dropped: the call that released the reservation
    is followed by ``clear_active`` of the restored run. Memory store only."""

    _inner: MemoryTriggerStore

    async def _dropping(self, method: str, trigger_id: str, *args: Any, **kwargs: Any) -> Any:
        tables = self._inner._raw_tables()  # noqa: SLF001 (the bug reads the store's tables)
        before = tables.triggers.get(trigger_id, {}).get("active_run_id")
        answer = await getattr(self._inner, method)(trigger_id, *args, **kwargs)
        row = tables.triggers.get(trigger_id)
        if row is None or not is_reservation(_text_or_none(before)):
            return answer
        holder = _text_or_none(row.get("active_run_id"))
        if holder is None or holder == before or is_reservation(holder):
            return answer
        current = await self._inner.get(trigger_id)
        if current is not None and current.overlap != "supersede":
            await self._inner.clear_active(trigger_id, holder)
        return answer

    async def claim_fire(self, trigger_id: str, *args: Any, **kwargs: Any) -> Any:
        return await self._dropping("claim_fire", trigger_id, *args, **kwargs)

    async def claim_pending(self, trigger_id: str, *args: Any, **kwargs: Any) -> Any:
        return await self._dropping("claim_pending", trigger_id, *args, **kwargs)

    async def active_run(self, trigger_id: str, *args: Any, **kwargs: Any) -> Any:
        answer = await self._dropping("active_run", trigger_id, *args, **kwargs)
        # The caller is told what holds the trigger now (nothing, once the bug dropped it).
        tables = self._inner._raw_tables()  # noqa: SLF001 (the bug reads the store's tables)
        row = tables.triggers.get(trigger_id)
        return answer if row is None or row.get("active_run_id") is not None else None


class _StaleIndexStore(_WrappedStore):
    """Planted bug: ``record_result`` leaves the row's attention instant where it was (an
    index entry one write does not move). Memory store only."""

    _inner: MemoryTriggerStore

    async def record_result(self, result: Result) -> None:
        tables = self._inner._raw_tables()  # noqa: SLF001 (the bug edits the store's tables)
        row = tables.triggers.get(result.trigger_id)
        before = None if row is None else row.get("attention_at_ms")
        await self._inner.record_result(result)
        if row is not None:
            row["attention_at_ms"] = before
            tables.index(result.trigger_id, before)


class _FenceSkippingStore(_WrappedStore):
    """Planted bug: claims ignore ``expected_revision`` (the revision fence is skipped)."""

    _inner: TriggerStore

    async def claim_fire(
        self,
        trigger_id: str,
        occurrence: int,
        *,
        expected_revision: int,
        resume_buffered: bool = False,
        dropped: Any = None,
    ) -> Any:
        current = await self._inner.get(trigger_id)
        revision = current.revision if current is not None else expected_revision
        return await self._inner.claim_fire(
            trigger_id,
            occurrence,
            expected_revision=revision,
            resume_buffered=resume_buffered,
            dropped=dropped,
        )

    async def claim_pending(self, trigger_id: str, *, expected_revision: int) -> Any:
        current = await self._inner.get(trigger_id)
        revision = current.revision if current is not None else expected_revision
        return await self._inner.claim_pending(trigger_id, expected_revision=revision)


# --------------------------------------------------------------------------- the scheduler


class _FailedClaimBug(SchedulerHook):
    """What both planted claim bugs share: a claim that fails (but for a revision mismatch, which
    the scheduler handles itself) goes to :meth:`failed`, where the bug lives."""

    async def around_claim(
        self,
        claim: Callable[[RegisteredTrigger, int], Awaitable[None]],
        trigger: RegisteredTrigger,
        occurrence: int,
    ) -> None:
        try:
            await claim(trigger, occurrence)
        except TriggerError as err:
            if err.code == "revision_mismatch" or not await self.failed(claim, trigger, occurrence):
                raise

    async def failed(
        self,
        claim: Callable[[RegisteredTrigger, int], Awaitable[None]],
        trigger: RegisteredTrigger,
        occurrence: int,
    ) -> bool:
        """The bug's answer to the failed claim of ``occurrence``: whether to swallow it."""
        raise NotImplementedError


class _SwallowingClaims(_FailedClaimBug):
    """Planted bug ``watermark_before_dispatch``: a failed dispatch is treated as done, so the
    watermark passes it."""

    async def failed(
        self,
        claim: Callable[[RegisteredTrigger, int], Awaitable[None]],
        trigger: RegisteredTrigger,
        occurrence: int,
    ) -> bool:
        return True


class _ClaimingPastFailures(_FailedClaimBug):
    """Planted bug ``claim_past_failed_claim``: after a failed claim the tick goes on to claim
    the trigger's later due boundaries (the reference listing tick's way), so the shared fire
    cursor passes a boundary that is still owed; then the failure is raised as usual."""

    def __init__(self, clock: WallClock) -> None:
        self._clock = clock

    async def failed(
        self,
        claim: Callable[[RegisteredTrigger, int], Awaitable[None]],
        trigger: RegisteredTrigger,
        occurrence: int,
    ) -> bool:
        cron = Cron.parse(trigger.cron, trigger.timezone)
        later = cron.occurrences_between(occurrence, self._clock.now_ms(), limit=10)
        for after in later:
            with contextlib.suppress(TriggerError):
                await claim(trigger, after)
        return False


def claim_hook(bugs: frozenset[str], clock: WallClock) -> SchedulerHook:
    """The scheduler hook a planted claim bug needs (:data:`NO_HOOK` without one)."""
    if "watermark_before_dispatch" in bugs:
        return _SwallowingClaims()
    if "claim_past_failed_claim" in bugs:
        return _ClaimingPastFailures(clock)
    return NO_HOOK


async def cancel_owned_runs(
    bugs: frozenset[str], scheduler: Scheduler, cancel: Callable[[str], Awaitable[None]]
) -> None:
    """Planted bug ``cancel_runs_on_exit``: closing a scheduler cancels every run it owns."""
    if "cancel_runs_on_exit" not in bugs:
        return
    with trio.CancelScope(shield=True):
        for entry in sorted(scheduler.owned().values(), key=lambda entry: str(entry.run_id)):
            if not is_reservation(entry.run_id):
                with contextlib.suppress(Exception):
                    await cancel(entry.run_id)


# --------------------------------------------------------------------------- the run owners


#: What the run owners hold a lease with: ``hold_lease``, or a planted one.
LeaseHolder = Callable[..., Any]


def lease_holder(bugs: frozenset[str]) -> LeaseHolder:
    """``hold_lease``, or the planted one under ``ignore_heartbeat_failures``."""
    return _planted_hold_lease if "ignore_heartbeat_failures" in bugs else hold_lease


@asynccontextmanager
async def _planted_hold_lease(
    run_store: FaultyRunStore,
    run_id: str,
    owner: OwnerId,
    *,
    clock: WallClock,
    on_lapse: Callable[[int], Any] | None = None,
) -> AsyncIterator[Any]:
    """Planted bug: a heartbeat loop that ignores write failures and never lapses."""

    class _View:
        last_confirmed_ms = clock.now_ms()

    view = _View()

    async def pulses() -> None:
        while True:
            await trio.sleep(1)
            try:
                got = await run_store.heartbeat(run_id, owner, clock.now_ms())
            except RunStoreError:
                continue  # the bug: failures are ignored, the body keeps running
            if isinstance(got, Updated):
                view.last_confirmed_ms = clock.now_ms()
            else:
                return

    body_error: BaseException | None = None
    async with trio.open_nursery() as nursery:
        nursery.start_soon(pulses)
        try:
            yield view
        except BaseException as exc:
            body_error = exc
        finally:
            nursery.cancel_scope.cancel()
    if body_error is not None:
        raise body_error
