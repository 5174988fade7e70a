"""The simulator's final checks: what must hold once the world has been quiet for a while.

They run after the faults stopped, every crashed scheduler restarted, every run was allowed to
end and more than a reservation lease passed: T28 (every scheduler still ticks) just before the
schedulers stop, then, trigger by trigger, T31 (expired reservations are reached), T20 (every
dispatched occurrence ends with an outcome or stays owed; no boundary of an audited trigger is
lost) and T14 (history pages are consistent). What they compare with is what the
:class:`~trio_triggers.testing._sim_observe.StoreObserver` learned during the run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._constants import RESERVATION_LEASE_MS
from .._identities import is_reservation, reservation_occurrence
from .._store._models import HistoryQuery
from ._invariants import StoreState, TriggerRow, unfinished

if TYPE_CHECKING:
    from ._faults import FaultyTriggerStore
    from ._sim_observe import StoreObserver

__all__ = ["check_ticking", "final_checks"]


def check_ticking(obs: StoreObserver, alive: set[str]) -> None:
    """T28: every scheduler still ticks (a failed tick never stops ``serve``)."""
    now = obs.clock.now_ms()
    for caller in sorted(alive):
        cs = obs.callers[caller]
        obs.checks["T28"] += 1
        horizon = (obs.config.poll_interval + 120) * 1000
        if cs.last_list_ms is None or cs.last_list_ms < now - horizon:
            obs.violated("T28", f"{caller} stopped ticking (last list {cs.last_list_ms})")


async def final_checks(
    obs: StoreObserver,
    admin: FaultyTriggerStore,
    *,
    audited: set[str],
    quiet_start: int,
) -> None:
    """T31, T20, T14 and T40, trigger by trigger, on the final state."""
    assert obs.snapshot is not None
    state = obs.snapshot(None)
    now = obs.clock.now_ms()
    for tid in sorted(state.triggers):
        _reservations_reached(obs, state, tid, now)
        _dispatched_settled_or_owed(obs, state, tid)
        _granted_rows_exist(obs, state, tid)
        if tid in audited:
            _no_boundary_lost(obs, state.triggers[tid], quiet_start)
        await _history_consistent(obs, admin, tid)
        await _backfill_finished(obs, admin, state, tid)


def _reservations_reached(obs: StoreObserver, state: StoreState, tid: str, now: int) -> None:
    """T31: no reservation granted more than a lease (and two polls) ago still holds."""
    row = state.triggers[tid]
    holder = row.active_run_id
    slack = RESERVATION_LEASE_MS + 2 * obs.config.poll_interval * 1000 + 300_000
    obs.checks["T31"] += 1
    if is_reservation(holder):
        assert holder is not None
        granted_at = obs.grants.reservations.get(holder, row.active_claimed_at)
        if granted_at is None or granted_at < now - slack:
            obs.violated("T31", f"{tid}: reservation {holder!r} is still held at the end")


def _dispatched_settled_or_owed(obs: StoreObserver, state: StoreState, tid: str) -> None:
    """T20: launched rows of stopped runs are settled; unfinished rows are owed by someone."""
    row = state.triggers[tid]
    holder = row.active_run_id
    config = obs.config
    for (t, occ), fire in sorted(state.ledger.items()):
        if t != tid:
            continue
        obs.checks["T20"] += 1
        if fire.outcome == "launched" and fire.run_id is not None:
            truth = obs.runner.state_of(fire.run_id)
            stopped_for = obs.runner.stopped_for(fire.run_id)
            settle_within = config.run_poll_interval + config.poll_interval + 600
            late = stopped_for is None or stopped_for > settle_within
            if truth != "active" and late:
                obs.violated(
                    "T20", f"{tid}@{occ}: launched run {fire.run_id} is {truth}, unsettled"
                )
        if unfinished(fire):
            later = any(o > occ for o in obs.granted.get(tid, set()))
            owed = row.pending_at is not None and row.pending_at >= occ
            held = is_reservation(holder) and (reservation_occurrence(holder) or 0) >= occ
            if not (later or owed or held):
                obs.violated("T20", f"{tid}@{occ} is {fire.outcome} and owed by nobody")


def _granted_rows_exist(obs: StoreObserver, state: StoreState, tid: str) -> None:
    """T20: a granted claim's row exists (unless pruned after settling)."""
    for occ in sorted(obs.granted.get(tid, set())):
        if (tid, occ) not in state.ledger and occ not in obs.grants.ever_rows.get(tid, set()):
            obs.violated("T20", f"{tid}@{occ} was granted but has no ledger row")


def _no_boundary_lost(obs: StoreObserver, row: TriggerRow, quiet_start: int) -> None:
    """T20: an audited trigger (catch-up ``all``) owns a row for every boundary."""
    tid = row.trigger_id
    rows = sorted(obs.grants.ever_rows.get(tid, set()))
    decl = obs.declarations.get((tid, row.revision))
    if not rows or decl is None:
        return
    cron = obs.cron_of(decl)
    boundaries = cron.occurrences_between(rows[0], quiet_start - 1, limit=100_000)
    seen = set(rows)
    obs.checks["T20"] += len(boundaries)
    for b in boundaries:
        if b in seen:
            continue
            # Neither tick claims past a failed claim (docs/scheduler.md), so the cursor never
            # passes an owed boundary and every missing one is a violation, on every path.
        obs.violated("T20", f"{tid}: boundary {b} was never claimed")
        return


async def _backfill_finished(
    obs: StoreObserver, admin: FaultyTriggerStore, state: StoreState, tid: str
) -> None:
    """T40: a backfill started during the run has finished by the end (or was cancelled), and
    a finished one left a ledger row for every boundary of its interval (a row pruned since
    counts: the observer saw it), unless the schedule was edited under it (it then followed
    the new one)."""
    obs.checks["T40"] += 1
    started = obs.backfilled.get(tid)
    final = await admin.get(tid)
    if started is None or final is None or final.backfill is None:
        return
    backfill, cron, timezone = started
    if backfill is None or final.backfill.created_at != backfill.created_at:
        return
    if final.backfill.state == "running":
        obs.violated("T40", f"{tid}: a backfill still runs at the end ({final.backfill!r})")
        return
    if final.backfill.state != "done" or (final.cron, final.timezone) != (cron, timezone):
        return
    seen = obs.grants.ever_rows.get(tid, set()) | {o for (t, o) in state.ledger if t == tid}
    boundaries = obs.cron_of(final).occurrences_between(backfill.start - 1, backfill.end)
    missing = [b for b in boundaries if b not in seen]
    if missing:
        obs.violated("T40", f"{tid}: a finished backfill left boundaries {missing} without a row")


async def _history_consistent(obs: StoreObserver, admin: FaultyTriggerStore, tid: str) -> None:
    """T14: paging through the history gives the unpaged answer, newest first."""
    full = await admin.history(HistoryQuery(trigger_id=tid))
    paged: list[Any] = []
    cursor = None
    while True:
        page = await admin.history(HistoryQuery(trigger_id=tid, cursor=cursor, limit=3))
        paged.extend(page.items)
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    obs.checks["T14"] += 1
    if paged != full.items:
        obs.violated("T14", f"{tid}: paged history differs from the unpaged answer")
    occs = [r.occurrence for r in full.items]
    if occs != sorted(occs, reverse=True):
        obs.violated("T14", f"{tid}: history is not newest first")
